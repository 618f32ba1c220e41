"""The commands on the registry and on run directories: `trot list`, `trot sim-bench`,
`trot eval`, `trot export` and `trot sim2sim` (trot/cli.py dispatches to them)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import trot
from trot import rlgames, rslrl
from trot.agents.evaluate import eval_result, evaluate, run_episodes
from trot.agents.networks import Acting
from trot.agents.runs import course_changes, each_task, load_run
from trot.bench import env_loop, sim_only
from trot.cli_args import fail, parse_positional
from trot.export.onnx import ExportError, export_run
from trot.export.sim2sim import run_sim2sim
from trot.tasks.base import TaskConfig
from trot.tasks.env import Env
from trot.tasks.registry import get_task, make_env, task_names


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


@dataclass(frozen=True)
class AdapterPolicy:
    """A policy trained by another library through trot's adapters (`trot rsl-rl`,
    `trot rl-games`), as eval and play drive it: a memoryless actor obs [B, P] -> mean
    [B, A], the task and config it trained on, its env steps and its physics backend."""

    task: str
    config: TaskConfig
    actor: nn.Module
    env_steps: int
    sim: str

    def make_env(self, num_envs: int, seed: int, sim: str | None = None,
                 course: bool = False) -> Env:
        """A noise-free cpu env of the task (sim: default the run's own; course: on the
        task's fixed terrain course), as `load_run` makes one for a trot run."""
        changes = course_changes(self.task, self.config) if course else {}
        config = dataclasses.replace(self.config, obs_noise=False, **changes)
        return make_env(self.task, num_envs, sim or self.sim, "cpu", seed, config)

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor) -> torch.Tensor:  # as `Acting` acts
        return self.actor(obs).clamp(-1.0, 1.0)

    def ended(self, done: torch.Tensor) -> None:
        """Nothing to reset: the adapters train memoryless (MLP) actors."""


ADAPTER_RUNS = {rslrl.SETTINGS: ("rsl-rl", "rslrl", rslrl.load_policy),
                rlgames.SETTINGS: ("rl-games", "rlgames", rlgames.load_policy)}
"""the record each adapter writes into its run directory -> its command, the extra that
brings its library, and its policy loader"""


def adapter_policy(run_dir: Path) -> AdapterPolicy | None:
    """The policy of a `trot rsl-rl` or `trot rl-games` run directory; None for any other
    folder (a trot run, or no run: `load_run` says what is missing)."""
    for record, (command, extra, load) in ADAPTER_RUNS.items():
        path = Path(run_dir) / record
        if not path.is_file():
            continue
        try:
            with contextlib.redirect_stdout(sys.stderr):  # the libraries print as they load
                env, actor, config, steps = load(Path(run_dir), num_envs=1)
        except ImportError as e:
            raise ValueError(f"{run_dir} is a `trot {command}` run: reading it needs "
                             f"{e.name}: pip install 'trot[{extra}]'") from e
        sim = json.loads(path.read_text()).get("sim", "cpu")
        return AdapterPolicy(env.name, config, actor, steps, sim)
    return None


def acting_env(run_dir: Path, seed: int, sim: str | None = None,
               course: bool = False) -> tuple[Env, Acting | AdapterPolicy]:
    """One noise-free env of the run's task and the deterministic policy that plays it
    (`trot play`): a trot run's actor, its memory carried along, or a `trot rsl-rl` /
    `trot rl-games` run's."""
    adapter = adapter_policy(run_dir)
    if adapter is not None:
        return adapter.make_env(1, seed, sim, course), adapter
    run = load_run(run_dir, 1, seed, sim=sim, course=course)
    return run.env, Acting(run.ac.actor, 1, run.env.device)


def evaluate_any(run_dir: Path, a: EvalArgs) -> dict[str, float | None]:
    """`trot eval` of a trot run or an adapter's: the same episodes, seeds and metrics."""
    policy = adapter_policy(run_dir)
    if policy is None:
        return evaluate(run_dir, a.episodes, a.seed, sim=a.sim, course=a.course)
    if a.episodes <= 0:
        raise ValueError(f"episodes must be a positive integer, got {a.episodes}")
    env = policy.make_env(a.episodes, a.seed, a.sim, a.course)
    return eval_result(run_episodes(env, policy, a.episodes), env, policy.env_steps)


def cmd_eval(args: list[str]) -> int:
    run_dir, a = parse_positional(EvalArgs, args, "trot eval RUN_DIR")
    try:
        out = {name: evaluate_any(d, a) for name, d in each_task(Path(run_dir))}
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
        if (Path(run_dir) / rslrl.SETTINGS).is_file():  # a `trot rsl-rl` run
            rslrl.export(Path(run_dir), out)
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
