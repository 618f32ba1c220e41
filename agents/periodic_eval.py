"""`trot train --eval-every K`: every K iterations, between two iterations, the deterministic
policy is evaluated (agents/evaluate.py's `evaluate_policy`: fresh envs on the cpu backend,
noise off, the fixed seed EVAL_SEED) and one row is appended to eval.csv:

    iteration, env_steps, wall_s, mean_return, std_return, mean_length, terminated_rate,
    then the task's eval metrics under `trot eval`'s names (e.g. lin_vel_error, fall_rate)

wall_s is the training clock, which the trainer stops while this runs. With the seed fixed,
`trot eval RUN_DIR --episodes K` on a checkpoint reproduces the row of its iteration.
"""

from __future__ import annotations

from pathlib import Path

import torch

from trot.core import faults
from trot.agents.checkpoint import Counters
from trot.agents.evaluate import EVAL_SEED, evaluate_policy
from trot.agents.logger import CsvRows, WandbSink
from trot.agents.train_config import TrainConfig
from trot.tasks.registry import get_task

EVAL_CSV = "eval.csv"
CORE_COLUMNS = ("iteration", "env_steps", "wall_s", "mean_return", "std_return",
                "mean_length", "terminated_rate")


class PeriodicEval:
    """eval.csv's writer, the loop's default `Evaluation` (agents/loop.py). `iteration` is
    where the run stands (its checkpoint's on resume): rows past it are dropped, as
    metrics.csv's are (agents/logger.py's CsvRows). A `sink` (--wandb) gets each row too,
    its names under eval/."""

    checkpoints = False  # eval.csv drops rows past the checkpoint on resume instead

    def __init__(self, run_dir: Path, cfg: TrainConfig, iteration: int = 0,
                 sink: WandbSink | None = None):
        self.cfg, self.sink = cfg, sink
        self.task_cfg = cfg.env if cfg.env is not None else get_task(cfg.task).config
        self.rows = CsvRows(Path(run_dir) / EVAL_CSV, CORE_COLUMNS, iteration)

    def due(self, learner, m: dict[str, float], at: Counters) -> bool:
        return self.cfg.eval_every > 0 and at.iteration % self.cfg.eval_every == 0

    def done(self) -> bool:
        return False

    def __call__(self, learner, at: Counters) -> None:
        # the fresh env draws from its own generator, but a policy or task may touch the
        # global RNG: training must not see that an evaluation ran (resume stays bitwise)
        with torch.random.fork_rng(devices=[]):
            r, _ = evaluate_policy(self.cfg.task, self.task_cfg, learner.policy(),
                                   self.cfg.eval_episodes, EVAL_SEED)
        row = {"iteration": at.iteration, "env_steps": at.env_steps, "wall_s": at.wall_s} | {
            k: v for k, v in r.items() if k != "episodes" and not k.endswith("_second_half")}
        self.rows.append(row)
        if self.sink is not None:
            self.sink.log(row, "eval/")
        faults.point("evaluated")  # the row is written; this iteration's checkpoint is not
