"""Time to reward on the cartpole tasks, and training throughput against the env loop.

    python benchmarks/train_cartpole.py --task cartpole-balance --budget-s 120
    python benchmarks/train_cartpole.py --task cartpole-swingup --budget-s 420

Trains with the task's registered defaults (the CPU default). Every `--eval-every`
iterations the clock is paused and the deterministic policy plays one episode in each of
16 fresh envs (noise off):
- cartpole-balance target: mean return >= 95% of the maximum (500);
- cartpole-swingup target: the pole upright (cos > 0.9) for >= 80% of the second half
  of the episode, averaged over the 16 episodes.
The time reported is training wall-clock only (evaluation excluded), from the first
iteration. Training continues for at least --min-s so that the throughput is measured
over a stable window. The reference, the env loop with random actions at the same N (with
the torch threads collection uses), is measured in short chunks after every evaluation,
interleaved with training so that both see the same machine; training env-steps/s is
reported as a ratio of its mean rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from trot.agents.evaluate import run_episodes
from trot.agents.collect import set_threads
from trot.agents.learners import build
from trot.bench import env_loop
from trot.agents.config import tuned
from trot.agents.train_config import TrainConfig
from trot.tasks.registry import get_task, make_env


def target_met(task: str, result: dict[str, float], max_return: float | None) -> bool:
    if task == "cartpole-balance":
        return result["mean_return"] >= 0.95 * (max_return or float("inf"))
    return result["upright_second_half"] >= 0.8


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="cartpole-balance",
                   choices=["cartpole-balance", "cartpole-swingup"])
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=300.0)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--min-s", type=float, default=30.0,
                   help="train at least this long, so the throughput is not a few seconds'")
    p.add_argument("--loop-steps", type=int, default=100,
                   help="random-action env-loop steps measured after each evaluation")
    a = p.parse_args()

    entry = get_task(a.task)
    cfg = TrainConfig(task=a.task, num_envs=a.num_envs, seed=a.seed, agent=tuned(entry.agent),
                      max_env_steps=10**12)
    trainer = build(cfg)
    eval_env = make_env(a.task, 16, seed=1000 + a.seed,
                        config=dataclasses.replace(entry.config, obs_noise=False))
    loop_env = make_env(a.task, a.num_envs, seed=7)  # the reference, same N
    loop_s, loop_steps = 0.0, 0
    train_s, steps0, hit, last = 0.0, trainer.env_steps, None, {}
    hit_train = None  # balance: first time the training episodes' mean return is >= 95%
    print(f"{'train s':>8} {'env steps':>11} {'steps/s':>9} {'train return':>13} "
          f"{'eval return':>12} {'upright 2nd half':>17}")
    while train_s < a.budget_s and (train_s < a.min_s or hit is None or (
            a.task == "cartpole-balance" and hit_train is None)):
        t = time.perf_counter()
        for _ in range(a.eval_every):
            m = trainer.iterate()
            last = m if "episode_return" in m else last
            mr = trainer.env.task.max_return()
            if hit_train is None and mr and last.get("episode_return", 0) >= 0.95 * mr:
                hit_train = train_s + time.perf_counter() - t
        train_s += time.perf_counter() - t
        res = run_episodes(eval_env, trainer.ac.actor, 16)
        rate = (trainer.env_steps - steps0) / train_s
        print(f"{train_s:8.1f} {trainer.env_steps:11,d} {rate:9,.0f} "
              f"{last.get('episode_return', float('nan')):13.1f} {res['mean_return']:12.1f} "
              f"{res.get('upright_second_half', float('nan')):17.2f}", flush=True)
        if hit is None and target_met(a.task, res, eval_env.task.max_return()):
            hit = train_s
        # the reference, interleaved with training so both see the same machine; under
        # the torch threads collection uses
        set_threads(cfg.torch_threads)
        rate = env_loop(loop_env, a.loop_steps, seed=loop_steps)
        loop_steps += a.loop_steps * a.num_envs
        loop_s += a.loop_steps * a.num_envs * loop_env.sim.substeps / rate
    train_rate = (trainer.env_steps - steps0) / train_s
    loop_rate = loop_steps / loop_s
    print(f"\ntask={a.task} N={a.num_envs} seed={a.seed} threads: torch "
          f"{cfg.torch_threads} (collection) / {cfg.update_threads or 'all'} (update), "
          f"mujoco {trainer.env.sim.nthread}")
    fmt = lambda x: f"{x:.1f} s" if x is not None else "not reached"
    print(f"time to target (deterministic eval): {fmt(hit)} "
          f"(budget {a.budget_s:.0f} s, training wall-clock, eval excluded)")
    if a.task == "cartpole-balance":
        print(f"time to training-episode mean return >= 95% of max: {fmt(hit_train)}")
    print(f"training {train_rate:,.0f} env-steps/s vs env loop (random actions) "
          f"{loop_rate:,.0f} env-steps/s: ratio {train_rate / loop_rate:.2f}")


if __name__ == "__main__":
    main()
