"""Stragglers (Exercise 19.5): what lockstep stepping and per-rollout synchronization cost
against asynchronous collection, under the exercise's assumed step times and under trot's
own measured ones; and part (b), how many updates old an asynchronous actor's policy is.

    python benchmarks/stragglers.py --out-dir docs/data/stragglers
    python benchmarks/stragglers.py --out-dir docs/data/stragglers --resume
    python benchmarks/stragglers.py --out-dir docs/data/stragglers --table

(a) The exercise's model: a step takes a lognormal time (mean 1 ms, sigma 1), and 1 step in
200 also resets (+20 ms). N workers each collect rollouts of T steps; over R rollouts,
  asynchronous  no worker waits: time = (sum of all step times) / N
  lockstep      every step waits for the slowest worker: sum over steps of the max
  per-rollout   every rollout waits for the slowest worker's rollout
and efficiency = asynchronous time / the scheme's time, per seed of the generator.
(b) The same with trot's own step times: one env of each task (cartpole-balance, go1-flat)
on the cpu backend, `make_env(task, 1)`, stepped with random actions (around the home pose
for go1: action 0 is the home pose) and reset by the env itself when an episode ends, so
resets enter the times as they happen. Each `env.step` is timed (policy inference is not
included); the efficiencies resample those times (bootstrap, iid). The raw times land in
OUT_DIR/{cartpole,go1}_steps.csv with the load average of the machine in *_steps.json, and
a --resume reuses them. Rows: OUT_DIR/{model,cartpole,go1}_seedK.csv, one per N.
(c) Part (b) of the exercise: N actors of equal trajectory duration, each fetching the
learner's parameters when it starts a trajectory, the learner updating on every B
trajectories as they arrive. An event simulation of that queue gives each trajectory's
lag (the learner's version when it uses the trajectory minus the version that produced
it), against the closed form (N - 1) / B; also with lognormal (sigma 1) durations.
Rows: OUT_DIR/lag.csv. benchmarks/plots.py draws docs/img/stragglers.png.
"""

from __future__ import annotations

import csv
import heapq
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trot.benchmark import Results, main
from trot.core.files import atomic_write

CLAIM = {1: (1.00, 1.00), 8: (0.29, 0.81), 64: (0.10, 0.70), 512: (0.05, 0.62)}
"""the exercise's printed table: workers -> (lockstep, per-rollout) efficiency"""
TASKS = {"cartpole": ("cartpole-balance", 1.0), "go1": ("go1-flat", 0.5)}
"""source name -> (trot task, std of the random actions, clipped to [-1, 1])"""
SOURCES = ("model", *TASKS)
CHUNK = 1 << 22  # step times drawn at once, to bound memory at N = 512
Draw = Callable[[tuple[int, ...]], np.ndarray]


@dataclass(frozen=True)
class Settings:
    out_dir: str = "docs/data/stragglers"
    """the CSVs' folder"""
    workers: tuple[int, ...] = (1, 2, 4, 8, 16, 64, 256, 512)
    """the numbers of workers N"""
    rollout: int = 128
    """steps per rollout T"""
    rollouts: int = 200
    """rollouts R per worker count"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """the generator's seeds (the model's draws, the bootstrap's resampling)"""
    sigma: float = 1.0
    """the model's lognormal sigma (its mean is 1 ms)"""
    reset_every: int = 200
    """the model: 1 step in this many also resets"""
    reset_ms: float = 20.0
    """the model: what a reset adds (ms)"""
    steps: int = 4000
    """measured env steps per task (after --warmup)"""
    warmup: int = 100
    """env steps stepped first and not recorded"""
    actors: tuple[int, ...] = (1, 2, 8, 64, 512)
    """(c): the numbers of actors N"""
    batches: tuple[int, ...] = (1, 4, 16, 64)
    """(c): the learner's batch sizes B (trajectories)"""
    trajectories: int = 20000
    """(c): trajectories whose lag is recorded per (N, B), after a warm-up of 4N + 4B"""
    resume: bool = False
    """keep the CSVs' rows and the measured step times, and add what is missing"""
    table: bool = False
    """only print the tables from the CSVs"""


# ---------------------------------------------------------------------- (a) the schemes
def collection_times(t: np.ndarray) -> tuple[float, float, float]:
    """Step times t [R, T, N] -> the time to collect them asynchronously, in lockstep and
    synchronizing once per rollout. Asynchronous: in steady state each worker keeps
    stepping, so the rate is N / mean step time (the end-of-run wait is paid once)."""
    asynchronous = float(t.sum()) / t.shape[2]
    lockstep = float(t.max(axis=2).sum())  # [R, T]: each step waits for the slowest
    per_rollout = float(t.sum(axis=1).max(axis=1).sum())  # [R, N] -> [R]
    return asynchronous, lockstep, per_rollout


def efficiencies(draw: Draw, n: int, s: Settings) -> tuple[float, float]:
    """(lockstep, per-rollout) efficiency for N workers, drawn in chunks of rollouts."""
    per_chunk = max(1, CHUNK // (s.rollout * n))
    total = np.zeros(3)
    for start in range(0, s.rollouts, per_chunk):
        r = min(per_chunk, s.rollouts - start)
        total += collection_times(draw((r, s.rollout, n)))  # [r, T, N]
    return total[0] / total[1], total[0] / total[2]


def model_times(rng: np.random.Generator, s: Settings, shape: tuple[int, ...]
                ) -> tuple[np.ndarray, np.ndarray]:
    """The exercise's step times (ms), lognormal with mean 1 plus a reset now and then,
    and which steps reset."""
    t = rng.lognormal(-s.sigma ** 2 / 2, s.sigma, shape)  # E = exp(mu + sigma^2/2) = 1
    reset = rng.random(shape) < 1 / s.reset_every
    return t + s.reset_ms * reset, reset


def model_draw(rng: np.random.Generator, s: Settings) -> Draw:
    return lambda shape: model_times(rng, s, shape)[0]


def bootstrap_draw(rng: np.random.Generator, times: np.ndarray) -> Draw:
    """Measured step times resampled with replacement (iid: bursts of load are lost)."""
    return lambda shape: times[rng.integers(0, len(times), shape)]


# ---------------------------------------------------------------------- (b) trot's times
def measure(task: str, action_std: float, s: Settings, seed: int = 0) -> dict:
    """One env of `task` on the cpu backend stepped s.warmup + s.steps times with random
    actions: each step's wall time (ms) and whether it ended an episode (the env resets
    it inside that step)."""
    import torch

    from trot.tasks.registry import make_env

    torch.manual_seed(seed)
    env = make_env(task, num_envs=1, sim="cpu", seed=seed)
    env.reset()
    gen = torch.Generator().manual_seed(seed)
    load_before = os.getloadavg()
    ms, reset = np.zeros(s.warmup + s.steps), np.zeros(s.warmup + s.steps, bool)
    for i in range(len(ms)):
        action = (action_std * torch.randn(1, env.action_dim, generator=gen)).clamp(-1, 1)
        begin = time.perf_counter_ns()
        out = env.step(action)  # physics, task, reward, and the reset of an ended episode
        ms[i] = (time.perf_counter_ns() - begin) / 1e6
        reset[i] = bool((out.terminated | out.truncated).any())
    load = [round((a + b) / 2, 2) for a, b in zip(load_before, os.getloadavg())]
    return {"task": task, "ms": ms[s.warmup:], "reset": reset[s.warmup:],
            "loadavg_1_5_15": load, "cpus": os.cpu_count(), "steps": s.steps,
            "warmup": s.warmup, "action_std": action_std,
            "date": time.strftime("%Y-%m-%d %H:%M"), "host": os.uname().nodename}


def save_steps(m: dict, out_dir: Path, name: str) -> None:
    def write(path: Path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "ms", "reset"])
            w.writerows((i, f"{t:.4f}", int(r)) for i, (t, r) in enumerate(
                zip(m["ms"], m["reset"])))
    atomic_write(out_dir / f"{name}_steps.csv", write)
    meta = {k: v for k, v in m.items() if k not in ("ms", "reset")}
    atomic_write(out_dir / f"{name}_steps.json",
                 lambda p: p.write_text(json.dumps(meta, indent=1) + "\n"))


def load_steps(out_dir: Path, name: str) -> dict | None:
    path = out_dir / f"{name}_steps.csv"
    if not path.is_file():
        return None
    with open(path) as f:
        rows = list(csv.DictReader(f))
    meta = json.loads((out_dir / f"{name}_steps.json").read_text())
    return meta | {"ms": np.array([float(r["ms"]) for r in rows]),
                   "reset": np.array([r["reset"] == "1" for r in rows])}


def summary(ms: np.ndarray, reset: np.ndarray) -> dict[str, float]:
    """The step times' columns of a row: mean, median, p99 (ms), and what resets cost."""
    return {"mean_ms": round(float(ms.mean()), 4),
            "median_ms": round(float(np.median(ms)), 4),
            "p99_ms": round(float(np.percentile(ms, 99)), 4),
            "reset_frac": round(float(reset.mean()), 5),
            "reset_mean_ms": round(float(ms[reset].mean()), 4) if reset.any() else np.nan}


# ---------------------------------------------------------------------- (c) the lag
def simulate_lag(n: int, b: int, kept: int, rng: np.random.Generator,
                 sigma: float = 0.0) -> np.ndarray:
    """The asynchronous queue, event by event: N actors, trajectories of duration 1 (sigma
    > 0: lognormal with mean 1), started at random phases; the learner updates on every B
    arrivals, on its current parameters, and the actor that delivered fetches them after
    that update. Returns the lag [kept] of each trajectory after a warm-up of 4N + 4B."""
    def duration() -> float:
        return 1.0 if sigma == 0 else float(rng.lognormal(-sigma ** 2 / 2, sigma))

    warm = 4 * n + 4 * b
    actors = [(float(rng.random()), a, 0) for a in range(n)]  # (arrival, actor, version)
    heapq.heapify(actors)
    version, batch, lags = 0, [], []
    while len(lags) < warm + kept:
        arrival, a, fetched = heapq.heappop(actors)
        batch.append(fetched)
        if len(batch) == b:  # the update uses the batch at the learner's current version
            lags += [version - v for v in batch]
            version, batch = version + 1, []
        heapq.heappush(actors, (arrival + duration(), a, version))
    return np.array(lags[warm:warm + kept])


def closed_form_lag(n: int, b: int) -> float:
    """Mean lag: trajectory k (in arrival order) was fetched after arrival k - N, and the
    update that uses it comes at the first multiple of B >= k; the updates in between
    are the multiples of B in (k - N, B ceil(k / B)), on average (N - 1) / B."""
    return (n - 1) / b


def lag_row(n: int, b: int, s: Settings, seed: int) -> dict:
    rng = np.random.default_rng((seed, n, b))
    equal, jitter = (simulate_lag(n, b, s.trajectories, rng, sig) for sig in (0.0, s.sigma))
    return {"actors": n, "batch": b, "closed_form": round(closed_form_lag(n, b), 4),
            "lag_mean": round(float(equal.mean()), 4), "lag_median": float(np.median(equal)),
            "lag_min": int(equal.min()), "lag_max": int(equal.max()),
            "jitter_mean": round(float(jitter.mean()), 4),
            "jitter_p90": float(np.percentile(jitter, 90))}


# ---------------------------------------------------------------------- the tables
def seed_rows(out_dir: Path) -> dict[str, list[Results]]:
    return {src: [Results(p, resume=True) for p in sorted(out_dir.glob(f"{src}_seed*.csv"))]
            for src in SOURCES}


def median_over_seeds(found: list[Results], n: int, column: str) -> float:
    vals = [r[column] for res in found for r in res.rows if r["workers"] == n]
    return statistics.median(vals) if vals else np.nan


def efficiency_table(out_dir: Path) -> str:
    found = seed_rows(out_dir)
    workers = sorted({int(r["workers"]) for v in found.values() for res in v
                      for r in res.rows})
    head = "claim  model  cartpole  go1"
    lines = [(f"efficiency against asynchronous collection, median over "
             f"{max(map(len, found.values()), default=0)} seeds"),
             f"  workers | lockstep: {head} | per rollout: {head}"]
    for n in workers:
        cells = []
        for k, col in enumerate(("lockstep", "per_rollout")):
            claim = f"{CLAIM[n][k]:5.2f}" if n in CLAIM else "    -"
            got = [median_over_seeds(found[src], n, col) for src in SOURCES]
            cells.append(f"{claim}  {got[0]:5.2f}  {got[1]:8.2f}  {got[2]:4.2f}")
        lines.append(f"  {n:7d} |           {cells[0]} |              {cells[1]}")
    spread = [max(vals) - min(vals) for v in found.values() for n in workers
              for col in ("lockstep", "per_rollout")
              if len(vals := [r[col] for res in v for r in res.rows if r["workers"] == n]) > 1]
    if spread:
        lines.append(f"  largest range over seeds of any cell: {max(spread):.3f}")
    return "\n".join(lines)


def steps_table(out_dir: Path) -> str:
    lines = [("step times (ms) of one env:  mean  median    p99    max  resets  "
             "reset step  load avg (1/5/15 min)")]
    for name in TASKS:
        m = load_steps(out_dir, name)
        if m is None:
            continue
        sm = summary(m["ms"], m["reset"])
        lines.append(f"  {m['task']:<25} {sm['mean_ms']:5.2f}  {sm['median_ms']:6.2f}  "
                     f"{sm['p99_ms']:5.2f}  {m['ms'].max():5.1f}  {sm['reset_frac']:6.4f}  "
                     f"{sm['reset_mean_ms']:10.2f}  {m['loadavg_1_5_15']} on "
                     f"{m['cpus']} cpus, {m['date']}")
    return "\n".join(lines)


def lag_table(out_dir: Path) -> str:
    res = Results(out_dir / "lag.csv", resume=True)
    lines = ["lag of a trajectory's policy (updates), N actors, batches of B trajectories",
             ("  actors  batch  (N-1)/B   simulated mean  median  min..max   "
             "lognormal durations: mean  p90")]
    for r in res.rows:
        lines.append(f"  {r['actors']:6d}  {r['batch']:5d}  {r['closed_form']:7.2f}   "
                     f"{r['lag_mean']:14.2f}  {r['lag_median']:6g}  "
                     f"{r['lag_min']:4d}..{r['lag_max']:<4d}  "
                     f"{r['jitter_mean']:24.2f}  {r['jitter_p90']:4g}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- the run
def write_claim(out_dir: Path) -> None:
    """The exercise's printed table as OUT_DIR/claim.csv, for the figure to draw beside."""
    def write(path: Path) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["workers", "lockstep", "per_rollout"])
            w.writerows((n, *c) for n, c in sorted(CLAIM.items()))
    atomic_write(out_dir / "claim.csv", write)


def measured(s: Settings, out_dir: Path) -> dict[str, dict]:
    """Each task's step times: those in OUT_DIR (--resume), else measured now."""
    got = {}
    for name, (task, std) in TASKS.items():
        m = load_steps(out_dir, name) if s.resume else None
        if m is None:
            m = measure(task, std, s)
            save_steps(m, out_dir, name)
            print(f"measured {task}: {len(m['ms'])} steps, load average "
                  f"{m['loadavg_1_5_15']} on {m['cpus']} cpus", flush=True)
        got[name] = m
    return got


def source_draw(s: Settings, steps: dict[str, dict], src: str, seed: int, n: int) -> Draw:
    """The step times of source `src` for N workers under `seed`: a generator of its own per
    (seed, source, N), so that a resumed run draws what a whole run would."""
    rng = np.random.default_rng((seed, SOURCES.index(src), n))
    return model_draw(rng, s) if src == "model" else bootstrap_draw(rng, steps[src]["ms"])


def source_columns(s: Settings, steps: dict[str, dict], src: str, seed: int) -> dict:
    """A source's step-time columns: the measured times', or the model's from its draws."""
    if src != "model":
        m = steps[src]
        return summary(m["ms"], m["reset"]) | {"load1": m["loadavg_1_5_15"][0]}
    rng = np.random.default_rng((seed, SOURCES.index(src), 0))  # not a row's generator
    return summary(*model_times(rng, s, (1 << 20,)))  # [2^20]


def run(s: Settings, cfg=None) -> None:
    """(a), (b) and (c) into OUT_DIR, then the tables; cfg (train args) is not used."""
    out_dir = Path(s.out_dir)
    if not s.table:
        if any(out_dir.glob("*.csv")) and not s.resume:
            raise SystemExit(f"{out_dir} holds results: give --resume to continue them")
        out_dir.mkdir(parents=True, exist_ok=True)
        write_claim(out_dir)
        steps = measured(s, out_dir)
        for seed in s.seeds:
            for src in SOURCES:
                res = Results(out_dir / f"{src}_seed{seed}.csv", resume=True)
                cols = source_columns(s, steps, src, seed)
                for n in s.workers:
                    if res.find(workers=n):
                        continue
                    lock, per = efficiencies(source_draw(s, steps, src, seed, n), n, s)
                    res.add({"workers": n, "lockstep": round(lock, 4),
                             "per_rollout": round(per, 4), "rollout": s.rollout} | cols)
        lag = Results(out_dir / "lag.csv", resume=True)
        for n in s.actors:
            for b in s.batches:
                if not lag.find(actors=n, batch=b):
                    lag.add(lag_row(n, b, s, seed=0))
    print(steps_table(out_dir), efficiency_table(out_dir), lag_table(out_dir), sep="\n\n")


if __name__ == "__main__":
    main(Settings, run)
