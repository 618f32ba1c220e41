"""K seeds trained together (agents/seeds.py) against the same seeds one after another:
training env-steps/s of all seeds, measured in one process, rounds alternating.

    python benchmarks/seeds_throughput.py --iterations 10 -- go1-flat --seeds 0 1 2

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`go1-flat --seeds 0 1 2`): the task, `--seeds` (the stack's), `--num-envs` (per seed),
`--agent.FIELD V`, `--env.FIELD V`. Each round times `--iterations` training iterations
(after `--warmup` untimed ones) of the stack of K seeds (K x num_envs envs in one sim), then
of each seed's own one-seed learner in turn. It prints each round's rates and the median
ratio, stacked / one after another, of env steps per second of training: above 1, the
stack finishes K seeds sooner.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from trot.agents.learners import build
from trot.agents.modes import Seeds, Sync
from trot.agents.train_config import TrainConfig
from trot.benchmark import main


@dataclass(frozen=True)
class Settings:
    iterations: int = 10
    """timed iterations, per round and run"""
    warmup: int = 2
    """untimed iterations of each run first"""
    rounds: int = 3
    """rounds, each timing the stack and then the seeds one after another"""


def timed(iterate, iterations: int) -> float:
    """Seconds for `iterations` calls of iterate (each ends in its host sync). A measurement
    of the learners' iterations alone, not a training run: the loop's logs, checkpoints and
    budgets (agents/loop.py) stay out of the time."""
    t0 = time.perf_counter()
    for _ in range(iterations):
        iterate()
    return time.perf_counter() - t0


def run(s: Settings, cfg: TrainConfig) -> None:
    if not isinstance(cfg.mode, Seeds):
        raise SystemExit("give the stack's seeds after --: TASK --seeds S1 S2 ...")
    seeds = list(cfg.mode.seeds)
    cfg = dataclasses.replace(cfg, export=False)
    steps = cfg.num_envs * cfg.agent.rollout_steps * s.iterations  # per seed, per round
    with tempfile.TemporaryDirectory() as tmp:
        stack = build(cfg, run_dir=Path(tmp))
        alone = [build(dataclasses.replace(cfg, seed=k, mode=Sync())) for k in seeds]
        for learner in (stack, *alone):
            timed(learner.iterate, s.warmup)
        ratios = []
        for r in range(s.rounds):
            t_stack = timed(stack.iterate, s.iterations)
            t_alone = sum(timed(one.iterate, s.iterations) for one in alone)
            k = len(seeds)
            ratios.append(t_alone / t_stack)
            print(f"round {r + 1}: stacked {k * steps / t_stack:,.0f} env-steps/s, one after "
                  f"another {k * steps / t_alone:,.0f} env-steps/s, ratio {ratios[-1]:.3f}",
                  flush=True)
    print(f"task={cfg.task} seeds={seeds} num_envs={cfg.num_envs} per seed, threads="
          f"{torch.get_num_threads()}: stacked / one after another, median of "
          f"{s.rounds} rounds: {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main(Settings, run, ("go1-flat", "--seeds", "0", "1", "2"))
