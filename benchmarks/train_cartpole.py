"""Time to reward on the cartpole tasks, and training throughput against the env loop.

    python benchmarks/train_cartpole.py --budget-s 120 -- cartpole-balance
    python benchmarks/train_cartpole.py --budget-s 420 -- cartpole-swingup

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance`): the task (cartpole-balance or cartpole-swingup), `--seed`,
`--num-envs`, `--agent.FIELD V`, `--env.FIELD V`, `--run-dir` (default
runs/TASK/TIMESTAMP). The run trains through trot's one loop (agents/loop.py) with the
task's registered settings (the CPU default) for at most `--budget-s` of training clock.
Every `--eval-every` iterations the clock is paused and the deterministic policy plays one
episode in each of 16 fresh envs (noise off):
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

import dataclasses
import math
from dataclasses import dataclass

from trot.agents.checkpoint import Counters
from trot.agents.collect import set_threads
from trot.agents.evaluate import run_episodes
from trot.agents.learners import start
from trot.agents.loop import train
from trot.agents.train_config import TrainConfig
from trot.bench import env_loop
from trot.benchmark import main
from trot.tasks.registry import get_task, make_env

TASKS = ("cartpole-balance", "cartpole-swingup")


@dataclass(frozen=True)
class Settings:
    budget_s: float = 300.0
    """seconds of training clock at most"""
    eval_every: int = 5
    """iterations between evaluations"""
    min_s: float = 30.0
    """train at least this long, so the throughput is not a few seconds'"""
    loop_steps: int = 100
    """random-action env-loop steps measured after each evaluation"""


def target_met(task: str, result: dict[str, float], max_return: float | None) -> bool:
    if task == "cartpole-balance":
        return result["mean_return"] >= 0.95 * (max_return or float("inf"))
    return result["upright_second_half"] >= 0.8


class ToTarget:
    """The loop's evaluation (agents/loop.py's `Evaluation`): every `eval_every`
    iterations, with the training clock paused, the deterministic policy's episodes (a row
    printed), then a chunk of the random-action env loop (the reference). It notes when the
    targets first held, and ends the run at an evaluation once they did and `min_s` passed."""

    checkpoints = False  # nothing resumes this run

    def __init__(self, s: Settings, cfg: TrainConfig):
        self.s, self.cfg = s, cfg
        config = cfg.env or get_task(cfg.task).config
        self.eval_env = make_env(cfg.task, 16, seed=1000 + cfg.seed,
                                 config=dataclasses.replace(config, obs_noise=False))
        self.loop_env = make_env(cfg.task, cfg.num_envs, seed=7, config=config)  # same N
        self.loop_s, self.loop_steps = 0.0, 0
        self.hit: float | None = None  # the deterministic policy's target
        self.hit_train: float | None = None  # balance: training episodes' return >= 95%
        self.last: dict[str, float] = {}
        self.stop = False

    def due(self, trainer, m: dict[str, float], at: Counters) -> bool:
        self.last = m if "episode_return" in m else self.last
        mr = trainer.env.task.max_return()
        if self.hit_train is None and mr and self.last.get("episode_return", 0) >= 0.95 * mr:
            self.hit_train = at.wall_s
        return trainer.iteration % self.s.eval_every == 0

    def __call__(self, trainer, at: Counters) -> None:
        res = run_episodes(self.eval_env, trainer.ac.actor, 16)
        print(f"{at.wall_s:8.1f} {at.env_steps:11,d} {at.env_steps / at.wall_s:9,.0f} "
              f"{self.last.get('episode_return', math.nan):13.1f} {res['mean_return']:12.1f} "
              f"{res.get('upright_second_half', math.nan):17.2f}", flush=True)
        if self.hit is None and target_met(self.cfg.task, res, self.eval_env.task.max_return()):
            self.hit = at.wall_s
        # the reference, interleaved with training so both see the same machine; under
        # the torch threads collection uses
        set_threads(self.cfg.torch_threads)
        rate = env_loop(self.loop_env, self.s.loop_steps, seed=self.loop_steps)
        self.loop_steps += self.s.loop_steps * self.cfg.num_envs
        self.loop_s += self.s.loop_steps * self.cfg.num_envs * self.loop_env.sim.substeps / rate
        self.stop = at.wall_s >= self.s.min_s and self.hit is not None and (
            self.cfg.task != "cartpole-balance" or self.hit_train is not None)

    def done(self) -> bool:
        return self.stop


def run(s: Settings, cfg: TrainConfig) -> None:
    if cfg.task not in TASKS:
        raise SystemExit(f"{cfg.task}: this benchmark's targets are those of "
                         f"{' and '.join(TASKS)}")
    cfg = dataclasses.replace(cfg, minutes=s.budget_s / 60, max_env_steps=10**12)
    trainer, run_dir = start(cfg)
    evaluation = ToTarget(s, cfg)
    print(f"{'train s':>8} {'env steps':>11} {'steps/s':>9} {'train return':>13} "
          f"{'eval return':>12} {'upright 2nd half':>17}")
    train_s = train(trainer, run_dir, quiet=True, evaluation=evaluation)
    train_rate = trainer.env_steps / train_s
    loop_rate = evaluation.loop_steps / evaluation.loop_s if evaluation.loop_s else math.nan
    print(f"\ntask={cfg.task} N={cfg.num_envs} seed={cfg.seed} threads: torch "
          f"{cfg.torch_threads} (collection) / {cfg.update_threads or 'all'} (update), "
          f"mujoco {trainer.env.sim.nthread}")
    fmt = lambda x: f"{x:.1f} s" if x is not None else "not reached"  # noqa: E731
    print(f"time to target (deterministic eval): {fmt(evaluation.hit)} "
          f"(budget {s.budget_s:.0f} s, training wall-clock, eval excluded)")
    if cfg.task == "cartpole-balance":
        print(f"time to training-episode mean return >= 95% of max: "
              f"{fmt(evaluation.hit_train)}")
    print(f"training {train_rate:,.0f} env-steps/s vs env loop (random actions) "
          f"{loop_rate:,.0f} env-steps/s: ratio {train_rate / loop_rate:.2f}")


if __name__ == "__main__":
    main(Settings, run, ("cartpole-balance",))
