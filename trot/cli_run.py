"""The commands on the registry and on run directories: `trot list`, `trot sim-bench`,
`trot eval`, `trot export` and `trot sim2sim` (trot/cli.py dispatches to them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

import trot
from trot.agents.evaluate import evaluate
from trot.agents.runs import each_task
from trot.bench import env_loop, sim_only
from trot.cli_args import fail, parse_positional
from trot.export.onnx import ExportError, export_run
from trot.export.sim2sim import run_sim2sim
from trot.rslrl import export as rslrl_export
from trot.tasks.registry import get_task, task_names


@dataclass(frozen=True)
class SimBenchArgs:
    num_envs: int = 1024
    """parallel envs"""
    steps: int = 200
    """control steps per measurement"""


@dataclass(frozen=True)
class EvalArgs:
    episodes: int = 32
    """episodes, one per env, deterministic policy"""
    json: bool = False
    """print one JSON object instead of a table"""
    seed: int = 12345
    """seed for start states and commands"""
    sim: str | None = None
    """physics backend: cpu or mjx (default: the run's own; cpu evaluates an mjx run
    without JAX)"""
    course: bool = False
    """on the task's fixed terrain course (rough-terrain tasks): success per sub-terrain"""


def cmd_list(args: list[str]) -> int:
    if args:
        usage = "usage: trot list [--tasks FILE.py]: the registered tasks and where they live"
        if args[0] in ("-h", "--help"):
            print(usage)
            return 0
        return fail(f"trot list takes no arguments, got {' '.join(args)}; {usage}")

    for name in task_names():
        entry = get_task(name)
        where = "" if entry.source.kind == "trot" else f"  [{entry.source.describe()}]"
        print(f"{name:<24} {entry.description}{where}")
    return 0


def cmd_sim_bench(args: list[str]) -> int:
    task, a = parse_positional(SimBenchArgs, args, "trot sim-bench TASK")
    torch.set_num_threads(1)  # the cores belong to MuJoCo's threads
    env = trot.make_env(task, num_envs=a.num_envs)
    sim, loop = sim_only(env, a.steps), env_loop(env, a.steps)
    print(f"{task}: N={a.num_envs}, substeps={env.sim.substeps}, "
          f"threads={getattr(env.sim, 'nthread', '-')}")
    print(f"  physics only : {sim:>12,.0f} physics steps/s")
    print(f"  env loop     : {loop:>12,.0f} physics steps/s "
          f"({loop / env.sim.substeps:,.0f} env steps/s)")
    return 0


def cmd_eval(args: list[str]) -> int:
    run_dir, a = parse_positional(EvalArgs, args, "trot eval RUN_DIR")
    try:
        out = {name: evaluate(d, a.episodes, a.seed, sim=a.sim, course=a.course)
               for name, d in each_task(Path(run_dir))}
    except ValueError as e:  # CheckpointError is one
        return fail(str(e))
    _print_results(out, a.json)
    return 0


@dataclass(frozen=True)
class ExportArgs:
    out: str | None = None
    """directory for policy.onnx, policy.json and model.xml (default: the run directory)"""


@dataclass(frozen=True)
class Sim2SimArgs:
    episodes: int = 10
    """episodes in one plain MuJoCo simulation, played one after another"""
    json: bool = False
    """print one JSON object (same keys as `trot eval --json`)"""
    seed: int = 12345
    """seed for start states and commands"""
    trajectory: str | None = None
    """write qpos, qvel and actions per step to this .npz"""
    course: bool = False
    """on the task's fixed terrain course (rough-terrain tasks): success per sub-terrain"""


def cmd_export(args: list[str]) -> int:
    run_dir, a = parse_positional(ExportArgs, args, "trot export RUN_DIR")
    out = None if a.out is None else Path(a.out)
    try:
        if (Path(run_dir) / "rslrl.json").is_file():  # a `trot rsl-rl` run
            rslrl_export(Path(run_dir), out)
            return 0
        for name, d in each_task(Path(run_dir)):  # several tasks: one contract each
            export_run(d, out if out is None or name is None else out / d.name)
    except (ExportError, ValueError) as e:
        return fail(str(e))
    return 0


def cmd_sim2sim(args: list[str]) -> int:
    run_dir, a = parse_positional(Sim2SimArgs, args, "trot sim2sim RUN_DIR")
    traj = None if a.trajectory is None else Path(a.trajectory)
    runs = each_task(Path(run_dir))
    try:
        out = {name: run_sim2sim(d, a.episodes, a.seed, None if traj is None or name is None
                                 else traj.with_name(f"{traj.stem}_{name}{traj.suffix}"),
                                 a.course) for name, d in runs}
    except ValueError as e:
        return fail(str(e))
    _print_results(out, a.json)
    return 0


def _print_results(out: dict[str | None, dict], as_json: bool) -> None:
    """One run's result (key None) as it is; several tasks' under their names."""
    if list(out) == [None]:
        return _print_result(out[None], as_json)
    if as_json:
        print(json.dumps(out, sort_keys=True))
        return
    for name, result in out.items():
        print(f"task {name}")
        _print_result(result, False)


def _print_result(out: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(out, sort_keys=True))
    else:
        for k, v in out.items():
            shown = v if v is None else int(v) if float(v).is_integer() else f"{v:.4g}"
            print(f"{k:<28} {shown}")  # counts whole (env steps), measurements to 4 digits
