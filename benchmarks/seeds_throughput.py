"""K seeds trained together (agents/seeds.py) against the same seeds one after another:
training env-steps/s of all seeds, measured in one process, rounds alternating.

    python benchmarks/seeds_throughput.py --task go1-flat --seeds 0 1 2 --iterations 10

Each round times `--iterations` training iterations (after `--warmup` untimed ones) of the
stack of K seeds (K x num_envs envs in one sim), then of each seed's own one-seed Trainer
in turn. It prints each round's rates and the median ratio, stacked / one after another,
of env steps per second of training: above 1, the stack finishes K seeds sooner.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import torch

from trot.agents.config import tuned
from trot.agents.seeds import StackedSeeds
from trot.agents.learners import build
from trot.agents.train_config import Seeds, Sync, TrainConfig
from trot.tasks.registry import get_task


def timed(iterate, iterations: int) -> float:
    """Seconds for `iterations` calls of iterate (each ends in its host sync)."""
    t0 = time.perf_counter()
    for _ in range(iterations):
        iterate()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="go1-flat")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--num-envs", type=int, default=1024, help="per seed")
    p.add_argument("--iterations", type=int, default=10, help="timed, per round and run")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    entry = get_task(a.task)
    cfg = TrainConfig(task=a.task, num_envs=a.num_envs, mode=Seeds(tuple(a.seeds)),
                      agent=tuned(entry.agent), export=False)
    steps = a.num_envs * cfg.agent.rollout_steps * a.iterations  # per seed, per round
    with tempfile.TemporaryDirectory() as tmp:
        stack = StackedSeeds(cfg, Path(tmp))
        alone = [build(dataclasses.replace(cfg, seed=s, mode=Sync())) for s in a.seeds]
        for run in (stack, *alone):
            timed(run.iterate, a.warmup)
        ratios = []
        for r in range(a.rounds):
            t_stack = timed(stack.iterate, a.iterations)
            t_alone = sum(timed(one.iterate, a.iterations) for one in alone)
            k = len(a.seeds)
            ratios.append(t_alone / t_stack)
            print(f"round {r + 1}: stacked {k * steps / t_stack:,.0f} env-steps/s, one after "
                  f"another {k * steps / t_alone:,.0f} env-steps/s, ratio {ratios[-1]:.3f}",
                  flush=True)
    print(f"task={a.task} seeds={a.seeds} num_envs={a.num_envs} per seed, threads="
          f"{torch.get_num_threads()}: stacked / one after another, median of "
          f"{a.rounds} rounds: {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
