"""Stale actors: does the learner survive acting with parameters K updates old?

    python benchmarks/stale_actors.py --updates 500 --seeds 6 --workers 2 \
        --lags 0 4 16 32 64 --out-dir docs/data/stale_actors
    python benchmarks/stale_actors.py ... --resume   # skip the runs the CSVs hold
    python benchmarks/stale_actors.py --out-dir docs/data/stale_actors --table

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance --num-envs 16 --torch-threads 1 --update-threads 1 --agent.rollout-steps
16 --agent.desired-kl 0 --agent.learning-rate 1e-3`: one thread per worker process, since
the workers share the cores), and `--run-dir` (default: a temporary
folder, removed at the end; each run in LEARNER_lagK_seedS under it).

cartpole-balance, 16 envs, rollouts of 16 steps (256 samples per update), the task's
registered agent (32x32 ReLU, 2 epochs x 2 minibatches) with a fixed learning rate 1e-3
(`desired_kl=0`: the KL-adaptive rule measures KL against the *behaviour* policy, which
with lag is K updates away and would shrink the step to its floor, confounding the
comparison). `actor_lag` swept over `--lags` (the Sync mode's), learners:

- none:   GAE, loss -log pi * A (off_policy="ignore", clip=False): the lag is ignored;
- vtrace: V-trace critic targets and IMPALA's -log pi * rho * A (off_policy="vtrace",
          clip=False, rho_bar = c_bar = 1, lam = 0.95);
- clip:   GAE, PPO's clipped surrogate on pi/mu with the stored behaviour log-probs,
          ratio clipped to [0.8, 1.2] (off_policy="ratio", clip=True).

Each run trains `--updates` iterations through trot's one loop (agents/loop.py), which
hands this benchmark every update's training episode return; at the end its deterministic
policy (noise off) plays 16 fresh episodes.

Output: one row per (lag) in OUT_DIR/LEARNER_seedS.csv as each run ends: the training
return averaged over the last 20 updates, the deterministic policy's return over 16 fresh
episodes at the end, and whether each reached 475. The table: per learner and lag, the seeds
whose training return and whose deterministic policy reached 475. benchmarks/plots.py draws
docs/img/stale_actors.png (returns against the lag, median and range over seeds).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from contextlib import nullcontext
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
from trot.benchmark import Results, main
from trot.tasks.registry import get_task, make_env

LEARNERS = {
    "none": {"off_policy": "ignore", "clip": False},
    "vtrace": {"off_policy": "vtrace", "clip": False, "rho_bar": 1.0, "c_bar": 1.0, "lam": 0.95},
    "clip": {"off_policy": "ratio", "clip": True, "clip_low": 0.2, "clip_high": 0.2},
}
FULL = 475.0
LAST = 20


@dataclass(frozen=True)
class Settings:
    out_dir: str
    """the CSVs' folder"""
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
    resume: bool = False
    """skip the runs the CSVs hold"""
    table: bool = False
    """only print the CSVs' table"""


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


def run_one(job: tuple[TrainConfig, str, int]) -> tuple[str, int, dict]:
    """One learner, lag and seed (cfg's): its row."""
    cfg, learner, lag = job
    torch.set_num_threads(1)
    trainer, run_dir = start(cfg)
    curve = Curve(cfg)
    train(trainer, run_dir, quiet=True, evaluation=curve)
    last = float(np.nanmean(np.array(curve.returns[-LAST:], dtype=float)))
    return learner, cfg.seed, {
        "lag": lag, "updates": len(curve.returns), "last_return": round(last, 1),
        "eval_return": round(curve.eval_return, 1), "train_reached": int(last >= FULL),
        "eval_reached": int(curve.eval_return >= FULL)}


def jobs(s: Settings, cfg: TrainConfig, base: Path,
         found: dict[tuple[str, int], Results]) -> list[tuple[TrainConfig, str, int]]:
    """Every learner, lag and seed not in `found` as its own run of cfg, `s.updates`
    iterations long."""
    if not isinstance(cfg.mode, Sync):
        raise SystemExit("stale actors are the synchronous mode's actor_lag: give no other "
                         "mode after --")
    steps = s.updates * cfg.num_envs * cfg.agent.rollout_steps
    return [(dataclasses.replace(
        cfg, seed=seed, mode=dataclasses.replace(cfg.mode, actor_lag=lag),
        agent=dataclasses.replace(cfg.agent, **LEARNERS[ln]), max_env_steps=steps,
        minutes=0.0, export=False, run_dir=str(base / f"{ln}_lag{lag}_seed{seed}")), ln, lag)
        for seed in range(s.seeds) for lag in s.lags for ln in s.learners
        if not (ln, seed) in found or not found[(ln, seed)].find(lag=lag)]


def results(out_dir: Path) -> dict[tuple[str, int], Results]:
    """Every (learner, seed)'s rows in OUT_DIR."""
    return {(ln, int(seed)): Results(path, resume=True)
            for path in sorted(out_dir.glob("*_seed*.csv"))
            for ln, _, seed in [path.stem.partition("_seed")]}


def table(found: dict[tuple[str, int], Results]) -> str:
    """Per learner and lag: the seeds whose training return and deterministic policy
    reached 475, and the training returns per seed."""
    lines = [(f"{'learner':>8} {'lag':>4} {'train>=475':>11} {'eval>=475':>10}   "
             "last-20 training return per seed")]
    for ln in LEARNERS:
        rows = [r for (name, _), res in sorted(found.items()) if name == ln for r in res.rows]
        for lag in sorted({int(r["lag"]) for r in rows}):
            at = [r for r in rows if int(r["lag"]) == lag]
            lines.append(f"{ln:>8} {lag:>4} {sum(int(r['train_reached']) for r in at):>6}/"
                         f"{len(at):<4} {sum(int(r['eval_reached']) for r in at):>5}/"
                         f"{len(at):<4}   " + " ".join(f"{float(r['last_return']):5.0f}"
                                                      for r in at))
    return "\n".join(lines)


def run(s: Settings, cfg: TrainConfig) -> None:
    out_dir = Path(s.out_dir)
    found = results(out_dir)
    if not s.table:
        if any(r.rows for r in found.values()) and not s.resume:
            raise SystemExit(f"{out_dir} holds runs: give --resume to continue them")
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            todo = jobs(s, cfg, Path(cfg.run_dir or tmp), found)
            t0 = time.monotonic()
            with get_context("spawn").Pool(s.workers) if s.workers > 1 else nullcontext() as pool:
                done = pool.imap_unordered(run_one, todo, chunksize=1) if pool else map(
                    run_one, todo)  # one worker: in this process (no spawn, no pickling)
                for ln, seed, row in done:
                    found.setdefault((ln, seed), Results(out_dir / f"{ln}_seed{seed}.csv",
                                                         resume=True)).add(row)
                    print(f"{ln} lag {row['lag']} seed {seed}: last-20 return "
                          f"{row['last_return']}, eval {row['eval_return']}", flush=True)
        print(f"{len(todo)} runs of {s.updates} updates, {time.monotonic() - t0:.0f} s")
    print(table(results(out_dir)))


if __name__ == "__main__":
    main(Settings, run, ("cartpole-balance", "--num-envs", "16", "--torch-threads", "1",
                         "--update-threads", "1",
                         "--agent.rollout-steps", "16", "--agent.desired-kl", "0",
                         "--agent.learning-rate", "1e-3"))
