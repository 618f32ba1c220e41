"""Acting and learning apart, measured on the same cores in one invocation: synchronous
PPO against its asynchronous and distributed arrangements.

    python benchmarks/actor_learner.py --minutes 3 --out docs/data/actor_learner/go1_flat.csv
    python benchmarks/actor_learner.py --minutes 1 --target 475 \
        --out docs/data/actor_learner/cartpole.csv -- cartpole-balance

The flags before `--` are this benchmark's; after it come `trot train`'s own for the
synchronous run (default `go1-flat --num-envs 1024`): the task, `--num-envs` (in all),
`--seed`, `--agent.FIELD V`, `--env.FIELD V`. Each arrangement trains that run for
`--minutes` of training wall-clock, one after the other, from the same seed, adding its
own flags:
  sync        (none: one process, collect, then update)
  async       --async-collect --actor-lag 1 (the next rollout collected on a thread
              while the update runs)
  actors      --actors 1 (an actor process streams rollouts to a learner process)
  nproc       --nproc 2 (data-parallel, each rank half the envs)
  preempt     --nproc 2 --preempt-fraction 0.5 (DD-PPO's straggler preemption)

The table: env steps per second of training wall-clock (the run's metrics.csv), its ratio
to sync, and the training minutes and env steps at which the logged episode return first
reached `--target` (if given). Rows land in `--out` as each run ends; `--resume` skips
those.
"""

from __future__ import annotations

import csv
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trot.agents.train_config import TrainConfig
from trot.benchmark import Results, given_train_args, main

TRAIN = ("go1-flat", "--num-envs", "1024")
ARRANGEMENTS = {
    "sync": [],
    "async": ["--async-collect", "--actor-lag", "1"],
    "actors": ["--actors", "1"],
    "nproc": ["--nproc", "2"],
    "preempt": ["--nproc", "2", "--preempt-fraction", "0.5"],
}
# the ranks of --nproc 2 each simulate half the envs
HALF = {"nproc", "preempt"}
Arrangement = Literal["sync", "async", "actors", "nproc", "preempt"]


@dataclass(frozen=True)
class Settings:
    out: str
    """the rows' CSV, one row per arrangement"""
    minutes: float = 3.0
    """training wall-clock per run"""
    target: float | None = None
    """the logged episode return to reach (None: no target)"""
    only: tuple[Arrangement, ...] = tuple(ARRANGEMENTS)
    """the arrangements to run"""
    resume: bool = False
    """skip the arrangements --out already has"""
    table: bool = False
    """only print --out's table"""


def measure(s: Settings, cfg: TrainConfig, name: str) -> dict:
    """One arrangement's run and its row."""
    envs = cfg.num_envs // 2 if name in HALF else cfg.num_envs
    with tempfile.TemporaryDirectory(prefix="trot-actor-learner-") as d:
        run_dir = Path(d) / "run"
        cmd = [sys.executable, "-m", "trot", "train", *given_train_args(default=TRAIN),
               "--num-envs", str(envs), "--minutes", str(s.minutes), "--max-env-steps",
               str(10**10), "--no-export", "--log-every", "1000000", "--run-dir",
               str(run_dir), *ARRANGEMENTS[name]]
        p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
        with open(run_dir / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    last = rows[-1]
    hit = next((r for r in rows if s.target is not None and r.get("episode_return")
                and float(r["episode_return"]) >= s.target), None)
    return {"arrangement": name, "task": cfg.task, "num_envs": cfg.num_envs,
            "minutes": round(float(last["wall_s"]) / 60, 2),
            "env_steps": int(last["env_steps"]),
            "steps_per_s": round(int(last["env_steps"]) / float(last["wall_s"])),
            "target": math.nan if s.target is None else s.target,
            "minutes_to_target": math.nan if hit is None else
            round(float(hit["wall_s"]) / 60, 2),
            "env_steps_to_target": math.nan if hit is None else int(hit["env_steps"])}


def table(rows: list[dict]) -> str:
    base = next((r["steps_per_s"] for r in rows if r["arrangement"] == "sync"), None)
    out = [f"{'arrangement':12} {'env-steps/s':>12} {'vs sync':>8} {'min to target':>14} "
           f"{'M steps to target':>18}"]
    for r in rows:
        ratio = f"{r['steps_per_s'] / base:.2f}" if base else "-"
        reached = not math.isnan(r["minutes_to_target"])
        to = (f"{r['minutes_to_target']:.2f}" if reached else
              "not reached" if not math.isnan(r["target"]) else "-")
        steps = f"{r['env_steps_to_target'] / 1e6:.2f}" if reached else "-"
        out.append(f"{r['arrangement']:12} {r['steps_per_s']:>12,.0f} {ratio:>8} "
                   f"{to:>14} {steps:>18}")
    return "\n".join(out)


def run(s: Settings, cfg: TrainConfig) -> None:
    if Path(s.out).is_file() and not (s.resume or s.table):
        raise SystemExit(f"{s.out} exists: give --resume to continue it")
    results = Results(Path(s.out), resume=True)
    if not s.table:
        Path(s.out).parent.mkdir(parents=True, exist_ok=True)
        for name in s.only:
            if results.find(arrangement=name):
                continue
            row = measure(s, cfg, name)
            results.add(row)
            print(f"{name}: {row['steps_per_s']} env-steps/s", flush=True)
    print(f"{cfg.task}, {cfg.num_envs} envs in all, {s.minutes:g} min each, seed {cfg.seed}")
    print(table(results.rows))


if __name__ == "__main__":
    main(Settings, run, TRAIN)
