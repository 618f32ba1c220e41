"""One policy for two robots: go1-flat and go2-flat-clocked (the Go2 with go1-flat's
observation setup), each robot's tracking error and falls against env steps.

    python benchmarks/multitask_legged.py --budget-min 30 --out docs/data/multitask_go1_go2.csv

Trains `trot train go1-flat go2-flat-clocked` (--num-envs in all, split by --task-shares,
equal unless given; go1-flat's agent settings, per-task PopArt unless --shared). Every --eval-every-min minutes of training
the clock is paused and each robot's own policy (the task fixed, agents/multitask.py) is
evaluated as benchmarks/locomotion_cpu.py evaluates a one-task run: one 20-s episode in
each of --episodes fresh envs, noise off, commands, randomization and pushes on. Each
robot's row (its own env steps, half the total, beside the total) is appended to --out.
At the end it prints the total env steps at which each robot first met its registered
thresholds (go1-flat <= 0.20 m/s and <= 2% falls; go2: <= 0.25 m/s and <= 10%), and when
both had. `--resume` continues the run in --run-dir from its checkpoint; `--stop-when-met`
ends it at the first evaluation where both robots met theirs; `--agent FIELD=VALUE` changes
PPO settings, e.g. `minibatches=8`: with twice the envs of a one-robot run, the same
minibatch size (and so as many gradient steps per env step as each robot's own run).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import time
from pathlib import Path

from locomotion_cpu import evaluate_now

from trot.agents.config import parse_override, tuned
from trot.agents.multitask import task_view
from trot.agents.learners import build, resume
from trot.agents.loop import save
from trot.agents.train_config import Tasks, TrainConfig
from trot.core.files import atomic_write
from trot.agents.runs import CHECKPOINT, write_config
from trot.tasks.registry import get_task

# task: (max tracking error m/s, max fall rate): each robot's registered benchmark's
THRESHOLDS = {"go1-flat": (0.20, 0.02), "go2-flat-clocked": (0.25, 0.10)}
FIELDS = ("task", "train_s", "env_steps", "task_env_steps", "lin_vel_error", "fall_rate",
          "met")


def evaluate(trainer, train_s: float, episodes: int, seconds: float | None) -> list[dict]:
    """Each robot's policy evaluated (its episodes `seconds` long; None: the task's)."""
    env, rows = trainer.env, []
    for k, (name, sub) in enumerate(zip(env.names, env.envs)):
        view = task_view(trainer.ac, k, sub.obs_dim, sub.critic_obs_dim, sub.action_dim,
                         trainer.cfg.agent_effective)
        config = sub.task.config if seconds is None else dataclasses.replace(
            sub.task.config, episode_seconds=seconds)
        r = evaluate_now(name, config, view.actor.cpu(), episodes, 10_000 + trainer.cfg.seed)
        err, falls = THRESHOLDS[name]
        rows.append({"task": name, "train_s": round(train_s, 1),
                     "env_steps": trainer.env_steps,
                     "task_env_steps": trainer.env_steps * sub.num_envs // env.num_envs,
                     "lin_vel_error": round(r["lin_vel_error"], 4),
                     "fall_rate": round(r["fall_rate"], 4),
                     "met": int(r["lin_vel_error"] <= err and r["fall_rate"] <= falls)})
        print(" | ".join(f"{k} {v}" for k, v in rows[-1].items()), flush=True)
    return rows


def summarize(rows: list[dict]) -> None:
    first = {}
    for name in THRESHOLDS:
        hit = next((r for r in rows if r["task"] == name and int(r["met"])), None)
        first[name] = hit
        print(f"{name}: thresholds {THRESHOLDS[name]} first met " + (
            f"at {int(hit['env_steps']) / 1e6:.1f} M env steps in all "
            f"({int(hit['task_env_steps']) / 1e6:.1f} M its own), "
            f"{float(hit['train_s']) / 60:.1f} min" if hit else "not reached"))
    steps = sorted({int(r["env_steps"]) for r in rows})
    both = [s for s in steps if all(int(r["met"]) for r in rows
                                    if int(r["env_steps"]) == s)]
    print("both robots met their thresholds " + (
        f"at {both[0] / 1e6:.1f} M env steps in all" if both else ": not reached"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget-min", type=float, default=30.0)
    p.add_argument("--eval-every-min", type=float, default=3.0)
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--eval-episode-s", type=float, default=None,
                   help="evaluation episodes this long (default: the task's, 20 s)")
    p.add_argument("--num-envs", type=int, default=2048, help="in all, for both robots")
    p.add_argument("--task-shares", type=float, nargs=2, default=(), metavar=("GO1", "GO2"),
                   help="each robot's share of --num-envs (default: equal)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shared", action="store_true", help="one PopArt for both robots")
    p.add_argument("--run-dir", type=Path, default=Path("runs/multitask_legged"))
    p.add_argument("--out", type=Path, default=Path("multitask_go1_go2.csv"))
    p.add_argument("--resume", action="store_true")
    p.add_argument("--stop-when-met", action="store_true",
                   help="stop at the first evaluation where both robots met their thresholds")
    p.add_argument("--agent", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="PPO settings over go1-flat's, e.g. minibatches=8")
    a = p.parse_args()
    tasks = tuple(THRESHOLDS)
    if a.resume and (a.run_dir / CHECKPOINT).exists():
        trainer, train_s = resume(a.run_dir)
        with open(a.out, newline="") as f:
            rows = list(csv.DictReader(f))
    else:
        agent = tuned(get_task(tasks[0]).agent + tuple(map(parse_override, a.agent)) + (
            ("popart_tasks", "shared" if a.shared else "per-task"),))
        trainer = build(TrainConfig(task=tasks[0], num_envs=a.num_envs, seed=a.seed,
                                    mode=Tasks(tasks[1:], task_shares=tuple(a.task_shares)),
                                    agent=agent, max_env_steps=10**12,
                                    run_dir=str(a.run_dir)))
        write_config(a.run_dir, trainer.cfg)
        rows, train_s = [], 0.0
    while train_s < 60 * a.budget_min and not (a.stop_when_met and rows and all(
            int(r["met"]) for r in rows[-len(tasks):])):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 60 * a.eval_every_min and \
                train_s + time.perf_counter() - t0 < 60 * a.budget_min:
            trainer.iterate()
        train_s += time.perf_counter() - t0
        rows += evaluate(trainer, train_s, a.episodes, a.eval_episode_s)

        def write(path: Path) -> None:
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, FIELDS)
                w.writeheader()
                w.writerows(rows)
        atomic_write(a.out, write)  # the rows first, then the checkpoint they follow
        save(trainer, a.run_dir, train_s)
    summarize(rows)


if __name__ == "__main__":
    main()
