"""rl_games PPO (a2c_continuous) on Gymnasium's Ant-v5 for a wall-clock budget, as trot's peer.

    /work/peers-venv/bin/python benchmarks/peers/rlgames_ant.py --minutes 12 --out rlg.csv
    ... --backend gymnasium       # Gymnasium's own Ant-v5 in a SyncVectorEnv instead

(the venv comes from benchmarks/peers/setup.sh). The settings are rl_games' own
configs/mujoco/ant.yaml and ant_envpool.yaml (identical PPO settings): 64 actors x horizon
64, minibatch 2048, 4 mini-epochs, lr 3e-4 with the KL-adaptive schedule (kl 0.008),
gamma 0.99, tau (GAE lambda) 0.95, e_clip 0.2, clipped value loss with critic_coef 2,
grad_norm 1, no entropy bonus, input and value normalization, value bootstrap on time-outs,
MLP 256-128-64 elu, shared trunk, fixed (state-independent) log-std 0. On CPU
mixed_precision is off and torch.compile is off by default (--compile turns it on; its
compile time then counts against the budget).

Backends, both Ant-v5 with `include_cfrc_ext_in_observation=False` (27-dim observation,
trot's `gym-ant`; --cfrc: v5's default 105 dims, trot's `gym-ant-cfrc`):
  envpool    (default) envpool's C++ Ant-v5 (`use_contact_force=False`), the backend
             rl_games' MuJoCo configs use; stepped on --env-threads (2) threads. Same
             ant.xml and v5 reward/termination; its own MuJoCo build (3.6 in envpool 1.2.5).
  gymnasium  gymnasium.make_vec("Ant-v5", vectorization_mode="sync") with same-step
             autoreset: Gymnasium's own code on the pip `mujoco`, one core.

Returns are the raw episode returns of training episodes, summed from the unnormalized
rewards the vec env hands rl_games (what RecordEpisodeStatistics does). The CSV gets a row
every --log-seconds (checked once per epoch of 4096 steps): wall_s (from the end of the
agent's construction), env_steps, mean_return, mean_length and episodes (over the
episodes finished since the previous row; empty when none), steps_per_s. torch runs on 1 thread
(params.torch_threads): the sim holds the cores while rl_games waits on it, and the
2048-sample minibatches of a 256-128-64 MLP gain little from a second thread.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from csvlog import CsvLog  # this folder: the scripts run from here


def make_vec_env(log: CsvLog, num_actors: int, backend: str, seed: int, cfrc: bool,
                 env_threads: int):
    """An rl_games IVecEnv over N Ant-v5 envs that records raw episode returns into `log`."""
    from rl_games.common.ivecenv import IVecEnv

    class AntVecEnv(IVecEnv):
        def __init__(self):
            if backend == "envpool":
                import envpool

                self.env = envpool.make("Ant-v5", env_type="gymnasium", num_envs=num_actors,
                                        seed=seed, num_threads=env_threads,
                                        use_contact_force=cfrc)
            else:
                import gymnasium as gym

                self.env = gym.make_vec(
                    "Ant-v5", num_envs=num_actors, vectorization_mode="sync",
                    vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
                    include_cfrc_ext_in_observation=cfrc)
            self.observation_space = self.env.single_observation_space \
                if hasattr(self.env, "single_observation_space") else self.env.observation_space
            self.action_space = self.env.single_action_space \
                if hasattr(self.env, "single_action_space") else self.env.action_space
            self.ret = np.zeros(num_actors)
            self.len = np.zeros(num_actors, dtype=np.int64)

        def reset(self):
            if backend == "envpool":
                obs, _ = self.env.reset()
            else:
                obs, _ = self.env.reset(seed=seed)
            self.ret[:], self.len[:] = 0.0, 0
            return obs.astype(np.float32)

        def step(self, actions):
            # envpool auto-resets a done env on its next step (the action is then ignored,
            # and the reset obs comes back with reward 0); gymnasium here resets on the same
            # step. rl_games expects the latter, so envpool's reset steps are taken at once.
            obs, rew, term, trunc, _ = self.env.step(np.asarray(actions, np.float64))
            done = term | trunc
            self.ret += rew
            self.len += 1
            log.returns += self.ret[done].tolist()
            log.lengths += self.len[done].tolist()
            self.ret[done], self.len[done] = 0.0, 0
            if backend == "envpool" and done.any():
                reset_obs, reset_info = self.env.reset(np.nonzero(done)[0].astype(np.int32))
                obs = obs.copy()
                obs[reset_info["env_id"]] = reset_obs
            return (obs.astype(np.float32), rew.astype(np.float32), done,
                    {"time_outs": trunc & ~term})

        def get_number_of_agents(self):
            return 1

        def get_env_info(self):
            return {"action_space": self.action_space,
                    "observation_space": self.observation_space, "agents": 1}

    return AntVecEnv()


def rlgames_config(a, train_dir: str) -> dict:
    """rl_games' configs/mujoco/ant.yaml, for CPU and our env."""
    return {"params": {
        "seed": a.seed,
        "torch_threads": a.torch_threads,
        "algo": {"name": "a2c_continuous"},
        "model": {"name": "continuous_a2c_logstd"},
        "network": {
            "name": "actor_critic", "separate": False,
            "space": {"continuous": {
                "mu_activation": "None", "sigma_activation": "None",
                "mu_init": {"name": "default"},
                "sigma_init": {"name": "const_initializer", "val": 0}, "fixed_sigma": True}},
            "mlp": {"units": [256, 128, 64], "activation": "elu",
                    "initializer": {"name": "default"}}},
        "config": {
            "name": "ant_v5_peer", "full_experiment_name": "ant_v5_peer",
            "train_dir": train_dir, "env_name": "trot_ant_peer", "device": "cpu",
            "torch_compile": a.compile, "mixed_precision": False, "print_stats": False,
            "normalize_input": True, "normalize_value": True, "value_bootstrap": True,
            "normalize_advantage": True, "reward_shaper": {"scale_value": 1.0},
            "gamma": 0.99, "tau": 0.95, "learning_rate": 3e-4, "lr_schedule": "adaptive",
            "kl_threshold": 0.008, "grad_norm": 1.0, "entropy_coef": 0.0,
            "truncate_grads": True, "e_clip": 0.2, "clip_value": True,
            "use_smooth_clamp": True, "bound_loss_type": "regularisation",
            "bounds_loss_coef": 0.0, "max_epochs": -1, "num_actors": a.num_actors,
            "horizon_length": 64, "minibatch_size": 2048, "mini_epochs": 4,
            "critic_coef": 2, "save_best_after": 10**9, "env_config": {}}}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=12.0, help="wall-clock budget")
    ap.add_argument("--out", type=Path, required=True, help="CSV to write")
    ap.add_argument("--seed", type=int, default=5, help="rl_games' config seed: 5")
    ap.add_argument("--backend", choices=("envpool", "gymnasium"), default="envpool")
    ap.add_argument("--num-actors", type=int, default=64)
    ap.add_argument("--env-threads", type=int, default=2, help="envpool's threads")
    ap.add_argument("--log-seconds", type=float, default=10.0, help="seconds between rows")
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--cfrc", action="store_true",
                    help="105-dim observation with contact forces (Ant-v5's default)")
    a = ap.parse_args(argv)

    import torch
    from rl_games.common import env_configurations, vecenv
    from rl_games.common.algo_observer import AlgoObserver
    from rl_games.torch_runner import Runner

    torch.manual_seed(a.seed)  # rl_games seeds only a truthy seed: 0 would go unseeded
    np.random.seed(a.seed)
    log = CsvLog(a.out, "rl_games")
    vecenv.register("TROT_ANT_PEER", lambda name, n, **kw: make_vec_env(
        log, n, a.backend, a.seed, a.cfrc, a.env_threads))
    env_configurations.register("trot_ant_peer", {"vecenv_type": "TROT_ANT_PEER",
                                                  "env_creator": lambda **kw: None})

    class WallClock(AlgoObserver):
        """Writes rows and ends training (max_epochs := this epoch) at the deadline."""

        def after_init(self, algo):
            self.algo, self.t0, self.next_row = algo, time.monotonic(), a.log_seconds

        def after_print_stats(self, frame, epoch_num, total_time):
            wall = time.monotonic() - self.t0
            done = wall >= 60.0 * a.minutes
            if wall >= self.next_row or done:
                log.row(wall, int(self.algo.frame))
                self.next_row = wall + a.log_seconds
            if done:
                self.algo.max_epochs = epoch_num  # rl_games' own stop check follows

    with tempfile.TemporaryDirectory(prefix="rlg_ant_") as train_dir:
        runner = Runner(algo_observer=WallClock())
        runner.load(rlgames_config(a, train_dir))
        print(f"[rl_games] a2c_continuous on Ant-v5 ({a.backend}), {a.num_actors} actors, "
              f"{a.minutes} min, torch threads {a.torch_threads}", flush=True)
        runner.run({"train": True, "play": False})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
