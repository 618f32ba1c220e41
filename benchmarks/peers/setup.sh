#!/usr/bin/env bash
# Build the separate venv that the Ant-v5 peers (SB3 PPO, rl_games PPO) run in.
#
#   bash benchmarks/peers/setup.sh [VENV]          # default VENV: /work/peers-venv
#   PEERS_VENV=/path bash benchmarks/peers/setup.sh
#   bash benchmarks/peers/setup.sh --pinned [VENV] # install benchmarks/peers/requirements.txt
#
# A venv of its own because rl_games and SB3 bring their own dependency trees (tensorboard,
# pygame, ...) that trot's environment has no need of. Order matters: torch==2.13.0 first
# (the CPU build on local disk; a bare `torch` requirement would pull the multi-GB CUDA
# build), then the rest, which finds torch already satisfied.
#
# Without --pinned it installs the newest releases and rewrites requirements.txt from
# `pip freeze` (the versions the smoke runs used). rl-games 1.6.5 installs with its own
# dependency list on Python 3.11: it pulls gymnasium (not the old `gym`), so no --no-deps
# is needed. envpool (1.2.5, cp311 wheel) is optional: rlgames_ant.py's default backend;
# if it fails to install, run rlgames_ant.py with --backend gymnasium.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pinned=0
if [[ "${1:-}" == "--pinned" ]]; then pinned=1; shift; fi
venv="${1:-${PEERS_VENV:-/work/peers-venv}}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet)

"${pip[@]}" torch==2.13.0
if (( pinned )); then
    "${pip[@]}" -r <(grep -v -i '^envpool' "$here/requirements.txt")
    grep -i '^envpool' "$here/requirements.txt" | xargs "${pip[@]}" \
        || echo "setup.sh: envpool did not install; use rlgames_ant.py --backend gymnasium" >&2
else
    "${pip[@]}" stable-baselines3 "gymnasium[mujoco]" rl-games==1.6.5
    if ! "${pip[@]}" envpool; then
        echo "setup.sh: envpool did not install; use rlgames_ant.py --backend gymnasium" >&2
    fi
    # pins: every distribution whose modules the peers import at run time (sys.modules
    # after a short run of sb3_ant.py and of rlgames_ant.py on both backends, and after
    # torch.compile's imports), plus rl_games' other dependencies and envpool-assets.
    # Without the indirect ones (imageio from gymnasium[mujoco]'s extra, matplotlib from
    # envpool, ...) --pinned would install whatever is newest, or miss an extra entirely.
    pins=(torch numpy gymnasium farama-notifications cloudpickle typing-extensions
          mujoco mujoco-core mujoco-studio glfw imageio pillow packaging
          stable-baselines3 psutil rl-games pyyaml setproctitle tensorboardx tensorboard
          protobuf absl-py optree filelock fsspec jinja2 markupsafe sympy mpmath networkx
          envpool envpool-assets envpool-assets-mujoco-large dm-env
          matplotlib cycler fonttools kiwisolver pyparsing python-dateutil)
    re="$(IFS='|'; echo "${pins[*]}" | sed 's/[-_.]/[-_.]/g')"
    "$venv/bin/python" -m pip freeze | grep -i -E "^($re)==" \
        | sed 's/^torch==\([0-9.]*\)+.*/torch==\1/' | LC_ALL=C sort -f -t= -k1,1 > "$here/requirements.txt"
fi

# check: Ant-v5 steps in this venv, and which MuJoCo it runs on
"$venv/bin/python" - <<'EOF'
import gymnasium as gym, mujoco, numpy as np
import stable_baselines3, rl_games.torch_runner  # the peers' own imports (tensorboard, ...)
env = gym.make("Ant-v5", include_cfrc_ext_in_observation=False)
obs, _ = env.reset(seed=0)
for _ in range(10):
    obs, r, term, trunc, _ = env.step(env.action_space.sample())
print(f"Ant-v5 ok: obs {obs.shape}, gymnasium {gym.__version__}, mujoco {mujoco.__version__}")
try:
    import envpool
    e = envpool.make("Ant-v5", env_type="gymnasium", num_envs=2, use_contact_force=False)
    e.reset()
    print(f"envpool {envpool.__version__} Ant-v5 ok: obs {e.observation_space.shape}")
except Exception as exc:  # optional backend
    print(f"envpool unavailable ({exc!r}); rlgames_ant.py --backend gymnasium still works")
EOF
echo "peers venv ready: $venv/bin/python"
