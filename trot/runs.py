"""A run directory read back: its config and last checkpoint, with a fresh env of its task.
Evaluation, export and play all start here, so it lives with the run layout, in none of
them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from trot.agents.checkpoint import load_checkpoint
from trot.agents.networks import ActorCritic
from trot.agents.trainer import CHECKPOINT
from trot.config import TrainConfig, load_json
from trot.tasks.env import Env
from trot.tasks.registry import get_task, make_env


@dataclass
class LoadedRun:
    cfg: TrainConfig
    state: dict
    env: Env
    ac: ActorCritic


def load_run(run_dir: Path, num_envs: int, seed: int = 12345, device: str = "cpu",
             sim: str | None = None, course: bool = False) -> LoadedRun:
    """A run's config and checkpoint, with a fresh noise-free env of num_envs.
    sim: the physics backend of that env (default: the run's own, `cfg.sim`); course: on
    the task's fixed terrain course (`course_changes`)."""
    state = load_checkpoint(Path(run_dir) / CHECKPOINT, map_location=device)
    cfg = load_json(Path(run_dir) / "config.json")
    task_cfg = cfg.env if cfg.env is not None else get_task(cfg.task).config
    changes = course_changes(cfg.task, task_cfg) if course else {}
    env = make_env(cfg.task, num_envs, cfg.sim if sim is None else sim, device, seed,
                   dataclasses.replace(task_cfg, obs_noise=False, **changes))
    ac = ActorCritic(env.obs_dim, env.critic_obs_dim, env.action_dim, cfg.agent_effective)
    ac.load_state_dict(state["model"])
    return LoadedRun(cfg, state, env, ac.to(device).eval())


def course_changes(task: str, config) -> dict:
    """The task config change that puts a terrain task on its fixed evaluation course
    (`--course` of trot eval and sim2sim); a ValueError for a task without one."""
    if "terrain" not in {f.name for f in dataclasses.fields(config)}:
        raise ValueError(f"--course: task {task!r} has no terrain course (its config has no "
                         "`terrain` field; the rough-terrain tasks, e.g. go1-rough, do)")
    return {"terrain": "course"}
