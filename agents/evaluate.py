"""Deterministic-policy evaluation: K envs each play exactly one episode (no bias toward
short episodes), with observation noise off. `evaluate_policy` is the one evaluation of a
policy during training: `trot train --eval-every` (agents/periodic_eval.py) and
benchmarks/locomotion_cpu.py both call it."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from trot.agents.networks import Acting, Actor
from trot.agents.runs import load_run
from trot.tasks.base import TaskConfig
from trot.tasks.env import Env
from trot.tasks.registry import make_env

EVAL_SEED = 12345  # `trot eval`'s default seed: its starts and commands


@torch.no_grad()
def run_episodes(env: Env, policy: Actor | Callable[[Tensor], Tensor],
                 episodes: int) -> dict[str, float]:
    """Play one episode in each of env.num_envs (== episodes) envs with the actor's
    deterministic action (its memory carried along) or `policy(obs) -> a`. Per-step task
    metrics (`Task.eval_metrics`) are averaged over each episode and over its second half."""
    n, dev = env.num_envs, env.device
    act = Acting(policy, n, dev) if isinstance(policy, Actor) else policy
    obs = env.reset()
    ret = torch.zeros(n, device=dev)
    length = torch.zeros(n, device=dev)
    active = torch.ones(n, dtype=torch.bool, device=dev)
    term = torch.zeros(n, dtype=torch.bool, device=dev)
    traces: dict[str, list[Tensor]] = {}
    final: dict[str, Tensor] = {}  # Task.episode_outcomes at each env's last step
    env.record_eval_metrics = True  # read before the step's resets, not after
    for _ in range(env.max_episode_steps):
        res = env.step(act(obs.policy).clamp(-1.0, 1.0))
        if isinstance(act, Acting):
            act.ended(res.terminated | res.truncated)
        ret += res.reward * active
        length += active.float()
        for k, v in env.eval_step.items():
            traces.setdefault(k, []).append(torch.where(active, v.float(), torch.nan))
        term |= res.terminated & active
        ended = active & (res.terminated | res.truncated)
        for k, v in env.eval_outcomes.items():
            final[k] = torch.where(ended, v.float(), final.get(k, torch.full_like(ret, torch.nan)))
        active &= ~ended
        obs = res.obs
    out = {"mean_return": ret.mean().item(), "std_return": ret.std(unbiased=False).item(),
           "episodes": float(episodes), "mean_length": length.mean().item(),
           "terminated_rate": term.float().mean().item()}
    steps = torch.arange(env.max_episode_steps, device=dev)[:, None]  # [T, 1]
    second_half = steps >= (length.long() // 2)[None]  # [T, N] steps L//2 .. L-1 of each
    for k, seq in traces.items():
        x = torch.stack(seq)  # [T, N], NaN after each env's episode ended
        out[k] = _mean_over_envs(_nanmean_per_env(x))
        out[f"{k}_second_half"] = _mean_over_envs(_nanmean_per_env(
            torch.where(second_half[:len(x)], x, torch.nan)))
    for k, v in final.items():  # NaN where the outcome does not apply to an env
        out[k] = v.nanmean().item() if bool((~v.isnan()).any()) else None
    return out | env.task.summarize(out)


def evaluate_policy(task: str, config: TaskConfig, policy: Actor | Callable[[Tensor], Tensor],
                    episodes: int, seed: int = EVAL_SEED) -> tuple[dict[str, float | None], Env]:
    """run_episodes on `episodes` fresh envs of `task` with `config` and noise off, on the cpu
    backend (MuJoCo C) whatever the run trains on, seeded with `seed` so that every
    evaluation of a run sees the same starts and commands; returns it and the env."""
    if isinstance(policy, torch.nn.Module) and any(
            p.device.type != "cpu" for p in policy.parameters()):  # trained on a GPU
        policy = copy.deepcopy(policy).cpu()
    env = make_env(task, episodes, seed=seed,
                   config=dataclasses.replace(config, obs_noise=False))
    return run_episodes(env, policy, episodes), env


def _nanmean_per_env(x: Tensor) -> Tensor:
    """[T, N] -> [N]: each env's mean over its defined (non-NaN) steps; NaN where a metric
    was never defined in its episode (e.g. a gait event that never happened)."""
    valid = ~x.isnan()
    return torch.where(valid, x, 0.0).sum(0) / valid.sum(0)


def _mean_over_envs(x: Tensor) -> float | None:
    """The mean over the envs where the metric was defined; None where it never was."""
    return x.nanmean().item() if bool((~x.isnan()).any()) else None


def evaluate(run_dir: Path, episodes: int = 32, seed: int = 12345, device: str = "cpu",
             sim: str | None = None, course: bool = False) -> dict[str, float | None]:
    """sim: the physics backend to evaluate on (default: the run's own); course: on the
    task's fixed terrain course (runs.course_changes)."""
    if episodes <= 0:
        raise ValueError(f"episodes must be a positive integer, got {episodes}")
    run = load_run(run_dir, episodes, seed, device, sim, course)
    return eval_result(run_episodes(run.env, run.ac.actor, episodes), run.env,
                       run.checkpoint.counters.env_steps)


def eval_result(episodes: dict[str, float | None], env: Env,
                env_steps: int) -> dict[str, float | None]:
    """`trot eval`'s result from run_episodes' metrics on `env`: those, the env steps the
    policy trained on and the task's max return (None where unbounded). One place, so
    that a policy trained elsewhere (trot's rsl_rl and rl_games adapters) reports the
    same keys as a trot run."""
    out: dict[str, float | None] = dict(episodes)
    out["env_steps"] = float(env_steps)
    mr = env.task.max_return()
    out["max_return"] = mr if mr is None or math.isfinite(mr) else None
    return out
