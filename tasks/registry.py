"""One registry: a task name maps to its class, its default config and its tuned agent
settings. Variants are further `register` calls with `dataclasses.replace(base, ...)`."""

from __future__ import annotations

from dataclasses import dataclass, is_dataclass
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mujoco
import torch

from trot.sim import make_sim, resolve_device
from trot.sim.rows import SimRows
from trot.tasks.base import Task, TaskConfig
from trot.tasks.env import Env
from trot.tasks.hosted import HostedEnv
from trot.tasks.multi import MultiEnv, split_envs
from trot.tasks.sources import (BUILTIN, HOW_TO_ADD, DuplicateTaskError, TaskSource,
                                current_source, load_plugins)


@dataclass(frozen=True)
class TaskEntry:
    name: str
    task_cls: Callable[[Any], Task]
    """config -> the task: a Task class, or a declaration (tasks/velocity.py `Velocity`)"""
    config: TaskConfig
    description: str
    agent: tuple[tuple[str, Any], ...] = ()
    """tuned agent settings for this task: (PPOConfig field, value) pairs over the defaults,
    as plain data (the agents read them: trot.agents.config.tuned)"""
    budget: int | None = None
    """env steps that reach the task's target in its benchmark: `trot train`'s default
    --max-env-steps (None: TrainConfig's)"""
    source: TaskSource = BUILTIN
    """where the task's code lives (recorded by runs and exports; tasks/sources.py)"""


_REGISTRY: dict[str, TaskEntry] = {}


def register(name: str, task_cls: Callable[[Any], Task], config: TaskConfig, description: str,
             agent: Mapping[str, Any] | tuple[tuple[str, Any], ...] | None = None,
             budget: int | None = None) -> TaskEntry:
    """agent: PPOConfig fields to override for this task, e.g. {"epochs": 2} (or another
    entry's `agent` pairs)."""
    source = current_source()
    if name in _REGISTRY:
        raise DuplicateTaskError(f"task {name!r} is registered twice: by "
                         f"{_REGISTRY[name].source.describe()} and by {source.describe()}")
    if not (is_dataclass(config) and isinstance(config, TaskConfig)):
        raise TypeError(f"config for {name!r} must be a TaskConfig dataclass instance")
    cls = type(config)
    if "__dataclass_fields__" not in vars(cls):  # defaults written in its body are ignored
        raise TypeError(f"config class {cls.__name__} (for {name!r}) subclasses "
                        f"{cls.__mro__[1].__name__} without @dataclass(frozen=True) of its own, "
                        "so the defaults written in its body are not fields and the parent's "
                        "values would be used; decorate it")
    if budget is not None and (not isinstance(budget, int) or budget <= 0):
        raise ValueError(f"budget for {name!r} must be a positive number of env steps, "
                         f"got {budget!r}")
    entry = TaskEntry(name, task_cls, config, description, tuple(dict(agent or {}).items()),
                      budget, source)
    _REGISTRY[name] = entry
    return entry


def task_names() -> list[str]:
    load_plugins()
    return sorted(_REGISTRY)


def is_registered(name: str) -> bool:
    load_plugins()
    return name in _REGISTRY


def get_task(name: str) -> TaskEntry:
    load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown task {name!r}; available tasks: {', '.join(task_names())}. To add "
            f"{HOW_TO_ADD}"
        ) from None


def compile_model(task: Task) -> mujoco.MjModel:
    return task.build().compile()


def make_env(task: str, num_envs: int = 1024, sim: str = "cpu",
             device: str | torch.device = "cpu", seed: int = 0,
             config: TaskConfig | None = None) -> Env | HostedEnv:
    """Build N envs of a registered task. `config` replaces the task's default config.
    sim="cpu" with a GPU `device` is Sebulba mode (tasks/hosted.py): MuJoCo C on the host,
    results on the GPU."""
    t, model, cfg = _task(task, num_envs, config)
    device = resolve_device(device)
    hosted = sim == "cpu" and device.type != "cpu"
    s = make_sim(sim, model, num_envs, cfg.substeps, "cpu" if hosted else device,
                 fields=t.data_fields)
    return HostedEnv(Env(task, t, s, seed), device) if hosted else Env(task, t, s, seed)


def make_task_envs(tasks: list[tuple[str, TaskConfig | None]], num_envs: int = 1024,
                   sim: str = "cpu", device: str | torch.device = "cpu", seed: int = 0,
                   shares: Sequence[float] = ()) -> Env | HostedEnv | MultiEnv:
    """`make_env` for one task; for several (TrainConfig.tasks: name and config, None for
    the registered one) their envs as one (tasks/multi.py), num_envs split between them
    by their shares (`split_envs`; empty: equal), task k's env seeded seed + k."""
    if len(tasks) == 1:
        return make_env(tasks[0][0], num_envs, sim, device, seed, tasks[0][1])
    sizes = split_envs(num_envs, shares or [1.0] * len(tasks))
    return MultiEnv([name for name, _ in tasks],
                    [make_env(name, n, sim, device, seed + k, config)
                     for k, ((name, config), n) in enumerate(zip(tasks, sizes))])


def make_block_envs(task: str, num_envs: int, sim: str, device: str | torch.device,
                    seeds: list[int], config: TaskConfig | None = None) -> list[Env]:
    """K envs of N envs each (K = len(seeds)), one per env seed, on consecutive blocks of
    rows of one sim of K x N envs (sim/rows.py): the physics steps every block at once
    (agents/seeds.py), each block's task and random streams are its own."""
    t, model, cfg = _task(task, num_envs, config)
    device = resolve_device(device)
    if sim == "cpu" and device.type != "cpu":
        raise ValueError("blocks of envs on one sim take the cpu sim on the cpu, or mjx; "
                         f"got sim {sim!r} on device {device} (Sebulba mode)")
    n = num_envs
    parent = make_sim(sim, model, len(seeds) * n, cfg.substeps, device, fields=t.data_fields)
    tasks = [t] + [get_task(task).task_cls(cfg) for _ in seeds[1:]]
    return [Env(task, tk, SimRows(parent, k * n, (k + 1) * n), seed)
            for k, (tk, seed) in enumerate(zip(tasks, seeds))]


def _task(task: str, num_envs: int, config: TaskConfig | None
          ) -> tuple[Task, mujoco.MjModel, TaskConfig]:
    """The task built from its config (`config`, or its default), its compiled model, and
    the config, checked."""
    entry = get_task(task)
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs <= 0:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    cfg = entry.config if config is None else config
    if type(cfg) is not type(entry.config):
        raise TypeError(f"config for {task!r} must be a {type(entry.config).__name__}, "
                        f"got {type(cfg).__name__}")
    cfg.validate()
    t = entry.task_cls(cfg)
    return t, compile_model(t), cfg
