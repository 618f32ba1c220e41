#!/usr/bin/env bash
# The GPU check, for a short window: one H200 for ~15 minutes including start-up, commands
# of at most 10 minutes, at most 8 result files back. This script runs in at most 5 minutes,
# in priority order, each step under its own timeout and only if the clock leaves it room,
# and writes 6 files under $OUT (default /tmp/trot-gpu-check), appending each result as
# soon as it is measured, so that a timeout loses nothing:
#   gpu_check.log  everything printed      results.md  rows for docs/benchmarks.md, "GPU"
#   pytest.log     the mjx tests on CUDA   probe.txt   the probe's stages
#   curve_cpu.csv, curve_mjx.csv           the two training runs' evals
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
# "jax"); the import step says so. The whole check fits in 5 minutes (LIMIT), leaving a
# 15-minute window room for the machine's start and one rerun. Order:
#   1 (<= 60 s) install, versions, and the probe (benchmarks/gpu_probe.py): plain JAX, MJX,
#     MJX with DLPack, trot's env with its programs' command buffers off (trot's default on
#     CUDA), and the same with them on ($TROT_XLA_COMMAND_BUFFERS=1), so the log says
#     whether they are still the cause;
#   2 Sebulba go1-flat (MuJoCo C on the machine's cores, the learner on the GPU; no JAX):
#     env-steps/s at 4096 envs, then a training run of SEB_S seconds, evaluated at its end;
#   3 mjx go1-flat: physics, env loop and training env-steps/s at 1024 and 4096 envs (16384
#     if time remains), compile seconds in a column of their own;
#   4 an mjx go1-flat training run at 4096 envs for what the window leaves (MJX_S at most),
#     evaluated with the tracking metrics;
#   5 if time remains: the mjx tests on CUDA (--maxfail=3), go1-flat with the captured torch
#     side (--capture auto; every row before it runs eager, the reference), then go1-rough
#     and g1-flat throughput.
# The issue asked for a 90 s Sebulba run and about 2 minutes of mjx training; beside the
# probe and the throughput rows, 5 minutes hold 75 s and up to 105 s.
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
  DEV=cpu; SIZES=64; MORE=128; TRAIN_ENVS=64; SEB_S=15; MJX_S=20; MIN_TRAIN_S=10
  EPISODES=8; LIMIT=420; TESTS="tests/test_mjx_programs.py"
else
  DEV=cuda; SIZES="1024 4096"; MORE=16384; TRAIN_ENVS=4096; SEB_S=75; MJX_S=105
  MIN_TRAIN_S=60; EPISODES=128; LIMIT=300
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

step "1b. probe: JAX, MJX, MJX with DLPack, trot's env with command buffers off, then on"
# On the H200 (2026-12-04) every mjx step program failed inside XLA's command buffers (CUDA
# graphs): "Failed to set memcpy D2D node params". trot now compiles its programs with
# them off on CUDA; the probe's last stage turns them back on to see if that still fails.
timeout 60 $PY benchmarks/gpu_probe.py -- cartpole-balance --num-envs 64 --device $DEV \
  > "$OUTDIR/probe.txt" 2>&1
rc=$?
cat "$OUTDIR/probe.txt"
record "- probe (exit $rc): $(grep -E '^  [a-z+]+ +(OK|FAIL)' "$OUTDIR/probe.txt" \
  | awk '{printf "%s%s %s", sep, $1, $2; sep="; "}')"
[ "$rc" -eq 0 ] || status=1

train_eval() {  # train_eval SIM ENVS SECONDS LABEL: locomotion_cpu.py, then one results line
  local sim=$1 envs=$2 secs=$3 label=$4 csv="$OUTDIR/curve_$1.csv"
  local budget=$(( $(left) - 5 ))
  [ "$secs" -gt $(( budget - 45 )) ] && secs=$(( budget - 45 ))  # 45: build, compile, eval
  if [ "$secs" -lt "$MIN_TRAIN_S" ]; then
    echo "skipped: ${budget} s left"; record "- $label: skipped (no time)"; status=1; return
  fi
  local minutes; minutes=$(awk "BEGIN {print $secs / 60}")
  # the run eager (--capture off): the reference; the captured side is step 5's own row
  timeout "$budget" $PY benchmarks/locomotion_cpu.py --budget-min "$minutes" \
    --eval-every-min "$minutes" --episodes $EPISODES --out "$csv" \
    -- go1-flat --sim "$sim" --device $DEV --num-envs "$envs" \
    --run-dir "/tmp/trot-gpu-run-$sim" --capture off \
    || { echo "$label FAILED or timed out"; status=1; }
  [ -f "$csv" ] && $PY - "$csv" "$label" >> "$RES" <<'EOF'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[-1]
print(f"- {sys.argv[2]}: {float(r['train_s']):.0f} s, {float(r['env_steps']):,.0f} env steps; "
      f"eval on MuJoCo C: tracking error {float(r['lin_vel_error']):.3f} m/s, falls "
      f"{100 * float(r['fall_rate']):.1f}%")
EOF
  tail -n 1 "$RES"
}

throughput() {  # throughput SIM TASK "SIZES" STEPS CAP_S [CAPTURE]: gpu_bench.py rows
  local budget=$(( $(left) - 5 )); [ "$budget" -gt "$5" ] && budget=$5
  if [ "$budget" -lt 20 ]; then echo "skipped: ${budget} s"; return 1; fi
  # shellcheck disable=SC2086  # SIZES: one env count per word
  timeout "$budget" $PY benchmarks/gpu_bench.py --sizes $3 --steps "$4" --train-iters 2 \
    --train-seconds 0 --cpu-baseline 0 --append "$RES" \
    -- "$2" --sim "$1" --device $DEV --capture "${6:-off}" \
    || { echo "$2 on $1 FAILED or timed out"; return 1; }
}

record ""
record "| task | backend | envs | compile s | physics only | env loop | training |"
record "|---|---|---|---|---|---|---|"
step "2. Sebulba go1-flat: MuJoCo C on the host cores, the learner on $DEV"
throughput cpu go1-flat "${SIZES##* }" 50 30 || status=1
train_eval cpu "$TRAIN_ENVS" "$SEB_S" "Sebulba go1-flat training on $DEV ($TRAIN_ENVS envs)"

step "3. mjx go1-flat physics, env loop and training env-steps/s"
throughput mjx go1-flat "$SIZES" 100 75 || status=1
if [ $(( $(left) - MJX_S - 45 )) -gt 60 ]; then throughput mjx go1-flat "$MORE" 50 60; fi

step "4. an mjx go1-flat training run on $DEV, then its tracking metrics"
train_eval mjx "$TRAIN_ENVS" "$MJX_S" "mjx go1-flat training on $DEV ($TRAIN_ENVS envs)"

step "5. if time remains: mjx tests on $DEV, go1-rough and g1-flat throughput"
budget=$(( $(left) - 5 )); [ "$budget" -gt 90 ] && budget=90
if [ "$budget" -ge 30 ]; then
  # -v: each outcome as it ends (a timeout keeps them); --maxfail: a broken backend stops
  # early with its tracebacks instead of eating the window
  TROT_TEST_DEVICE=$DEV timeout "$budget" $PY -m pytest $TESTS -v -rfEs --tb=short \
    --maxfail=3 -p no:cacheprovider > "$OUTDIR/pytest.log" 2>&1
  rc=$?
  tail -n 5 "$OUTDIR/pytest.log"
  record "- mjx tests (${TESTS}) on $DEV: exit $rc: $(tail -n 1 "$OUTDIR/pytest.log")"
else
  record "- mjx tests: skipped (no time)"
fi
# the captured torch side (TrainConfig.capture=auto: inductor on CUDA) against the eager
# rows above; the training runs above stay eager, so a compile failure costs only this row
throughput mjx go1-flat "${SIZES%% *}" 50 90 auto || echo "(optional: exit unchanged)"
for task in go1-rough g1-flat; do
  throughput mjx $task "${SIZES%% *}" 50 60 || echo "(optional: exit unchanged)"
done

step "done in $(elapsed) s (exit $status)"
echo; cat "$RES"
exit $status
