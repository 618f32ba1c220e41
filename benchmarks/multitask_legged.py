"""One policy for two robots: go1-flat and go2-flat-clocked (the Go2 with go1-flat's
observation setup), each robot's tracking error and falls against env steps.

    python benchmarks/multitask_legged.py --budget-min 30 --out docs/data/multitask_go1_go2.csv

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`go1-flat go2-flat-clocked --num-envs 2048`): the two robots' tasks, `--num-envs` (in all),
`--task-shares GO1 GO2` (each robot's share of the envs; equal unless given), `--seed`,
`--agent.FIELD V` over go1-flat's agent settings (e.g. `--agent.minibatches 8`: with twice
the envs of a one-robot run, the same minibatch size, and so as many gradient steps per env
step as each robot's own run; `--agent.popart-tasks shared`: one PopArt for both robots,
per-task otherwise), `--env.TASK.FIELD V`, `--run-dir` (default runs/multitask_legged).

    python benchmarks/multitask_legged.py --eval-every-min 3 --stop-when-met \
        --out shares41.csv -- go1-flat go2-flat-clocked --num-envs 1280 --task-shares 4 1

The run trains through trot's one loop (agents/loop.py) for --budget-min minutes of
training clock. Every --eval-every-min minutes, and at the budget, the clock is paused and
each robot's own policy (the task fixed, agents/multitask.py) is evaluated as
benchmarks/locomotion_cpu.py evaluates a one-task run (trot/benchmark.py's
`locomotion_row`): one 20-s episode in each of --episodes fresh envs, noise off, commands,
randomization and pushes on. Each robot's row (the iteration, its own env steps beside the
total) is appended to --out. At the end it prints the total env steps at which each robot
first met its registered thresholds (go1-flat <= 0.20 m/s and <= 2% falls; go2: <= 0.25
m/s and <= 10%), and when both had. `--resume` continues the run in its run directory from
its checkpoint, and its rows (none past the checkpoint); `--stop-when-met` ends it at the
first evaluation where both robots met theirs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from trot.agents.checkpoint import Counters
from trot.agents.multitask import task_view
from trot.agents.train_config import TrainConfig
from trot.benchmark import Goal, Results, locomotion_row, main, missed, run_to_goals

# task: (max tracking error m/s, max fall rate): each robot's registered benchmark's
THRESHOLDS = {"go1-flat": (0.20, 0.02), "go2-flat-clocked": (0.25, 0.10)}


@dataclass(frozen=True)
class Settings:
    budget_min: float = 30.0
    """minutes of training clock, in all (a resumed run's included)"""
    eval_every_min: float = 3.0
    """minutes of training clock between evaluations"""
    episodes: int = 64
    """episodes per robot and evaluation, one per env"""
    eval_episode_s: float | None = None
    """evaluation episodes this long (default: the task's, 20 s)"""
    out: str = "multitask_go1_go2.csv"
    """each robot's row per evaluation, written as the run goes"""
    resume: bool = False
    """continue the run and its rows"""
    stop_when_met: bool = False
    """stop at the first evaluation where both robots met their thresholds"""


def goals(task: str) -> tuple[Goal, ...]:
    err, falls = THRESHOLDS[task]
    return Goal("lin_vel_error", high=err), Goal("fall_rate", high=falls)


def evaluate(trainer, at: Counters, episodes: int, seconds: float | None) -> list[dict]:
    """Each robot's policy evaluated (its episodes `seconds` long; None: the task's)."""
    env, rows = trainer.env, []
    for k, (name, sub) in enumerate(zip(env.names, env.envs)):
        view = task_view(trainer.ac, k, sub.obs_dim, sub.critic_obs_dim, sub.action_dim,
                         trainer.cfg.agent_effective)
        config = sub.task.config if seconds is None else dataclasses.replace(
            sub.task.config, episode_seconds=seconds)
        r = locomotion_row(name, config, view.actor.cpu(), episodes, 10_000 + trainer.cfg.seed)
        rows.append({"task": name, "iteration": at.iteration, "train_s": round(at.wall_s, 1),
                     "env_steps": at.env_steps,
                     "task_env_steps": at.env_steps * sub.num_envs // env.num_envs,
                     "lin_vel_error": round(r["lin_vel_error"], 4),
                     "fall_rate": round(r["fall_rate"], 4),
                     "met": int(not missed(goals(name), r))})
        print(" | ".join(f"{k} {v}" for k, v in rows[-1].items()), flush=True)
    return rows


class PerRobot:
    """The loop's evaluation (agents/loop.py's `Evaluation`) every `eval_every_min` minutes
    of training clock and at the budget: each robot's row, appended to --out. A checkpoint
    follows each evaluation, and a resumed run drops any row past its checkpoint."""

    checkpoints = True

    def __init__(self, s: Settings, tasks: int, at: Counters):
        self.s, self.tasks = s, tasks
        self.results = Results(Path(s.out), s.resume)
        self.results.rows = [r for r in self.results.rows  # rows from before the
                             if r.get("iteration", 0) <= at.iteration]  # column: kept
        self.rows = self.results.rows
        self.every_s = 60 * s.eval_every_min
        self.next_s = (math.floor(at.wall_s / self.every_s) + 1) * self.every_s

    def due(self, trainer, m: dict[str, float], at: Counters) -> bool:
        return at.wall_s >= self.next_s or trainer.cfg.spent(at.env_steps, at.wall_s)

    def __call__(self, trainer, at: Counters) -> None:
        for row in evaluate(trainer, at, self.s.episodes, self.s.eval_episode_s):
            self.results.add(row)
        self.next_s = (math.floor(at.wall_s / self.every_s) + 1) * self.every_s

    def done(self) -> bool:
        last = self.rows[-self.tasks:]
        return self.s.stop_when_met and len(last) == self.tasks and all(r["met"] for r in last)


def summarize(rows: list[dict]) -> None:
    for name in THRESHOLDS:
        hit = next((r for r in rows if r["task"] == name and r["met"]), None)
        print(f"{name}: thresholds {THRESHOLDS[name]} first met " + (
            f"at {hit['env_steps'] / 1e6:.1f} M env steps in all "
            f"({hit['task_env_steps'] / 1e6:.1f} M its own), "
            f"{hit['train_s'] / 60:.1f} min" if hit else "not reached"))
    steps = sorted({r["env_steps"] for r in rows})
    both = [s for s in steps if all(r["met"] for r in rows if r["env_steps"] == s)]
    print("both robots met their thresholds " + (
        f"at {both[0] / 1e6:.1f} M env steps in all" if both else ": not reached"))


def run(s: Settings, cfg: TrainConfig) -> None:
    tasks = [t for t, _ in cfg.tasks]
    if len(tasks) < 2 or set(tasks) - set(THRESHOLDS):
        raise SystemExit(f"this benchmark trains {' and '.join(THRESHOLDS)} as one policy "
                         f"(their thresholds are its goals), got {', '.join(tasks)}")
    cfg = dataclasses.replace(cfg, minutes=s.budget_min, max_env_steps=10**12,
                              run_dir=cfg.run_dir or "runs/multitask_legged")
    _, per_robot = run_to_goals(cfg, s.resume, lambda at: PerRobot(s, len(tasks), at))
    summarize(per_robot.rows)


if __name__ == "__main__":
    main(Settings, run, ("go1-flat", "go2-flat-clocked", "--num-envs", "2048"))
