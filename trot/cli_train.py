"""The training commands of the CLI (trot/cli.py dispatches to them):

    trot train TASK [--algo ppo|a2c|a3c|trpo] [--actors K] [--nproc K] [--agent.FIELD V] ...
    trot train TASK --seeds S1 S2 ... (several seeds in one process, agents/seeds.py)
    trot train TASK_A TASK_B ... [--env.TASK_A.FIELD V] (one policy, agents/multitask.py)
    trot train --resume RUN_DIR [--max-env-steps N] [--minutes M]
    trot distill TEACHER_RUN STUDENT_TASK [train flags] [--distill.FIELD V]
    trot distill --resume RUN_DIR (the same as trot train --resume RUN_DIR)

The flags are today's, flat; they become a TrainConfig whose `mode` is a type
(agents/train_config.py): several tasks, `--seeds`, `--algo a3c`, `--actors` or the
distill command choose the mode, and a flag of another mode is refused by name. Every mode
then runs the same way: agents/learners.py starts or resumes its learner, agents/loop.py
trains it to its budget and exports what it leaves. One process, torchrun's ranks
(--nproc, --actors: this same command in each), or A3C's spawned workers; each ends with
the run directory printed.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import os
import sys
import textwrap
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from trot.agents.a3c import worker_count
from trot.agents.actors import run_actor
from trot.agents.central import run_central_actor
from trot.agents.checkpoint import CheckpointError
from trot.agents.config import tuned
from trot.agents.distributed import ONE_PROCESS, DistributedError, init_from_env, shutdown
from trot.agents.learners import resume, start
from trot.agents.loop import Interrupted
from trot.agents.loop import train as train_loop
from trot.agents.runs import RESUMABLE, run_config
from trot.agents.modes import MODES, A3C, Actors, Distill, Seeds, Sync, Tasks, describe
from trot.agents.train_config import TrainConfig
from trot.cli_args import USAGE, fail
from trot.export.onnx import ExportError, export_run
from trot.tasks.registry import get_task


@dataclass(frozen=True)
class Again:
    """A run to continue: its directory and the settings it takes anew."""

    run_dir: Path
    changes: dict[str, Any]


def parse_resume(args: list[str], prog: str) -> tuple[TrainConfig, Again]:
    """`trot train --resume RUN [--FLAG V]`: the run's config and what changes. The flags
    are agents/runs.py's RESUMABLE settings, their defaults the run's own (a flag not given
    keeps it); the budgets are the run's totals, not increments."""
    at = next((i for i, a in enumerate(args) if a.split("=")[0] == "--resume"), None)
    if at is None or (args[at] == "--resume" and at + 1 >= len(args)):
        raise ValueError(f"usage: {prog} --resume RUN_DIR [--max-env-steps N] [--minutes M] "
                         "[--no-export] [--eval-every K] ...")
    run = Path(args[at].partition("=")[2] or args[at + 1])
    cfg = run_config(run)
    total = " [on a resume: the run's total, not an increment]"
    flags = [("resume", str, dataclasses.field(default=str(run)))] + [
        _flag(TrainConfig, f, total if f.name in ("max_env_steps", "minutes") else "")
        for f in dataclasses.fields(TrainConfig) if f.name in RESUMABLE]
    cls = dataclasses.make_dataclass("ResumeFlags", flags, frozen=True)
    cls.__doc__ = f"Continue the run in {run}: every flag not given keeps the run's own."
    parsed = tyro.cli(cls, args=args, prog=prog, default=cls(
        resume=str(run), **{k: getattr(cfg, k) for k in RESUMABLE}))
    return cfg, Again(run, {k: getattr(parsed, k) for k in RESUMABLE
                            if getattr(parsed, k) != getattr(cfg, k)})


def _named_resume(args: list[str]) -> list[str]:
    """`trot train NAME --resume RUN ...` is `trot train --resume RUN ...` where NAME is
    the run's task (or tasks); another NAME is refused with the spelling that works."""
    names = list(itertools.takewhile(lambda a: not a.startswith("-"), args))
    if not names or not any(a.split("=")[0] == "--resume" for a in args):
        return args
    rest = args[len(names):]
    cfg, again = parse_resume(rest, "trot train")
    tasks = [t for t, _ in cfg.tasks]
    if names != tasks:
        raise ValueError(f"{again.run_dir} is a run of {' '.join(tasks)}, not "
                         f"{' '.join(names)}: continue it with `trot train --resume "
                         f"{again.run_dir}` (the task comes from the run), or start a new run "
                         f"of {' '.join(names)} without --resume")
    return rest


# ---------------------------------------------------------------------- flags -> config
# fields of a mode that are not flags: the tasks and the teacher are positional arguments,
# each task's settings --env.TASK.*, distillation's settings --distill.* (trot distill)
NOT_FLAGS = ("with_tasks", "with_envs", "teacher", "distill")


def _docs(cls: type) -> dict[str, str]:
    """A dataclass's field docstrings (the string under each field), as tyro shows them."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body, out = tree.body[0].body, {}
    for a, b in zip(body, body[1:]):
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and \
                isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
            out[a.target.id] = inspect.cleandoc(b.value.value)
    return out


def _mode_flags() -> dict[str, list[type]]:
    """Each mode's own flags (field name -> the modes that have it)."""
    owners: dict[str, list[type]] = {}
    for m in MODES:
        for f in dataclasses.fields(m):
            if f.name not in NOT_FLAGS:
                owners.setdefault(f.name, []).append(m)
    return owners


def _flag(cls: type, f: dataclasses.Field, note: str = "") -> tuple[str, Any,
                                                                   dataclasses.Field]:
    """Field f of dataclass cls as a field of the flat flags dataclass: its type, its
    docstring as the help (with `note`), its default."""
    kind = typing.get_type_hints(cls)[f.name]
    default = dataclasses.field(default=f.default) if f.default_factory is dataclasses.MISSING \
        else dataclasses.field(default_factory=f.default_factory)
    return f.name, Annotated[kind, tyro.conf.arg(help=_docs(cls).get(f.name, "") + note)], \
        default


def _flag_fields() -> list[tuple[str, Any, dataclasses.Field]]:
    """The shared settings and the modes' own flags, as fields of the flat flags dataclass
    (defaults: TrainConfig's and the modes'; --seeds: none given)."""
    out = [_flag(TrainConfig, f) for f in dataclasses.fields(TrainConfig)
           if f.name not in ("env", "mode", "algo")]
    seen = set()
    for m in MODES:
        for f in dataclasses.fields(m):
            if f.name in NOT_FLAGS or f.name in seen:
                continue
            seen.add(f.name)
            name, kind, default = _flag(m, f, f" [{describe(m)}]")
            out.append((name, kind, dataclasses.field(default=()) if name == "seeds"
                        else default))
    return out


def _chosen_mode(names: list[str], given: set[str], algo: str, distill: bool) -> type:
    """The mode the command line asks for (Sync where nothing else is asked)."""
    asked = [m for m, on in ((Tasks, len(names) > 1), (Seeds, "seeds" in given),
                             (A3C, algo == "a3c"), (Actors, "actors" in given),
                             (Distill, distill)) if on]
    if len(asked) > 1:
        raise ValueError(" and ".join(describe(m) for m in asked) + " are different modes "
                         "of training; choose one")
    return asked[0] if asked else Sync


def _check_flags(mode: type, given: set[str]) -> None:
    """A flag of another mode names itself, its mode and this run's."""
    for name, owners in _mode_flags().items():
        if name in given and mode not in owners:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} is a setting of {' or '.join(map(describe, owners))}; "
                             f"this run is {describe(mode)}, which does not take it")


def parse_train(args: list[str], prog: str = "trot train",
                teacher: str | None = None) -> TrainConfig:
    """TrainConfig for `trot train TASK [TASK ...] ...`; each task's config class types its
    `--env.*` (several tasks: `--env.TASK.*`). teacher: `trot distill`'s teacher run
    (the mode is then Distill, with its `--distill.*` flags)."""
    names = list(itertools.takewhile(lambda a: not a.startswith("-"), args))
    if not names:
        raise ValueError(f"usage: {prog} TASK [TASK ...] [flags] (--help: every flag)")
    entries = [get_task(n) for n in names]
    given = {a.split("=")[0].lstrip("-").replace("-", "_") for a in args[len(names):]
             if a.startswith("--")}
    if {"seed", "seeds"} <= given:
        raise ValueError("give --seed S (one run) or --seeds S1 S2 ... (several, trained "
                         "together), not both")
    if given & {"task", "mode", "with_tasks", "with_envs"}:
        raise ValueError("give the tasks as the first arguments (trot train TASK_A TASK_B "
                         "...), not --task or --with-tasks; their settings as --env.FIELD "
                         "(several tasks: --env.TASK.FIELD)")
    env_cls, env_default = _env_field(entries)
    fields = _flag_fields() + [
        ("algo", Annotated[Literal["ppo", "a2c", "a3c", "trpo"], tyro.conf.arg(help=(
            "ppo; a2c (PPO with one epoch, one minibatch, no clipping and a fixed learning "
            "rate); a3c: `workers` processes apply A2C gradients to shared parameters "
            "without locks (agents/a3c.py); trpo: one natural-gradient step within a KL of "
            "agent.desired-kl per iteration (agents/trpo.py)"))],
         dataclasses.field(default="ppo")),
        ("env", env_cls, dataclasses.field(default_factory=lambda: env_default))]
    if teacher is not None:
        fields.append(("distill", Annotated[type(Distill().distill), tyro.conf.arg(
            help="DAgger's schedule and the student's regression")],
                       dataclasses.field(default_factory=type(Distill().distill))))
    cls = dataclasses.make_dataclass("TrainFlags", fields, frozen=True)
    cls.__doc__ = f"{prog.capitalize()} " + "; ".join(f"{e.name}: {e.description}"
                                                       for e in entries)
    budgets = [e.budget for e in entries]  # several tasks: the sum of their own
    budget = {} if None in budgets else {"max_env_steps": sum(budgets)}
    default = cls(task=names[0], agent=tuned(entries[0].agent), env=env_default, **budget)
    parsed = tyro.cli(cls, args=args[len(names):], default=default,
                      prog=f"{prog} {' '.join(names)}")
    return _config(parsed, names, given, teacher)


def _config(parsed: Any, names: list[str], given: set[str],
            teacher: str | None) -> TrainConfig:
    """The parsed flat flags as a TrainConfig of the mode they ask for."""
    mode_cls = _chosen_mode(names, given, parsed.algo, teacher is not None)
    _check_flags(mode_cls, given)
    own = {f.name for f in dataclasses.fields(mode_cls)} - set(NOT_FLAGS)
    mode_args = {n: getattr(parsed, n) for n in own}
    envs = [parsed.env] if len(names) == 1 else [getattr(parsed.env, _ident(n))
                                                  for n in names]
    if mode_cls is Tasks:
        mode_args |= {"with_tasks": tuple(names[1:]), "with_envs": tuple(envs[1:])}
    if mode_cls is Distill:
        mode_args |= {"teacher": str(Path(teacher).resolve()), "distill": parsed.distill}
    common = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(TrainConfig)
              if f.name not in ("mode", "env", "algo")}
    algo = "a2c" if parsed.algo == "a3c" else parsed.algo
    return TrainConfig(**common, algo=algo, env=envs[0], mode=mode_cls(**mode_args))


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


# ---------------------------------------------------------------------- commands
DISTILL_USAGE = ("usage: trot distill TEACHER_RUN STUDENT_TASK [--num-envs N] "
                 "[--max-env-steps N] [--minutes M] [--run-dir D] [--agent.FIELD V] "
                 "[--env.FIELD V] [--distill.FIELD V]\n       trot distill --resume RUN_DIR "
                 "[--max-env-steps N] [--minutes M]\n(trot distill TEACHER_RUN STUDENT_TASK "
                 "--help: every flag)")


def distill(args: list[str]) -> int:
    """`trot distill TEACHER_RUN STUDENT_TASK [train flags] [--distill.FIELD V]`: see
    agents/distill.py; `trot distill --resume RUN_DIR` is `trot train --resume RUN_DIR`."""
    if not args or args[0] in ("-h", "--help") or (len(args) < 2 and args[0][:8] !=
                                                    "--resume"):
        print(DISTILL_USAGE)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        if args[0].startswith("--resume"):
            cfg, again = parse_resume(args, "trot distill")
            if not isinstance(cfg.mode, Distill):
                raise ValueError(f"{again.run_dir} is not a `trot distill` run (its mode is "
                                 f"{describe(type(cfg.mode))}): continue it with `trot "
                                 f"train --resume {again.run_dir}`")
            return _run(cfg, again, args)
        cfg = parse_train(args[1:], f"trot distill {args[0]}", teacher=args[0])
    except (ValueError, TypeError, KeyError, CheckpointError) as e:
        return fail(str(e))
    return _run(cfg, None, args)


def train(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    try:
        args = _named_resume(args)
        if args[0].startswith("--resume"):
            return _run(*parse_resume(args, "trot train"), args)
        return _run(parse_train(args), None, args)
    except (ValueError, TypeError, KeyError, CheckpointError) as e:
        return fail(str(e))


def _run(cfg: TrainConfig, again: Again | None, args: list[str]) -> int:
    """The run of `cfg` (or the one `again` resumes) in this process, as one of torchrun's
    ranks (an actor rank acts), or launched under torchrun."""
    try:
        if cfg.processes > 1 and "WORLD_SIZE" not in os.environ:
            from trot.launch import launch_torchrun  # torch.distributed.run: start-up cost

            return launch_torchrun(cfg.processes, args)
        actors = isinstance(cfg.mode, Actors)
        comm, device = init_from_env("cpu" if actors else cfg.device, cfg.dist_timeout)
        world = None
        if actors:  # rank 0 learns alone; the others act (agents/actors.py)
            if comm.world_size != cfg.processes:
                raise ValueError(f"actors {cfg.mode.actors} needs {cfg.processes} processes "
                                 f"(a learner and the actors), this job has {comm.world_size}")
            if comm.rank > 0:
                return _act(cfg, comm)
            world, comm, device = comm, ONE_PROCESS, cfg.device
        learner, run_dir, wall_s, msg = _learner(cfg, again, comm, device, world)
    except (ValueError, TypeError, KeyError, CheckpointError) as e:
        return fail(str(e))
    if comm.is_main:
        print(msg + _summary(learner.cfg, comm), flush=True)
    # mjx compiles its step and reset once (several tasks: each its own, not shown)
    compile_s = getattr(getattr(getattr(learner, "env", None), "sim", None),
                        "compile_seconds", None)
    if compile_s is not None and comm.is_main:
        print(f"sim {learner.cfg.sim}: compiled in {compile_s:.1f} s", flush=True)
    try:
        train_loop(learner, run_dir, wall_s, export=_export_after_training)
    except (DistributedError, Interrupted) as e:  # a peer died or hangs, a worker died
        return fail(str(e))
    shutdown()
    if comm.is_main:
        print(run_dir)
    return 0


def _learner(cfg: TrainConfig, again: Again | None, comm, device: str, world):
    """(learner, run directory, training seconds so far, what to print): a new run, or
    the resumed one with the settings it takes anew."""
    if again is None:
        mode = dataclasses.replace(cfg.mode, nproc=comm.world_size) \
            if isinstance(cfg.mode, Sync) else cfg.mode
        learner, run_dir = start(dataclasses.replace(cfg, device=device, mode=mode), comm,
                                 world)
        return learner, run_dir, 0.0, f"run directory: {run_dir}"
    run_dir = again.run_dir
    learner, wall_s = resume(run_dir, comm, device, world, again.changes)
    return learner, run_dir, wall_s, f"resuming {run_dir} at iteration {learner.iteration}"


def _summary(cfg: TrainConfig, comm) -> str:
    """What the first line says of the mode."""
    mode = cfg.mode
    if isinstance(mode, Seeds):
        return f" (seeds {', '.join(map(str, mode.seeds))}, trained together)"
    if isinstance(mode, A3C):
        return f" (a3c, {worker_count(cfg)} workers)"
    return f" ({comm.world_size} processes)" if comm.distributed else ""


def _act(cfg: TrainConfig, world) -> int:
    """An actor rank of `trot train TASK --actors K` (agents/actors.py)."""
    try:
        (run_central_actor if cfg.mode.central_inference else run_actor)(cfg, world)
    except (DistributedError, RuntimeError) as e:  # gloo's own errors are RuntimeErrors
        return fail(f"actor rank {world.rank}: the learner is gone or failed: {e}")
    shutdown()
    return 0


def _export_after_training(run_dir: Path) -> None:
    """Export, or say why not: the run is complete either way (its checkpoint is written)."""
    try:
        export_run(run_dir)
    except ExportError as e:
        print(f"trot: not exported: {e}; then run: trot export {run_dir}", file=sys.stderr)
