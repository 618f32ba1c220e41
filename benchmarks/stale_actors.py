"""Stale actors: does the learner survive acting with parameters K updates old?

    python benchmarks/stale_actors.py --updates 500 --seeds 6 --workers 2

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance --num-envs 16 --torch-threads 1 --agent.rollout-steps 16
--agent.desired-kl 0 --agent.learning-rate 1e-3`), and `--run-dir` (default: a temporary
folder, removed at the end; each run in LEARNER_lagK_seedS under it).

cartpole-balance, 16 envs, rollouts of 16 steps (256 samples per update), the task's
registered agent (32x32 ReLU, 2 epochs x 2 minibatches) with a fixed learning rate 1e-3
(`desired_kl=0`: the KL-adaptive rule measures KL against the *behaviour* policy, which
with lag is K updates away and would shrink the step to its floor, confounding the
comparison). `actor_lag` 0 vs 32 (the Sync mode's, `--lags`), learners:

- none:   GAE, loss -log pi * A (off_policy="ignore", clip=False): the lag is ignored;
- vtrace: V-trace critic targets and IMPALA's -log pi * rho * A (off_policy="vtrace",
          clip=False, rho_bar = c_bar = 1, lam = 0.95);
- clip:   GAE, PPO's clipped surrogate on pi/mu with the stored behaviour log-probs,
          ratio clipped to [0.8, 1.2] (off_policy="ratio", clip=True).

Each run trains `--updates` iterations through trot's one loop (agents/loop.py), which
hands this benchmark every update's training episode return; at the end its deterministic
policy (noise off) plays 16 fresh episodes.

Output: docs/img/stale_actors.png (mean training episode return vs update, band = min-max
over seeds; one panel per learner, solid lag 0, dashed lag 32) and a table: seeds whose
training return is >= 475 averaged over the last 20 updates, and seeds whose deterministic
policy (noise off) averages >= 475 over 16 fresh episodes at the end.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
import warnings
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from trot.agents.checkpoint import Counters
from trot.agents.evaluate import run_episodes
from trot.agents.learners import start
from trot.agents.loop import train
from trot.agents.modes import Sync
from trot.agents.train_config import TrainConfig
from trot.benchmark import main
from trot.tasks.registry import get_task, make_env

LEARNERS = {
    "none": dict(off_policy="ignore", clip=False),
    "vtrace": dict(off_policy="vtrace", clip=False, rho_bar=1.0, c_bar=1.0, lam=0.95),
    "clip": dict(off_policy="ratio", clip=True, clip_low=0.2, clip_high=0.2),
}
FULL = 475.0
LAST = 20


@dataclass(frozen=True)
class Settings:
    updates: int = 500
    """updates (training iterations) per run"""
    seeds: int = 6
    """seeds 0 .. N-1 of each learner and lag"""
    lags: tuple[int, ...] = (0, 32)
    """the actors' lags, in updates (trot train's --actor-lag)"""
    learners: tuple[Literal["none", "vtrace", "clip"], ...] = ("none", "vtrace", "clip")
    """the off-policy corrections compared"""
    workers: int = 1
    """processes (one torch thread each)"""
    out: str = "docs/img/stale_actors.png"
    """the figure"""


class Curve:
    """The loop's evaluation (agents/loop.py's `Evaluation`): it keeps each update's
    training episode return (NaN where no episode ended) and, at the budget, plays the
    deterministic policy's 16 fresh episodes."""

    checkpoints = False  # nothing resumes these runs

    def __init__(self, cfg: TrainConfig):
        self.cfg, self.returns, self.eval_return = cfg, [], np.nan

    def due(self, trainer, m: dict[str, float], at: Counters) -> bool:
        self.returns.append(m.get("episode_return", np.nan))
        return trainer.cfg.spent(at.env_steps, at.wall_s)

    def __call__(self, trainer, at: Counters) -> None:
        config = dataclasses.replace(self.cfg.env or get_task(self.cfg.task).config,
                                     obs_noise=False)
        env = make_env(self.cfg.task, 16, seed=10_000 + self.cfg.seed, config=config)
        self.eval_return = run_episodes(env, trainer.ac.actor, 16)["mean_return"]

    def done(self) -> bool:
        return False


def run_one(job: tuple[TrainConfig, str, int]) -> tuple[str, int, int, np.ndarray, float]:
    """One learner, lag and seed (cfg's): its returns per update and its final evaluation."""
    cfg, learner, lag = job
    torch.set_num_threads(1)
    trainer, run_dir = start(cfg)
    curve = Curve(cfg)
    train(trainer, run_dir, quiet=True, evaluation=curve)
    returns = np.array(curve.returns, dtype=float)
    # carry the last seen value forward over updates in which no episode ended
    for i in range(1, len(returns)):
        if np.isnan(returns[i]):
            returns[i] = returns[i - 1]
    return learner, lag, cfg.seed, returns, curve.eval_return


def jobs(s: Settings, cfg: TrainConfig, base: Path) -> list[tuple[TrainConfig, str, int]]:
    """Every learner, lag and seed as its own run of cfg, `s.updates` iterations long."""
    if not isinstance(cfg.mode, Sync):
        raise SystemExit("stale actors are the synchronous mode's actor_lag: give no other "
                         "mode after --")
    steps = s.updates * cfg.num_envs * cfg.agent.rollout_steps
    return [(dataclasses.replace(
        cfg, seed=seed, mode=dataclasses.replace(cfg.mode, actor_lag=lag),
        agent=dataclasses.replace(cfg.agent, **LEARNERS[ln]), max_env_steps=steps,
        minutes=0.0, export=False, run_dir=str(base / f"{ln}_lag{lag}_seed{seed}")), ln, lag)
        for ln in s.learners for lag in s.lags for seed in range(s.seeds)]


def run(s: Settings, cfg: TrainConfig) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        todo = jobs(s, cfg, Path(cfg.run_dir or tmp))
        t0 = time.monotonic()
        if s.workers > 1:
            with get_context("spawn").Pool(s.workers) as pool:
                results = pool.map(run_one, todo, chunksize=1)
        else:
            results = [run_one(j) for j in todo]
        wall = time.monotonic() - t0
    curves: dict[tuple[str, int], list[np.ndarray]] = {}
    evals: dict[tuple[str, int], list[float]] = {}
    for ln, lag, _, ret, ev in results:
        curves.setdefault((ln, lag), []).append(ret)
        evals.setdefault((ln, lag), []).append(ev)
    print(f"\n{s.seeds} seeds x {s.updates} updates, {wall:.0f} s total")
    print(f"{'learner':>8} {'lag':>4} {'train>=475':>11} {'eval>=475':>10} "
          f"{'last-20 train return per seed':>32} {'eval return per seed':>24}")
    for (ln, lag), cs in curves.items():
        last = [float(np.nanmean(c[-LAST:])) for c in cs]
        ev = evals[(ln, lag)]
        print(f"{ln:>8} {lag:>4} {sum(x >= FULL for x in last):>6}/{len(cs):<4} "
              f"{sum(x >= FULL for x in ev):>5}/{len(ev):<4} "
              f"  {' '.join(f'{x:5.0f}' for x in last)}   {' '.join(f'{x:5.0f}' for x in ev)}")
    figure(s, curves)


def figure(s: Settings, curves: dict[tuple[str, int], list[np.ndarray]]) -> None:
    """The training return per update of each learner and lag: mean and min-max band."""
    warnings.filterwarnings("ignore", r"(Mean of empty|All-NaN) slice")  # before 1st episode
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(s.learners), figsize=(4.2 * len(s.learners), 3.4),
                             sharey=True, squeeze=False)
    styles = {0: "-", 32: "--"}
    colors = {0: "tab:blue", 32: "tab:red"}
    for ax, ln in zip(axes[0], s.learners):
        for lag in s.lags:
            c = np.stack(curves[(ln, lag)])  # [seeds, updates]
            x = np.arange(1, c.shape[1] + 1)
            color = colors.get(lag, None)
            ax.plot(x, np.nanmean(c, 0), styles.get(lag, ":"), color=color,
                    label=f"lag {lag}")
            ax.fill_between(x, np.nanmin(c, 0), np.nanmax(c, 0), color=color, alpha=0.15,
                            lw=0)
        ax.axhline(FULL, color="gray", lw=0.6, ls=":")
        ax.set_title(ln)
        ax.set_xlabel("update")
        ax.legend(loc="upper left", fontsize=8)
    axes[0][0].set_ylabel("training episode return (mean, min-max band)")
    fig.suptitle(f"cartpole-balance, 16 envs x 16 steps, {s.seeds} seeds", fontsize=10)
    fig.tight_layout()
    Path(s.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(s.out, dpi=120)
    print(f"figure: {s.out}")


if __name__ == "__main__":
    main(Settings, run, ("cartpole-balance", "--num-envs", "16", "--torch-threads", "1",
                         "--agent.rollout-steps", "16", "--agent.desired-kl", "0",
                         "--agent.learning-rate", "1e-3"))
