#!/usr/bin/env bash
# The GPU check, for a short window: one H200 for ~15 minutes including start-up, commands
# of at most 10 minutes, at most 8 result files back. This script runs in at most 7 minutes,
# in priority order, each step under its own timeout and only if the clock leaves it room,
# and writes 4 files under $OUT (default /tmp/trot-gpu-check), appending each result as
# soon as it is measured, so that a timeout loses nothing:
#   gpu_check.log  everything printed      results.md  the table for docs/benchmarks.md
#   pytest.log     the mjx tests on CUDA   curve.csv   the training run's evals
#
#   bash benchmarks/gpu_check.sh            # on the GPU machine
#   DRY=1 bash benchmarks/gpu_check.sh      # this CPU: the same steps at small sizes
#
# The GPU machine has no network, Python 3.12, torch 2.11 and JAX 0.11 with CUDA 13, and no
# mujoco, mujoco-mjx or warp-lang. What it lacks travels as wheels in the working tree
# (shared/wheels/, wheels/ or .whl/, the first that exists; 32 MB, within the 64 MiB the
# tree may carry), downloaded on a machine with the package registries, at the versions
# installed there (`pip show mujoco`; 4.0.1 on 2026-12-04):
#
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#       --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 -d wheels \
#       mujoco==4.0.1 mujoco-core==4.0.1 mujoco-studio==4.0.1 mujoco-studio-wasm==4.0.1 \
#       mujoco-mjx==3.17.0 trimesh glfw pyopengl websockets tyro docstring-parser typeguard
#
# warp-lang (~150 MB) cannot travel, so MJX runs its JAX implementation on the GPU (impl
# "jax"); the import step says so. Order: 1 install and import check with versions, then
# a probe of where MJX breaks (benchmarks/gpu_probe.py; XLA's command buffers turned off
# if that is what lets trot's step run); 2 the
# mjx tests on CUDA (cartpole, Go1, G1; TROT_TEST_DEVICE=cuda); 3 go1-flat physics only
# (from the env loop's own states), env loop and training env-steps/s at 1024 and 4096
# envs; 4 a go1-flat training run on the GPU of up to 3 minutes (what the window leaves,
# at least 2), evaluated at the end with the
# tracking metrics (128 episodes on MuJoCo C); 5 if time remains: Sebulba (go1-flat on
# MuJoCo C on the host cores, the learner on the GPU) at 1024 envs, then go1-rough and
# g1-flat on mjx.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
OUTDIR=${OUT:-/tmp/trot-gpu-check}
mkdir -p "$OUTDIR"
RES="$OUTDIR/results.md"
exec > >(tee -a "$OUTDIR/gpu_check.log") 2>&1
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX shares the GPU with torch
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/trot-jax-cache}
if [ "${DRY:-0}" = "1" ]; then  # this CPU, small: every step runs, nothing is meaningful
  DEV=cpu; SIZES=64; TRAIN_ENVS=64; TRAIN_S=18; MIN_TRAIN_S=12; EPISODES=8; LIMIT=900
  TESTS="tests/test_mjx.py tests/test_hosted.py"
else
  DEV=cuda; SIZES=1024,4096; TRAIN_ENVS=4096; TRAIN_S=180; MIN_TRAIN_S=120; EPISODES=128
  LIMIT=420
  TESTS="tests/test_mjx.py tests/test_hosted.py tests/test_go1_mjx.py"
fi
status=0
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( LIMIT - $(elapsed) )); }
step() { echo; echo "=== [$(elapsed) s] $*"; }
record() { echo "$*" >> "$RES"; }

record "## GPU check $(date -u +%Y-%m-%dT%H:%MZ) (DRY=${DRY:-0}, device $DEV)"
record ""

step "1. install (offline) and import check"
WHEELS=""
for d in shared/wheels wheels .whl; do
  if compgen -G "$d/*.whl" > /dev/null; then WHEELS=$d; break; fi
done
if [ "${DRY:-0}" = "1" ]; then  # the wheels are for the GPU machine's Python 3.12
  echo "dry: wheels not installed; using what is installed"
elif [ -n "$WHEELS" ]; then
  du -ch "$WHEELS"/*.whl | tail -1
  # --no-deps: every dependency is either preinstalled or one of the carried wheels
  timeout 120 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade "$WHEELS"/*.whl || { echo "wheel install FAILED"; status=1; }
  timeout 60 $PY -m pip install -q --no-index --no-deps --no-build-isolation -e . \
    || { echo "pip install -e . FAILED"; status=1; }
else
  echo "no wheels (shared/wheels/, wheels/, .whl/): using what is installed"
fi
timeout 60 $PY - "$RES" <<'EOF' || status=1
import importlib, platform, sys
import torch
lines = [f"python {platform.python_version()}, torch {torch.__version__} "
         f"(cuda {torch.cuda.is_available()}: "
         f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'})"]
for name in ("jax", "jaxlib", "mujoco", "mujoco.mjx", "onnx", "onnxruntime", "tyro", "trot"):
    try:
        m = importlib.import_module(name)
        lines.append(f"{name} {getattr(m, '__version__', 'ok')}")
    except Exception as e:  # noqa: BLE001
        lines.append(f"{name}: NOT IMPORTABLE ({type(e).__name__}: {e})")
try:
    import jax
    import trot.sim.mjx as mjx_backend
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    lines.append(f"jax devices {jax.devices()}; warp importable: "
                 f"{mjx_backend.warp_available()}; MJX impl on {dev}: "
                 f"{mjx_backend.resolve_impl(dev)}")
except Exception as e:  # noqa: BLE001
    lines.append(f"mjx backend: NOT USABLE ({e})")
print("\n".join(lines))
with open(sys.argv[1], "a") as f:
    f.write("- " + "\n- ".join(lines) + "\n\n")
EOF

step "1b. probe: plain JAX, MJX, MJX with DLPack, trot's mjx env (benchmarks/gpu_probe.py)"
# On the H200 (2026-12-04) trot's step program failed inside XLA's command buffers (CUDA
# graphs): "Failed to set memcpy D2D node params". If the probe's last stage fails, try
# again with them off and keep that setting for the rest of the check.
if timeout 90 $PY benchmarks/gpu_probe.py --device $DEV; then
  record "- probe: trot's mjx env steps with XLA's defaults (XLA_FLAGS='${XLA_FLAGS:-}')"
else
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_command_buffer="
  if timeout 75 $PY benchmarks/gpu_probe.py --device $DEV; then
    record "- probe: trot's mjx env FAILED with XLA's defaults; steps with command buffers" \
      "off (XLA_FLAGS='$XLA_FLAGS'), kept for the rest of the check"
  else
    record "- probe: trot's mjx env FAILED with XLA's defaults and with command buffers off"
    status=1
  fi
fi

step "2. mjx tests on $DEV"
# the window's arithmetic (420 s): ~20 install, ~40 probe, <= 90 tests, <= 100 throughput,
# the rest (>= 2 minutes) training; the first H200 run spent 180 s on tests and had no
# time left for the rest
budget=$(( $(left) - 300 )); [ "$budget" -gt 90 ] && budget=90
if [ "$budget" -lt 30 ]; then
  echo "skipped: ${budget} s"; record "- mjx tests: skipped (no time)"
else
  # -v: each test's outcome as it ends (a timeout keeps them); --maxfail: a broken backend
  # stops early with its tracebacks instead of eating the window
  TROT_TEST_DEVICE=$DEV timeout "$budget" $PY -m pytest $TESTS -v -rfEs --tb=short \
    --maxfail=3 -p no:cacheprovider > "$OUTDIR/pytest.log" 2>&1
  rc=$?
  tail -n 5 "$OUTDIR/pytest.log"
  record "- mjx tests (${TESTS}) on $DEV: exit $rc: $(tail -n 1 "$OUTDIR/pytest.log")"
  [ "$rc" -eq 0 ] || status=1
fi

step "3. go1-flat physics, env loop and training env-steps/s"
record ""
record "| task | backend | envs | compile s | physics only | env loop | training |"
record "|---|---|---|---|---|---|---|"
budget=$(( $(left) - MIN_TRAIN_S - 50 )); [ "$budget" -gt 100 ] && budget=100
if [ "$budget" -lt 40 ]; then
  echo "skipped: ${budget} s"; status=1
else
  timeout "$budget" $PY benchmarks/gpu_bench.py --task go1-flat --device $DEV --sizes $SIZES \
    --steps 100 --train-iters 3 --train-seconds 0 --cpu-baseline 0 --append "$RES" \
    || { echo "go1-flat throughput FAILED or timed out"; status=1; }
fi

step "4. a go1-flat training run on $DEV (up to $TRAIN_S s, what the window leaves), then its tracking metrics"
budget=$(( $(left) - 10 ))
train_s=$(( budget - 50 )); [ "$train_s" -gt "$TRAIN_S" ] && train_s=$TRAIN_S  # 50: compile, eval
TRAIN_MIN=$(awk "BEGIN {print $train_s / 60}")
if [ "$train_s" -lt "$MIN_TRAIN_S" ]; then
  echo "skipped: ${budget} s left, $(( MIN_TRAIN_S + 50 )) s needed"; status=1
else
  timeout "$budget" $PY benchmarks/locomotion_cpu.py --task go1-flat --sim mjx --device $DEV \
    --num-envs $TRAIN_ENVS --budget-min $TRAIN_MIN --eval-every-min $TRAIN_MIN \
    --episodes $EPISODES --run-dir /tmp/trot-gpu-run --out "$OUTDIR/curve.csv" \
    || { echo "training run FAILED or timed out"; status=1; }
  if [ -f "$OUTDIR/curve.csv" ]; then
    $PY - "$OUTDIR/curve.csv" "$RES" "$TRAIN_ENVS" "$DEV" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
r = rows[-1]
line = (f"\ngo1-flat training on {sys.argv[4]} ({sys.argv[3]} envs): {float(r['train_s']):.0f} s, "
        f"{float(r['env_steps']):,.0f} env steps; eval over the episodes on MuJoCo C: "
        f"tracking error {float(r['lin_vel_error']):.3f} m/s, falls "
        f"{100 * float(r['fall_rate']):.1f}%")
print(line)
open(sys.argv[2], "a").write(line + "\n")
EOF
  fi
fi

step "5. optional: Sebulba go1-flat, then go1-rough and g1-flat throughput"
record ""
record "| task | backend | envs | compile s | physics only | env loop | training |"
record "|---|---|---|---|---|---|---|"
for run in cpu:go1-flat mjx:go1-rough mjx:g1-flat; do
  sim=${run%%:*}; task=${run#*:}
  budget=$(( $(left) - 5 ))
  if [ "$budget" -lt 45 ]; then
    echo "$task on $sim skipped: ${budget} s left"; continue
  fi
  timeout "$budget" $PY benchmarks/gpu_bench.py --task $task --sim $sim --device $DEV \
    --sizes "${SIZES%%,*}" --steps 50 --train-iters 2 --train-seconds 0 --cpu-baseline 0 \
    --append "$RES" || echo "$task on $sim FAILED or timed out (optional: exit unchanged)"
done

step "done in $(elapsed) s (exit $status)"
echo; cat "$RES"
exit $status
