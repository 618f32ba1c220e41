"""Stable-Baselines3 PPO on Gymnasium's Ant-v5 for a wall-clock budget, as trot's peer.

    /work/peers-venv/bin/python benchmarks/peers/sb3_ant.py --minutes 12 --out sb3.csv

(the venv comes from benchmarks/peers/setup.sh). Settings are RL Zoo's for Ant-v4
(rl-baselines3-zoo hyperparams/ppo.yml: `Ant-v4: normalize: true, policy: MlpPolicy`,
n_timesteps 1e6), i.e. VecNormalize (obs and reward, clip 10) and SB3's PPO defaults:
n_envs 1, n_steps 2048, batch_size 64, n_epochs 10, learning_rate 3e-4, gamma 0.99,
gae_lambda 0.95, clip_range 0.2, ent_coef 0, vf_coef 0.5, max_grad_norm 0.5, MlpPolicy
64x64 tanh for pi and vf, log_std_init 0, orthogonal init. The zoo's tuned Ant entry is
commented out upstream, so these defaults are what `rl_zoo3 train --algo ppo --env Ant-v4`
runs. The env is Ant-v5 with `include_cfrc_ext_in_observation=False` (27-dim
observation, trot's `gym-ant`); --cfrc gives v5's default 105 dims (trot's `gym-ant-cfrc`).

Returns are the raw episode returns of the training episodes (Monitor, inside
VecNormalize). The CSV gets a row every --log-seconds: wall_s (from the start of learn()),
env_steps, mean_return, mean_length and episodes (over the episodes finished since the
previous row; empty when none finished), steps_per_s. torch runs on 1 thread: the
64x64 MLP with minibatches of 64 gains nothing from a second one, and MuJoCo runs
single-threaded in this process anyway.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from csvlog import CsvLog  # this folder: the scripts run from here


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=12.0, help="wall-clock budget")
    ap.add_argument("--out", type=Path, required=True, help="CSV to write")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-envs", type=int, default=1, help="RL Zoo's default for Ant: 1")
    ap.add_argument("--log-seconds", type=float, default=10.0, help="seconds between rows")
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--cfrc", action="store_true",
                    help="105-dim observation with contact forces (Ant-v5's default)")
    a = ap.parse_args(argv)

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(a.torch_threads)
    log = CsvLog(a.out, "sb3")
    env = make_vec_env("Ant-v5", n_envs=a.n_envs, seed=a.seed,  # Monitor wraps each env
                       env_kwargs={"include_cfrc_ext_in_observation": a.cfrc})
    env = VecNormalize(env, gamma=0.99)  # RL Zoo `normalize: true`: obs + reward, clip 10
    model = PPO("MlpPolicy", env, seed=a.seed, device="cpu", verbose=0,
                n_steps=2048, batch_size=64, n_epochs=10, learning_rate=3e-4, gamma=0.99,
                gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, vf_coef=0.5,
                max_grad_norm=0.5)  # SB3 defaults, spelled out

    class WallClock(BaseCallback):
        """Collects Monitor's episode returns, writes rows, stops at the deadline."""

        def _on_training_start(self) -> None:
            self.t0 = time.monotonic()
            self.next_row = a.log_seconds

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    log.returns.append(float(info["episode"]["r"]))
                    log.lengths.append(int(info["episode"]["l"]))
            wall = time.monotonic() - self.t0
            if wall >= self.next_row:
                log.row(wall, self.num_timesteps)
                self.next_row = wall + a.log_seconds
            return wall < 60.0 * a.minutes

        def _on_training_end(self) -> None:
            log.row(time.monotonic() - self.t0, self.num_timesteps)

    print(f"[sb3] PPO on Ant-v5 (obs {env.observation_space.shape[0]}), n_envs {a.n_envs}, "
          f"{a.minutes} min, torch threads {torch.get_num_threads()}", flush=True)
    model.learn(total_timesteps=10**10, callback=WallClock())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
