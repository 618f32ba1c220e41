"""The training loop around `iterate()`: budgets, signals, logs, progress lines, periodic
evaluation and checkpoints, in time order. Shared by the one-seed `Trainer` (agents/
trainer.py) and K stacked seeds (`Seeds`, agents/seeds.py), which differ in what one
iteration is and in where its rows are logged.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import torch

from trot import faults
from trot.agents.distributed import Comm
from trot.agents.logger import RunLogger, progress_line
from trot.agents.periodic_eval import PeriodicEval
from trot.config import TrainConfig
from trot.runs import remove_stale_temps


class TrainingLoop:
    """What a learner provides: `cfg`, `comm`, `device`, `collector` (its `interrupted`
    flag is set here; `close()` ends the run), the counters `iteration`, `env_steps` and
    `wall_s`, `iterate()` -> the iteration's metrics, and `save(run_dir)`. `open_logger`,
    `progress` and `periodic_eval` have the one-seed defaults."""

    cfg: TrainConfig
    comm: Comm
    collector: Any
    iteration: int
    env_steps: int
    wall_s: float

    @property
    def device(self) -> torch.device:
        raise NotImplementedError

    def iterate(self) -> dict[str, float]:
        raise NotImplementedError

    def save(self, run_dir: Path) -> None:
        raise NotImplementedError

    def open_logger(self, run_dir: Path) -> RunLogger:
        return RunLogger(run_dir, iteration=self.iteration, env_steps=self.env_steps)

    def progress(self, m: dict[str, float]) -> str:
        return progress_line(m, self.cfg.max_env_steps, 60 * self.cfg.minutes)

    def periodic_eval(self, run_dir: Path) -> PeriodicEval | None:
        """eval.csv every cfg.eval_every iterations, off the training clock (rank 0)."""
        return PeriodicEval(run_dir, self.cfg, self.iteration) if self.cfg.eval_every \
            else None

    def done(self) -> bool:
        return self.cfg.spent(self.env_steps, self.wall_s)

    def train(self, run_dir: Path, quiet: bool = False) -> Path:
        main = self.comm.is_main
        quiet = quiet or not main  # rank 0 alone prints, logs and writes files
        if main:  # what a crashed writer left; a live writer's (a concurrent export) stays
            remove_stale_temps(run_dir)
        logger = self.open_logger(run_dir) if main else None
        evaluate = self.periodic_eval(run_dir) if main else None
        stop = _StopFlag()
        start = time.monotonic() - self.wall_s
        last = (time.monotonic(), self.env_steps)
        self.collector.interrupted = lambda: bool(stop.requested)
        try:
            with stop.installed():
                # ranks agree on stopping (clocks and signals differ between processes)
                while not self.comm.any(self.done() or bool(stop.requested), self.device):
                    m = self.iterate()
                    self.wall_s = time.monotonic() - start
                    now = time.monotonic()
                    m["wall_s"] = self.wall_s
                    m["steps_per_s"] = (self.env_steps - last[1]) / max(now - last[0], 1e-9)
                    last = (now, self.env_steps)
                    if logger is not None:
                        logger.log(m)
                        faults.point("logged")
                    if evaluate is not None:  # the clocks skip the time it took
                        paused = evaluate(self.ac.actor, self.iteration, self.env_steps,
                                          self.wall_s)
                        start, last = start + paused, (last[0] + paused, last[1])
                    if not quiet and self.iteration % self.cfg.log_every == 0:
                        print(self.progress(m), flush=True)
                    if self.iteration % self.cfg.checkpoint_every == 0:
                        if logger is not None:  # the logs reach disk before the checkpoint
                            logger.flush()
                        self.save(run_dir)
                try:  # the decoupled actors' inbox: an actor that never came for its
                    self.collector.close()  # stop raises, after the learner's last save
                finally:  # still under the handlers: a Ctrl-C now is noted, not a lost save
                    if logger is not None:
                        logger, closing = None, logger
                        closing.close()
                    self.save(run_dir)
        finally:
            if logger is not None:  # an error above: keep what was logged
                logger.close()
        if stop.requested and main:
            print(f"stopped by {stop.requested}; checkpoint written. Resume with:\n"
                  f"  trot train --resume {run_dir}", flush=True)
        return run_dir


class _StopFlag:
    """SIGINT/SIGTERM finish the current iteration, then checkpoint. A second SIGINT aborts."""

    def __init__(self) -> None:
        self.requested: str | None = None

    def _handle(self, signum: int, _frame: object) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    @contextlib.contextmanager
    def installed(self):
        old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)
