"""Deterministic-policy evaluation: K envs each play exactly one episode (no bias toward
short episodes), with observation noise off."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from trot.agents.checkpoint import load_checkpoint
from trot.agents.networks import ActorCritic
from trot.agents.trainer import CHECKPOINT
from trot.config import TrainConfig, load_json
from trot.tasks.env import Env
from trot.tasks.registry import get_task, make_env


@torch.no_grad()
def run_episodes(env: Env, policy, episodes: int) -> dict[str, float]:
    """Play one episode in each of env.num_envs (== episodes) envs with `policy(obs) -> a`.
    Per-step task metrics (`Task.eval_metrics`) are averaged over each episode and over its
    second half."""
    n, dev = env.num_envs, env.device
    obs = env.reset()
    ret = torch.zeros(n, device=dev)
    length = torch.zeros(n, device=dev)
    active = torch.ones(n, dtype=torch.bool, device=dev)
    term = torch.zeros(n, dtype=torch.bool, device=dev)
    traces: dict[str, list[Tensor]] = {}
    env.record_eval_metrics = True  # read before the step's resets, not after
    for _ in range(env.max_episode_steps):
        res = env.step(policy(obs.policy).clamp(-1.0, 1.0))
        ret += res.reward * active
        length += active.float()
        for k, v in env.eval_step.items():
            traces.setdefault(k, []).append(torch.where(active, v.float(), torch.nan))
        term |= res.terminated & active
        active &= ~(res.terminated | res.truncated)
        obs = res.obs
    out = {"mean_return": ret.mean().item(), "std_return": ret.std(unbiased=False).item(),
           "episodes": float(episodes), "mean_length": length.mean().item(),
           "terminated_rate": term.float().mean().item()}
    for k, seq in traces.items():
        x = torch.stack(seq)  # [T, N], NaN after each env's episode ended
        out[k] = _nanmean_per_env(x).mean().item()
        halves = [_nanmean_per_env(_second_half(x[:, i])) for i in range(n)]
        out[f"{k}_second_half"] = torch.stack(halves).mean().item()
    return out | env.task.summarize(out)


def _nanmean_per_env(x: Tensor) -> Tensor:
    valid = ~x.isnan()
    return torch.where(valid, x, 0.0).sum(0) / valid.sum(0).clamp(min=1)


def _second_half(col: Tensor) -> Tensor:  # [T] -> [T - T/2] of the steps played
    played = col[~col.isnan()]
    return played[len(played) // 2:]


@dataclass
class LoadedRun:
    cfg: TrainConfig
    state: dict
    env: Env
    ac: ActorCritic


def load_run(run_dir: Path, num_envs: int, seed: int = 12345,
             device: str = "cpu") -> LoadedRun:
    """A run's config and checkpoint, with a fresh noise-free env of num_envs."""
    state = load_checkpoint(Path(run_dir) / CHECKPOINT, map_location=device)
    cfg = load_json(Path(run_dir) / "config.json")
    task_cfg = cfg.env if cfg.env is not None else get_task(cfg.task).config
    env = make_env(cfg.task, num_envs, cfg.sim, device, seed,
                   dataclasses.replace(task_cfg, obs_noise=False))
    ac = ActorCritic(env.obs_dim, env.critic_obs_dim, env.action_dim, cfg.agent_effective)
    ac.load_state_dict(state["model"])
    return LoadedRun(cfg, state, env, ac.to(device).eval())


def evaluate(run_dir: Path, episodes: int = 32, seed: int = 12345,
             device: str = "cpu") -> dict[str, float | None]:
    if episodes <= 0:
        raise ValueError(f"episodes must be a positive integer, got {episodes}")
    run = load_run(run_dir, episodes, seed, device)
    out: dict[str, float | None] = dict(run_episodes(run.env, run.ac.actor, episodes))
    out["env_steps"] = float(run.state["env_steps"])
    mr = run.env.task.max_return()
    out["max_return"] = mr if mr is None or math.isfinite(mr) else None
    return out
