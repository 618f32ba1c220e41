"""Starting and resuming a run of any mode: the learner that the config's mode names, built
and handed to the one loop (agents/loop.py). `trot train`, `trot distill`, the benchmarks
and the tests all start runs here, so every mode resumes the same way:

    learner, run_dir = start(cfg)               # a new run directory, config.json written
    learner, wall_s = resume(run_dir)           # from its config.json and checkpoint
    train(learner, run_dir, wall_s, export=f)   # agents/loop.py's loop, then the exports
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from trot.agents.a3c import A3C as A3CLearner
from trot.agents.checkpoint import CheckpointError
from trot.agents.distill import Distiller
from trot.agents.distributed import ENV_STREAM, ONE_PROCESS, Comm, rank_seed
from trot.agents.loop import Learner
from trot.agents.multitask import VIEW
from trot.agents.runs import (continue_with, new_run_dir, read_checkpoint, run_config,
                              write_config)
from trot.agents.seeds import StackedSeeds
from trot.agents.modes import A3C, Actors, Distill, Seeds, Sync, Tasks, describe
from trot.agents.train_config import TrainConfig
from trot.agents.trainer import Trainer
from trot.tasks.registry import make_task_envs


def _trainer(cfg: TrainConfig, run_dir: Path, comm: Comm, actors: Comm | None) -> Trainer:
    cfg.validate()  # before any env is built
    shares = cfg.mode.task_shares if isinstance(cfg.mode, Tasks) else ()
    env = make_task_envs(cfg.tasks, cfg.num_envs, cfg.sim, cfg.device,
                         rank_seed(cfg.seed + ENV_STREAM, comm.rank), shares)
    return Trainer(cfg, env, comm, actors)


BUILDERS: dict[type, Callable[[TrainConfig, Path, Comm, Comm | None], Learner]] = {
    Sync: _trainer, Actors: _trainer, Tasks: _trainer,
    A3C: lambda cfg, run_dir, comm, actors: A3CLearner(cfg, run_dir),
    Seeds: lambda cfg, run_dir, comm, actors: StackedSeeds(cfg, run_dir),
    Distill: lambda cfg, run_dir, comm, actors: Distiller(cfg),
}
"""Each mode's learner. `actors`: the Actors mode's job of actor ranks (its rank 0 learns);
`comm` the learners' own (data-parallel ranks under Sync)."""


def build(cfg: TrainConfig, comm: Comm = ONE_PROCESS, actors: Comm | None = None,
          run_dir: Path | None = None) -> Learner:
    """The learner of cfg's mode, new (run_dir: where it runs; default cfg.run_dir)."""
    run_dir = Path(run_dir or cfg.run_dir or ".")
    return BUILDERS[type(cfg.mode)](cfg, run_dir, comm, actors)


def start(cfg: TrainConfig, comm: Comm = ONE_PROCESS,
          actors: Comm | None = None) -> tuple[Learner, Path]:
    """A new run of `cfg`: its learner and run directory (config.json written by rank 0)."""
    cfg.validate()
    run_dir = Path(comm.broadcast_object(str(new_run_dir(cfg))))  # rank 0's clock names it
    learner = build(cfg, comm, actors, run_dir)
    if comm.is_main:
        write_config(run_dir, cfg)
    return learner, run_dir


def resume(run_dir: Path, comm: Comm = ONE_PROCESS, device: str | None = None,
           actors: Comm | None = None, changes: dict | None = None) -> tuple[Learner, float]:
    """The run in run_dir rebuilt from its config.json and checkpoint, with `changes`
    (agents/runs.py's RESUMABLE settings: the budgets, raised, as totals; export, eval and
    log settings) saved to config.json by rank 0; returns it and its training seconds.
    `device` replaces the saved one (a rank's own GPU under torchrun)."""
    cfg, ckpt = run_config(run_dir), read_checkpoint(run_dir)
    if ckpt.learner == VIEW:
        raise ValueError(f"{run_dir} is one task's policy cut from the run of several tasks "
                         f"{ckpt.state['view_of']} (for eval, export, play and sim2sim): "
                         f"continue training with `trot train --resume "
                         f"{ckpt.state['view_of']}`")
    mode = dataclasses.replace(cfg.mode, nproc=comm.world_size) \
        if isinstance(cfg.mode, Sync) else cfg.mode
    cfg = dataclasses.replace(cfg, mode=mode, device=device or cfg.device)
    at = ckpt.counters
    cfg = continue_with(run_dir, cfg, at.env_steps, at.wall_s, changes or {},
                        write=comm.is_main)
    learner = build(cfg, comm, actors, run_dir)
    if ckpt.learner != learner.kind:
        raise CheckpointError(f"{run_dir}'s checkpoint is of the {ckpt.learner!r} learner, "
                              f"and its config's mode ({describe(type(cfg.mode))}) trains "
                              f"with the {learner.kind!r} learner")
    learner.iteration, learner.env_steps = at.iteration, at.env_steps
    learner.load_state_dict(ckpt.state)
    return learner, at.wall_s
