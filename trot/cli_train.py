"""The training commands of the CLI (trot/cli.py dispatches to them):

    trot train TASK [--algo ppo|a2c|a3c] [--actors K] [--nproc K] [--agent.FIELD V] ...
    trot train TASK --seeds S1 S2 ... (several seeds in one process, agents/seeds.py)
    trot train TASK_A TASK_B ... [--env.TASK_A.FIELD V] (one policy, agents/multitask.py)
    trot train --resume RUN_DIR [--max-env-steps N] [--minutes M]
    trot distill TEACHER_RUN STUDENT_TASK [train flags] [--distill.FIELD V]

One process, torchrun's ranks (--nproc, --actors: this same command in each), or A3C's
spawned workers; each ends with the run directory printed (and exported unless --no-export).
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

from trot.cli import USAGE, fail


@dataclass(frozen=True)
class ResumeArgs:
    resume: str
    """run directory to continue"""
    max_env_steps: int | None = None
    """raise the run's step budget, kept in its config.json (default: keep it)"""
    minutes: float | None = None
    """raise the run's wall-clock budget, kept in its config.json (default: keep it)"""


def parse_train(args: list[str], prog: str = "trot train",
                extra: tuple[tuple[str, type], ...] = ()):
    """TrainConfig for `trot train TASK [TASK ...] ...`; each task's config class types its
    `--env.*` (several tasks: `--env.TASK.*`). extra: (name, frozen dataclass) fields parsed
    beside it (`--NAME.FIELD V`); with them, returns (TrainConfig, {name: parsed value})."""
    from trot.agents.config import tuned
    from trot.config import TrainConfig
    from trot.tasks.registry import get_task

    names = list(itertools.takewhile(lambda a: not a.startswith("-"), args))
    entries = [get_task(n) for n in names]
    env_cls, env_default = _env_field(entries)
    fields = [("env", env_cls, dataclasses.field(default_factory=lambda: env_default)),
              # the tasks are the leading arguments and their settings --env.TASK.*
              ("with_tasks", tyro.conf.Suppress[tuple[str, ...]], dataclasses.field(
                  default=tuple(names[1:]))),
              ("with_envs", tyro.conf.Suppress[tuple], dataclasses.field(default=()))] + [
        (name, cls, dataclasses.field(default_factory=cls)) for name, cls in extra]
    cls = dataclasses.make_dataclass("TrainConfig", fields, bases=(TrainConfig,), frozen=True)
    cls.__doc__ = f"{prog.capitalize()} " + "; ".join(f"{e.name}: {e.description}"
                                                       for e in entries)
    budgets = [e.budget for e in entries]  # several tasks: the sum of their own
    budget = {} if None in budgets else {"max_env_steps": sum(budgets)}
    default = cls(task=names[0], with_tasks=tuple(names[1:]), agent=tuned(entries[0].agent),
                  env=env_default, **budget)
    given = {a.split("=")[0] for a in args[len(names):]}
    if {"--seed", "--seeds"} <= given:
        raise ValueError("give --seed S (one run) or --seeds S1 S2 ... (several, trained "
                         "together), not both")
    if given & {"--task", "--with-tasks", "--with-envs"}:
        raise ValueError("give the tasks as the first arguments (trot train TASK_A TASK_B "
                         "...), not --task or --with-tasks; their settings as --env.FIELD "
                         "(several tasks: --env.TASK.FIELD)")
    parsed = tyro.cli(cls, args=args[len(names):], default=default,
                      prog=f"{prog} {' '.join(names)}")
    env = parsed.env if len(names) == 1 else [getattr(parsed.env, _ident(n)) for n in names]
    cfg = TrainConfig(**{f.name: getattr(parsed, f.name)
                         for f in dataclasses.fields(TrainConfig)} |
                      ({} if len(names) == 1 else {"env": env[0], "with_envs": tuple(env[1:])}))
    return (cfg, {name: getattr(parsed, name) for name, _ in extra}) if extra else cfg


def _ident(task: str) -> str:
    """A task name as a field name (the flag shows it with hyphens again)."""
    ident = task.replace("-", "_")
    if not ident.isidentifier():
        raise ValueError(f"task {task!r} cannot be trained beside others: its --env.TASK "
                         "flags need a name of letters, digits, '-' and '_'")
    return ident


def _env_field(entries) -> tuple[type, object]:
    """The type and default of `--env`: the task's config class, or for several tasks a
    dataclass with one field per task (`--env.TASK.FIELD`)."""
    if len(entries) == 1:
        return type(entries[0].config), entries[0].config
    envs = dataclasses.make_dataclass("Envs", [
        (_ident(e.name), type(e.config), dataclasses.field(default=e.config))
        for e in entries], frozen=True)
    envs.__doc__ = "each task's settings"
    return envs, envs()


def distill(args: list[str]) -> int:
    """`trot distill TEACHER_RUN STUDENT_TASK [train flags] [--distill.FIELD V]`: see
    agents/distill.py."""
    from trot.agents.distill import DistillSettings, resume_distill
    from trot.agents.distill import distill as run_distill

    if not args or args[0] in ("-h", "--help") or (len(args) < 2 and args[0][:8] !=
                                                    "--resume"):
        print("usage: trot distill TEACHER_RUN STUDENT_TASK [--num-envs N] [--max-env-steps "
              "N] [--minutes M] [--run-dir D] [--agent.FIELD V] [--env.FIELD V] "
              "[--distill.FIELD V]\n       trot distill --resume RUN_DIR [--max-env-steps N]"
              " [--minutes M]\n(trot distill TEACHER_RUN STUDENT_TASK --help: every flag)")
        return 0 if args and args[0] in ("-h", "--help") else 2
    if args[0].startswith("--resume"):
        a = tyro.cli(ResumeArgs, args=args, prog="trot distill")
        d, run_dir = resume_distill(Path(a.resume), a.max_env_steps, a.minutes), \
            Path(a.resume)
        cfg = d.cfg
    else:
        cfg, extra = parse_train(args[1:], f"trot distill {args[0]}",
                                 (("distill", DistillSettings),))
        _, run_dir = run_distill(cfg, extra["distill"], Path(args[0]))
    if cfg.export:
        _export_after_training(run_dir)
    print(run_dir)
    return 0


def train(args: list[str]) -> int:
    import os

    from trot.agents.checkpoint import CheckpointError
    from trot.agents.distributed import ONE_PROCESS, DistributedError, init_from_env, shutdown
    from trot.runs import run_config

    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    try:
        resume = tyro.cli(ResumeArgs, args=args, prog="trot train") \
            if args[0].startswith("--resume") else None
        cfg = run_config(Path(resume.resume)) if resume else parse_train(args)
        if cfg.algo == "a3c":
            return _train_a3c(cfg, resume)
        if cfg.seeds:
            return _train_seeds(cfg, resume)
        procs = cfg.actors + 1 if cfg.actors else cfg.nproc
        if procs > 1 and "WORLD_SIZE" not in os.environ:
            from trot.launch import launch_torchrun

            return launch_torchrun(procs, args)
        comm, device = init_from_env("cpu" if cfg.actors else cfg.device, cfg.dist_timeout)
        actors = None
        if cfg.actors:  # rank 0 learns alone; the others act (agents/actors.py)
            cfg.validate()
            if comm.world_size != cfg.actors + 1:
                raise ValueError(f"actors {cfg.actors} needs {cfg.actors + 1} processes "
                                 f"(a learner and the actors), this job has {comm.world_size}")
            if comm.rank > 0:
                return _act(cfg, comm)
            actors, comm, device = comm, ONE_PROCESS, cfg.device
        trainer, run_dir, msg = _trainer(cfg, resume, comm, device, actors)
        if comm.is_main:
            print(msg + (f" ({comm.world_size} processes)" if comm.distributed else ""),
                  flush=True)
        # mjx compiles its step and reset once (several tasks: each its own, not shown)
        compile_s = getattr(getattr(trainer.env, "sim", None), "compile_seconds", None)
        if compile_s is not None and comm.is_main:
            print(f"sim {trainer.cfg.sim}: compiled in {compile_s:.1f} s", flush=True)
    except (ValueError, TypeError, KeyError, CheckpointError) as e:
        return fail(str(e))
    try:
        trainer.train(run_dir)
    except DistributedError as e:  # a peer died or hangs: no clean shutdown is possible
        return fail(str(e))
    shutdown()
    if comm.is_main:
        if trainer.cfg.export:  # several tasks: each task's own run directory
            from trot.runs import task_dir

            cfg = trainer.cfg
            for d in [task_dir(run_dir, t) for t, _ in cfg.tasks] if cfg.with_tasks \
                    else [run_dir]:
                _export_after_training(d)
        print(run_dir)
    return 0


def _trainer(cfg, resume: ResumeArgs | None, comm, device: str, actors):
    """(trainer, run directory, what to print): a new run, or the resumed one with its
    budget raised as --max-env-steps / --minutes ask."""
    from trot.agents.trainer import resume_run, start_run
    from trot.runs import raise_budget

    if resume is None:
        cfg = dataclasses.replace(cfg, device=device, nproc=comm.world_size)
        trainer, run_dir = start_run(cfg, comm, actors)
        return trainer, run_dir, f"run directory: {run_dir}"
    run_dir = Path(resume.resume)
    trainer = resume_run(run_dir, comm, device, actors)
    trainer.cfg = raise_budget(run_dir, trainer.cfg, trainer.env_steps, trainer.wall_s,
                               resume.max_env_steps, resume.minutes, write=comm.is_main)
    return trainer, run_dir, f"resuming {run_dir} at iteration {trainer.iteration}"


def _act(cfg, world) -> int:
    """An actor rank of `trot train TASK --actors K` (agents/actors.py)."""
    from trot.agents.actors import run_actor
    from trot.agents.central import run_central_actor
    from trot.agents.distributed import DistributedError, shutdown

    try:
        (run_central_actor if cfg.central_inference else run_actor)(cfg, world)
    except (DistributedError, RuntimeError) as e:  # gloo's own errors are RuntimeErrors
        return fail(f"actor rank {world.rank}: the learner is gone or failed: {e}")
    shutdown()
    return 0


def _train_a3c(cfg, resume: ResumeArgs | None) -> int:
    """`trot train TASK --algo a3c`: worker processes on shared parameters (agents/a3c.py)."""
    from trot.agents.a3c import A3C, WorkerDied, resume_a3c, worker_count
    from trot.agents.checkpoint import CheckpointError
    from trot.runs import new_run_dir, write_config

    try:
        if resume:
            run_dir = Path(resume.resume)
            run = resume_a3c(run_dir, resume.max_env_steps, resume.minutes)
            msg = f"resuming {run_dir} at update {run.iteration}"
        else:
            run_dir, run = new_run_dir(cfg), A3C(cfg)
            write_config(run_dir, cfg)
            msg = f"run directory: {run_dir}"
    except (ValueError, TypeError, KeyError, CheckpointError) as e:
        return fail(str(e))
    print(f"{msg} (a3c, {worker_count(run.cfg)} workers)", flush=True)
    try:
        run.train(run_dir)
    except WorkerDied as e:
        return fail(str(e))
    if run.cfg.export:
        _export_after_training(run_dir)
    print(run_dir)
    return 0


def _train_seeds(cfg, resume: ResumeArgs | None) -> int:
    """`trot train TASK --seeds S1 S2 ...`: the seeds as one program (agents/seeds.py)."""
    from trot.agents.checkpoint import CheckpointError
    from trot.agents.seeds import resume_seeds, seed_dir, start_seeds
    from trot.runs import raise_budget

    try:
        if resume:
            run_dir = Path(resume.resume)
            run = resume_seeds(run_dir)
            run.cfg = raise_budget(run_dir, run.cfg, run.env_steps, run.wall_s,
                                   resume.max_env_steps, resume.minutes)
            for tr in run.trainers:  # each seed's config.json keeps the budget too
                tr.cfg = raise_budget(seed_dir(run_dir, tr.cfg.seed), tr.cfg, run.env_steps,
                                      run.wall_s, resume.max_env_steps, resume.minutes)
            msg = f"resuming {run_dir} at iteration {run.iteration}"
        else:
            run, run_dir = start_seeds(cfg)
            msg = f"run directory: {run_dir}"
    except (ValueError, TypeError, KeyError, CheckpointError) as e:
        return fail(str(e))
    print(f"{msg} (seeds {', '.join(map(str, run.cfg.seeds))}, trained together)",
          flush=True)
    run.train(run_dir)
    if run.cfg.export:
        for s in run.cfg.seeds:
            _export_after_training(seed_dir(run_dir, s))
    print(run_dir)
    return 0


def _export_after_training(run_dir: Path) -> None:
    """Export, or say why not: the run is complete either way (its checkpoint is written)."""
    from trot.export.onnx import ExportError, export_run

    try:
        export_run(run_dir)
    except ExportError as e:
        print(f"trot: not exported: {e}; then run: trot export {run_dir}", file=sys.stderr)
