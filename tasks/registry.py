"""One registry: a task name maps to its class, its default config and its tuned agent
settings. Variants are further `register` calls with `dataclasses.replace(base, ...)`."""

from __future__ import annotations

from dataclasses import dataclass, is_dataclass
from typing import Any

import mujoco
import torch

from trot.sim import make_sim
from trot.tasks.base import Task, TaskConfig
from trot.tasks.env import Env


@dataclass(frozen=True)
class TaskEntry:
    name: str
    task_cls: type[Task]
    config: TaskConfig
    description: str
    agent: Any = None
    """tuned agent defaults for this task (a trot.agents config), or None for the global ones"""


_REGISTRY: dict[str, TaskEntry] = {}


def register(name: str, task_cls: type[Task], config: TaskConfig, description: str,
             agent: Any = None) -> TaskEntry:
    if name in _REGISTRY:
        raise ValueError(f"task {name!r} is already registered")
    if not (is_dataclass(config) and isinstance(config, TaskConfig)):
        raise TypeError(f"config for {name!r} must be a TaskConfig dataclass instance")
    entry = TaskEntry(name, task_cls, config, description, agent)
    _REGISTRY[name] = entry
    return entry


def task_names() -> list[str]:
    return sorted(_REGISTRY)


def get_task(name: str) -> TaskEntry:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown task {name!r}; available tasks: {', '.join(task_names())}"
        ) from None


def compile_model(task: Task) -> mujoco.MjModel:
    return task.build().compile()


def make_env(task: str, num_envs: int = 1024, sim: str = "cpu",
             device: str | torch.device = "cpu", seed: int = 0,
             config: TaskConfig | None = None) -> Env:
    """Build N envs of a registered task. `config` replaces the task's default config."""
    entry = get_task(task)
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs <= 0:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    cfg = entry.config if config is None else config
    if type(cfg) is not type(entry.config):
        raise TypeError(f"config for {task!r} must be a {type(entry.config).__name__}, "
                        f"got {type(cfg).__name__}")
    cfg.validate()
    t = entry.task_cls(cfg)
    model = compile_model(t)
    s = make_sim(sim, model, num_envs, cfg.substeps, device, fields=t.data_fields)
    return Env(task, t, s, seed)

