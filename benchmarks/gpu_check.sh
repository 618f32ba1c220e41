#!/usr/bin/env bash
# The mjx backend on a CUDA machine: install, test, benchmark. One script, under 8 minutes
# (then optional go1-rough and g1-flat steps, if the clock allows, ending by 9.6 minutes).
#
#   bash benchmarks/gpu_check.sh            # logs and bench.json/.txt under $OUT if set
#
# For a machine with a GPU, torch and a CUDA build of JAX already installed and NO internet.
# The packages it lacks come as wheels carried in the working tree: shared/wheels/ or wheels/
# (the first that exists). Download them on a machine with internet, for the GPU machine's
# Python (3.12, x86_64 here; check `python3 -V` there):
#
#   P="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
#      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
#      --platform manylinux1_x86_64"
#   pip download --no-deps $P -d wheels mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 \
#       mujoco-mjx==3.17.0 warp-lang==1.18.0 trimesh glfw pyopengl websockets tyro \
#       docstring-parser typeguard
#
# Versions: mujoco-mjx 3.17.0 is the newest MJX release; it needs mujoco>=3.17 and works with
# mujoco 4.0.0 (there is no mujoco-mjx 4.x); its Warp bridge is built against
# warp-lang==1.18.0 (the `mujoco-mjx[warp]` pin). warp-lang's wheel is ~150 MB: where the
# working tree that travels is capped (64 MiB on this workplace's device machines), leave it
# out; the backend then runs MJX's JAX implementation on the GPU (impl "jax") and says so.
#
# Steps, each under its own timeout: environment report -> install the wheels and trot
# (--no-deps, offline) -> pytest tests/test_mjx.py on cuda (TROT_TEST_DEVICE=cuda) ->
# benchmarks/gpu_bench.py (1024/4096/8192 envs: physics only, env loop, training; a short
# training run) -> the table again at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
LOGDIR=${OUT:-/tmp/trot-gpu-check}
mkdir -p "$LOGDIR"
exec > >(tee "$LOGDIR/gpu_check.log") 2>&1
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX shares the GPU with torch
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/trot-jax-cache}
status=0
step() { echo; echo "=== [$(( $(date +%s) - T0 )) s] $*"; }

step "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
$PY - <<'EOF'
import sys, torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "cuda", torch.cuda.is_available())
try:
    import jax
    print("jax", jax.__version__, jax.devices())
except Exception as e:  # noqa: BLE001
    print("jax: NOT USABLE:", e)
EOF

step "install (offline)"
WHEELS=""
for d in shared/wheels wheels .whl; do
  if compgen -G "$d/*.whl" > /dev/null; then WHEELS=$d; break; fi
done
if [ -n "$WHEELS" ]; then
  echo "wheels from $WHEELS:"; ls -1 "$WHEELS"
  # --no-deps: every dependency is either preinstalled or one of the carried wheels
  timeout 300 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade "$WHEELS"/*.whl || { echo "wheel install FAILED"; status=1; }
else
  echo "no wheels found (shared/wheels/, wheels/, .whl/): using what is installed"
fi
timeout 120 $PY -m pip install -q --no-index --no-deps --no-build-isolation -e . \
  || { echo "pip install -e . FAILED"; status=1; }
$PY - <<'EOF' || status=1
import mujoco, torch
from mujoco import mjx  # noqa: F401
import trot.sim.mjx as m
print("mujoco", mujoco.__version__, "| warp importable:", m.warp_available(),
      "| default impl on cuda:", m.resolve_impl(torch.device("cuda")))
EOF

step "pytest tests/test_mjx.py on cuda"
TROT_TEST_DEVICE=cuda timeout 240 $PY -m pytest tests/test_mjx.py -q -rs -s --durations=8 \
  -p no:cacheprovider 2>&1 | tee "$LOGDIR/pytest_mjx.log"
rc=${PIPESTATUS[0]}
echo "pytest exit code: $rc"
[ "$rc" -eq 0 ] || status=1

step "benchmark"
left=$(( 460 - ($(date +%s) - T0) ))  # finish inside 8 minutes
if [ "$left" -lt 60 ]; then
  echo "only ${left} s left: skipping the benchmark"; status=1
else
  train_s=$(( left > 240 ? 60 : 20 ))
  timeout "$left" $PY benchmarks/gpu_bench.py --device cuda --sizes 1024,4096,8192 \
    --steps 200 --train-iters 10 --train-seconds "$train_s" --out "$LOGDIR" \
    || { echo "benchmark FAILED or timed out"; status=1; }
fi

step "optional: go1-rough on the GPU (heightfield contacts in MJX)"
left=$(( 520 - ($(date +%s) - T0) ))
if [ "$left" -lt 60 ]; then
  echo "only ${left} s left: skipping go1-rough"
else
  mkdir -p "$LOGDIR/rough"
  timeout "$left" $PY benchmarks/gpu_bench.py --task go1-rough --device cuda --sizes 1024,4096 \
    --steps 100 --train-iters 5 --train-envs 4096 --train-seconds 20 --out "$LOGDIR/rough" \
    || echo "go1-rough step FAILED or timed out (optional: exit status unchanged)"
fi

step "optional: g1-flat on the GPU (the humanoid: box soles, self-collision pairs)"
left=$(( 575 - ($(date +%s) - T0) ))
if [ "$left" -lt 45 ]; then
  echo "only ${left} s left: skipping g1-flat"
else
  mkdir -p "$LOGDIR/g1"
  timeout "$left" $PY benchmarks/gpu_bench.py --task g1-flat --device cuda --sizes 1024,4096 \
    --steps 100 --train-iters 5 --train-envs 4096 --train-seconds 15 --out "$LOGDIR/g1" \
    || echo "g1-flat step FAILED or timed out (optional: exit status unchanged)"
fi

step "done (exit $status)"
if [ -f "$LOGDIR/bench.txt" ]; then
  echo; tail -n 8 "$LOGDIR/bench.txt"
fi
exit $status
