"""The one training loop. Every way of training is a `Learner`, and this loop alone owns
what a run is around its iterations: the budgets, SIGINT/SIGTERM, the logs and progress
lines, the periodic evaluation, the checkpoint cadence and format, and the views written
beside the checkpoint, and the export at the end. agents/learners.py starts and resumes a
run: it builds the learner of the config's mode, which is then handed here.

A learner knows none of that: it iterates (one collect and update, one host sync), says
where it stands (`iteration`, `env_steps`), and saves and loads its state.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol

import torch

from trot.agents.checkpoint import Checkpoint, Counters, save_checkpoint
from trot.agents.distributed import Comm
from trot.agents.logger import RunLogger, Tee, WandbSink, progress_line
from trot.agents.periodic_eval import PeriodicEval
from trot.agents.modes import Distill
from trot.agents.train_config import TrainConfig, to_json
from trot.core import faults
from trot.core.files import remove_stale_temps

CHECKPOINT = "checkpoint.pt"


class Learner(Protocol):
    """What the loop drives. `kind` names the learner in its checkpoints; `cfg` is the
    run's config (its budgets are read each iteration); `comm` the learner's process group
    (ranks agree on stopping; rank 0 alone writes). `OneRun` below has the defaults of the
    methods after `load_state_dict`, for a learner that is one plain run."""

    kind: ClassVar[str]
    cfg: TrainConfig
    comm: Comm
    device: torch.device
    iteration: int
    env_steps: int

    def start(self, interrupted: Callable[[], bool]) -> None:
        """Before the clock starts: workers or actors are started here. `interrupted`
        tells whether a stop was asked for (a learner that waits on others polls it)."""

    def iterate(self) -> dict[str, float]:
        """One iteration: collect and update, one host sync; its metrics as plain floats
        (the learner's counters moved on)."""

    def close(self, failed: bool) -> list[dict[str, float]]:
        """The run ends (`failed`: by an error): stop what `start` started. Returns the
        rows still to log (the updates a3c's workers finished meanwhile)."""

    def state_dict(self) -> dict | None:
        """Everything resume needs, beside the counters (None on ranks other than 0; every
        rank calls it)."""

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict()`'s, after the counters were set."""

    def policy(self) -> torch.nn.Module | None:
        """The actor that periodic evaluation plays (None: this learner has none)."""

    def open_logger(self, run_dir: Path, at: Counters) -> RunLogger:
        """The run's logs, continuing from `at`."""

    def progress(self, m: dict[str, float]) -> str:
        """The progress line of an iteration's metrics."""

    def write_views(self, run_dir: Path, checkpoint: Checkpoint) -> None:
        """After each checkpoint: the run directories cut from this run (each seed's, each
        task's), if any."""

    def run_dirs(self, run_dir: Path) -> list[Path]:
        """The one-policy run directories this run leaves (exported at the end)."""


class Interrupted(RuntimeError):
    """A part of the learner failed (an a3c worker died) and the learner stopped the rest
    cleanly: the loop logs `rows` (raised by `close`: what the others finished), writes the
    checkpoint, then raises this."""

    rows: list[dict[str, float]] = []


class OneRun:
    """The Learner protocol's defaults for a learner that is one run: nothing to start or
    stop, its actor evaluated, metrics.csv and TensorBoard, the usual progress line, no
    run directories but its own. A learner overrides what it does otherwise."""

    def start(self, interrupted: Callable[[], bool]) -> None:
        pass

    def close(self, failed: bool) -> list[dict[str, float]]:
        return []

    def policy(self) -> torch.nn.Module | None:
        return self.ac.actor

    def open_logger(self, run_dir: Path, at: Counters) -> RunLogger:
        return RunLogger(run_dir, iteration=at.iteration, env_steps=at.env_steps)

    def progress(self, m: dict[str, float]) -> str:
        return progress_line(m, self.cfg.max_env_steps, 60 * self.cfg.minutes)

    def write_views(self, run_dir: Path, checkpoint: Checkpoint) -> None:
        pass

    def run_dirs(self, run_dir: Path) -> list[Path]:
        return [Path(run_dir)]


def checkpoint(learner: Learner, wall_s: float) -> Checkpoint | None:
    """The learner's checkpoint as it stands (a collective: every rank calls it)."""
    state = learner.state_dict()
    if state is None:
        return None
    return Checkpoint(learner.kind, to_json(learner.cfg),
                      Counters(learner.iteration, learner.env_steps, wall_s), state)


def save(learner: Learner, run_dir: Path, wall_s: float = 0.0) -> None:
    ckpt = checkpoint(learner, wall_s)
    if ckpt is not None:
        save_checkpoint(run_dir / CHECKPOINT, ckpt)
        learner.write_views(run_dir, ckpt)


class Evaluation(Protocol):
    """What the loop evaluates between iterations, with the training clock stopped:
    PeriodicEval (`trot train --eval-every K`, eval.csv) or a benchmark's
    (trot/benchmark.py)."""

    checkpoints: bool
    """whether the loop writes a checkpoint after each evaluation (its rows then never run
    ahead of the checkpoint a resumed run starts from)"""

    def due(self, learner: Learner, m: dict[str, float], at: Counters) -> bool:
        """Whether to evaluate now, after the learner's iteration whose metrics are m,
        where the run stands at `at` (its training seconds so far included)."""

    def __call__(self, learner: Learner, at: Counters) -> None:
        """Evaluate the learner's policy and record it."""

    def done(self) -> bool:
        """Whether the run may end now, before its budget (a benchmark's goals met)."""


def train(learner: Learner, run_dir: Path, wall_s: float = 0.0, quiet: bool = False,
          export: Callable[[Path], None] | None = None,
          evaluation: Evaluation | None = None) -> float:
    """Iterate to the budget, a stop signal or `evaluation.done()`, logging, evaluating
    (default: the config's eval_every) and checkpointing on the way and at the end; then,
    unless the config says not to, `export` each run directory the run leaves (rank 0).
    Returns the training seconds in all (`wall_s`: before this call)."""
    run_dir = Path(run_dir)
    main = learner.comm.is_main
    quiet = quiet or not main  # rank 0 alone prints, logs and writes files
    if main:  # what a crashed writer left; a live writer's (a concurrent export) stays
        remove_stale_temps(run_dir)
    sink = WandbSink(run_dir, learner.cfg.wandb, to_json(learner.cfg)) if (
        main and learner.cfg.wandb) else None  # --wandb: the logs' rows to W&B as well
    logger = learner.open_logger(run_dir, Counters(learner.iteration, learner.env_steps,
                                                   wall_s)) if main else None
    if sink is not None:
        logger = Tee(logger, sink)
    if evaluation is None and main and learner.cfg.eval_every:
        evaluation = PeriodicEval(run_dir, learner.cfg, learner.iteration, sink)
    stop, clock = StopFlag(), _Clock(wall_s, learner.env_steps)
    closed = False  # whether the learner was told the run ends
    try:
        with stop.installed():
            learner.start(lambda: bool(stop.requested))
            clock.restart(learner.env_steps)
            try:
                while not learner.comm.any(_over(learner, clock, evaluation) or
                                           bool(stop.requested), learner.device):
                    _iteration(learner, run_dir, clock, logger, evaluation, quiet)
            except Interrupted:  # the learner stopped its parts: keep their work, then say
                closed = True
                logger = _finish(learner, run_dir, clock, logger)
                raise
            # still under the handlers: a Ctrl-C now is noted, not a lost save
            closed = True
            logger = _finish(learner, run_dir, clock, logger)
    finally:
        if not closed:  # an error: the learner releases what it started
            learner.close(failed=True)
        if logger is not None:  # keep what was logged
            logger.close()
    if stop.requested and main:
        print(f"stopped by {stop.requested}; checkpoint written. Resume with:\n"
              f"  {resume_command(learner.cfg, run_dir)}", flush=True)
    if export is not None and learner.cfg.export and main:
        for d in learner.run_dirs(run_dir):
            export(d)
    return clock.wall_s


def _over(learner: Learner, clock: _Clock, evaluation: Evaluation | None) -> bool:
    return learner.cfg.spent(learner.env_steps, clock.wall_s) or (
        evaluation is not None and evaluation.done())


def _iteration(learner: Learner, run_dir: Path, clock: _Clock, logger: RunLogger | None,
               evaluation: Evaluation | None, quiet: bool) -> None:
    """One iteration, logged; an evaluation if due (off the clock); a checkpoint if due."""
    m = learner.iterate()
    _log(learner, clock.tick(m, learner.env_steps), logger, quiet)
    saving = learner.iteration % learner.cfg.checkpoint_every == 0
    at = Counters(learner.iteration, learner.env_steps, clock.wall_s)
    if evaluation is not None and evaluation.due(learner, m, at):
        t0 = time.monotonic()
        evaluation(learner, at)
        clock.pause(time.monotonic() - t0)  # the clocks skip the time it took
        saving |= evaluation.checkpoints
    if saving:
        if logger is not None:  # the logs reach disk before the checkpoint
            logger.flush()
        save(learner, run_dir, clock.wall_s)


def _finish(learner: Learner, run_dir: Path, clock: _Clock,
            logger: RunLogger | None) -> None:
    """The end of a run: the learner stops what it started, its last rows are logged, the
    logs closed, the last checkpoint written. Returns None: the logger is closed."""
    late = None
    try:
        rows = learner.close(failed=False)
    except Interrupted as e:  # e.g. a worker that died after the last iteration
        rows, late = e.rows, e
    if logger is not None:
        for m in rows:
            logger.log(m | {"wall_s": clock.now()})
        logger.close()
    save(learner, run_dir, clock.wall_s)
    if late is not None:
        raise late


def _log(learner: Learner, m: dict[str, float], logger: RunLogger | None,
         quiet: bool) -> None:
    if logger is not None:
        logger.log(m)
        faults.point("logged")
    if not quiet and learner.iteration % learner.cfg.log_every == 0:
        print(learner.progress(m), flush=True)


def resume_command(cfg: TrainConfig, run_dir: Path) -> str:
    return f"trot {'distill' if isinstance(cfg.mode, Distill) else 'train'} --resume {run_dir}"


class _Clock:
    """The training clock (seconds, evaluations excluded) and the rate since the last
    iteration; `steps_per_s` a learner reports itself is kept (a3c's mean rate)."""

    def __init__(self, wall_s: float, env_steps: int):
        self.wall_s = wall_s
        self.restart(env_steps)

    def restart(self, env_steps: int) -> None:
        now = time.monotonic()
        self.start, self.last = now - self.wall_s, (now, env_steps)

    def now(self) -> float:
        return time.monotonic() - self.start

    def tick(self, m: dict[str, float], env_steps: int) -> dict[str, float]:
        now = time.monotonic()
        self.wall_s = now - self.start
        m["wall_s"] = self.wall_s
        m.setdefault("steps_per_s", (env_steps - self.last[1]) / max(now - self.last[0],
                                                                     1e-9))
        self.last = (now, env_steps)
        return m

    def pause(self, seconds: float) -> None:
        self.start += seconds
        self.last = (self.last[0] + seconds, self.last[1])


class StopFlag:
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
