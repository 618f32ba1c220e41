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
             sim: str | None = None) -> LoadedRun:
    """A run's config and checkpoint, with a fresh noise-free env of num_envs.
    sim: the physics backend of that env (default: the run's own, `cfg.sim`)."""
    state = load_checkpoint(Path(run_dir) / CHECKPOINT, map_location=device)
    cfg = load_json(Path(run_dir) / "config.json")
    task_cfg = cfg.env if cfg.env is not None else get_task(cfg.task).config
    env = make_env(cfg.task, num_envs, cfg.sim if sim is None else sim, device, seed,
                   dataclasses.replace(task_cfg, obs_noise=False))
    ac = ActorCritic(env.obs_dim, env.critic_obs_dim, env.action_dim, cfg.agent_effective)
    ac.load_state_dict(state["model"])
    return LoadedRun(cfg, state, env, ac.to(device).eval())
