"""Training env-steps/s of this checkout against another one (an earlier commit, a branch):
the same `trot train` command run in each, rounds alternating, the ratio of each round.

    git worktree add /tmp/before HEAD~5
    python benchmarks/train_speed.py --against /tmp/before --rounds 5 -- go1-flat

Each run is `python -m trot train TRAIN ARGS --no-export` in a fresh process with its
current folder in the tree (Python then imports that tree's trot: docs/architecture.md,
"Running from a clone"), for `--iterations` iterations; its rate is the median of
metrics.csv's steps_per_s after `--warmup` iterations (the first ones pay for imports and
first-call allocations). A round runs this tree then the other; the ratio is this tree's
rate over the other's, and the summary their median and range. Nothing else CPU-heavy
should run beside it.
"""

from __future__ import annotations

import csv
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trot.agents.train_config import TrainConfig
from trot.benchmark import given_train_args, main

HERE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Settings:
    against: str
    """the other checkout's root (a clone or a git worktree)"""
    rounds: int = 5
    """rounds, each this tree then the other"""
    iterations: int = 30
    """iterations per run"""
    warmup: int = 5
    """iterations left out of each run's rate"""


def rate(tree: Path, args: list[str], s: Settings, steps: int) -> float:
    """env-steps/s of one training run in `tree` (median after the warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "trot", "train", *args, "--no-export",
               "--max-env-steps", str(steps), "--run-dir", str(run)]
        done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{tree}: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        with open(run / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    return statistics.median(float(r["steps_per_s"]) for r in rows[s.warmup:])


def run(s: Settings, cfg: TrainConfig) -> None:
    args = given_train_args(default=("go1-flat",))
    steps = s.iterations * cfg.num_envs * cfg.agent_effective.rollout_steps
    other = Path(s.against).resolve()
    ratios = []
    for k in range(s.rounds):
        mine, theirs = rate(HERE, args, s, steps), rate(other, args, s, steps)
        ratios.append(mine / theirs)
        print(f"round {k + 1}: this tree {mine:,.0f} env-steps/s, {other} {theirs:,.0f} "
              f"env-steps/s, ratio {ratios[-1]:.3f}", flush=True)
    print(f"median of {s.rounds} rounds: {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}); train args: {' '.join(args)}")


if __name__ == "__main__":
    main(Settings, run, ("go1-flat",))
