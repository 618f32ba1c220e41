"""Stale actors: does the learner survive acting with parameters K updates old?

    python benchmarks/stale_actors.py --updates 500 --seeds 6 --workers 2

cartpole-balance, 16 envs, rollouts of 16 steps (256 samples per update), the task's
registered agent (32x32 ReLU, 2 epochs x 2 minibatches) with a fixed learning rate 1e-3
(`desired_kl=0`: the KL-adaptive rule measures KL against the *behaviour* policy, which
with lag is K updates away and would shrink the step to its floor, confounding the
comparison). `TrainConfig.actor_lag` 0 vs 32, learners:

- none:   GAE, loss -log pi * A (off_policy="ignore", clip=False): the lag is ignored;
- vtrace: V-trace critic targets and IMPALA's -log pi * rho * A (off_policy="vtrace",
          clip=False, rho_bar = c_bar = 1, lam = 0.95);
- clip:   GAE, PPO's clipped surrogate on pi/mu with the stored behaviour log-probs,
          ratio clipped to [0.8, 1.2] (off_policy="ratio", clip=True).

Output: docs/img/stale_actors.png (mean training episode return vs update, band = min-max
over seeds; one panel per learner, solid lag 0, dashed lag 32) and a table: seeds whose
training return is >= 475 averaged over the last 20 updates, and seeds whose deterministic
policy (noise off) averages >= 475 over 16 fresh episodes at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

LEARNERS = {
    "none": dict(off_policy="ignore", clip=False),
    "vtrace": dict(off_policy="vtrace", clip=False, rho_bar=1.0, c_bar=1.0, lam=0.95),
    "clip": dict(off_policy="ratio", clip=True, clip_low=0.2, clip_high=0.2),
}
FULL = 475.0
LAST = 20


def run_one(args: tuple[str, int, int, int]) -> tuple[str, int, int, np.ndarray, float]:
    learner, lag, seed, updates = args
    torch.set_num_threads(1)
    from trot.agents.config import tuned
    from trot.agents.evaluate import run_episodes
    from trot.agents.learners import build
    from trot.agents.train_config import Sync, TrainConfig
    from trot.tasks.registry import get_task, make_env

    entry = get_task("cartpole-balance")
    agent = dataclasses.replace(tuned(entry.agent), rollout_steps=16, desired_kl=0.0,
                                learning_rate=1e-3, **LEARNERS[learner])
    cfg = TrainConfig(task="cartpole-balance", num_envs=16, seed=seed, agent=agent,
                      mode=Sync(actor_lag=lag), max_env_steps=10**12, torch_threads=1)
    tr = build(cfg)
    returns = np.full(updates, np.nan)
    for i in range(updates):
        m = tr.iterate()
        returns[i] = m.get("episode_return", np.nan)
    # carry the last seen value forward over updates in which no episode ended
    for i in range(1, updates):
        if np.isnan(returns[i]):
            returns[i] = returns[i - 1]
    env = make_env("cartpole-balance", 16, seed=10_000 + seed,
                   config=dataclasses.replace(entry.config, obs_noise=False))
    ev = run_episodes(env, tr.ac.actor, 16)["mean_return"]
    return learner, lag, seed, returns, ev


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--updates", type=int, default=500)
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--lags", type=int, nargs="+", default=[0, 32])
    p.add_argument("--learners", nargs="+", default=list(LEARNERS), choices=list(LEARNERS))
    p.add_argument("--workers", type=int, default=1, help="processes (one torch thread each)")
    p.add_argument("--out", default="docs/img/stale_actors.png")
    a = p.parse_args()

    jobs = [(ln, lag, s, a.updates) for ln in a.learners for lag in a.lags
            for s in range(a.seeds)]
    t0 = time.monotonic()
    if a.workers > 1:
        with get_context("spawn").Pool(a.workers) as pool:
            results = pool.map(run_one, jobs, chunksize=1)
    else:
        results = [run_one(j) for j in jobs]
    wall = time.monotonic() - t0

    curves: dict[tuple[str, int], list[np.ndarray]] = {}
    evals: dict[tuple[str, int], list[float]] = {}
    for ln, lag, _, ret, ev in results:
        curves.setdefault((ln, lag), []).append(ret)
        evals.setdefault((ln, lag), []).append(ev)

    print(f"\n{a.seeds} seeds x {a.updates} updates, {wall:.0f} s total")
    print(f"{'learner':>8} {'lag':>4} {'train>=475':>11} {'eval>=475':>10} "
          f"{'last-20 train return per seed':>32} {'eval return per seed':>24}")
    for (ln, lag), cs in curves.items():
        last = [float(np.nanmean(c[-LAST:])) for c in cs]
        ev = evals[(ln, lag)]
        print(f"{ln:>8} {lag:>4} {sum(x >= FULL for x in last):>6}/{len(cs):<4} "
              f"{sum(x >= FULL for x in ev):>5}/{len(ev):<4} "
              f"  {' '.join(f'{x:5.0f}' for x in last)}   {' '.join(f'{x:5.0f}' for x in ev)}")

    warnings.filterwarnings("ignore", r"(Mean of empty|All-NaN) slice")  # before 1st episode
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(a.learners), figsize=(4.2 * len(a.learners), 3.4),
                             sharey=True, squeeze=False)
    styles = {0: "-", 32: "--"}
    colors = {0: "tab:blue", 32: "tab:red"}
    for ax, ln in zip(axes[0], a.learners):
        for lag in a.lags:
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
    fig.suptitle(f"cartpole-balance, 16 envs x 16 steps, {a.seeds} seeds", fontsize=10)
    fig.tight_layout()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=120)
    print(f"figure: {a.out}")


if __name__ == "__main__":
    main()
