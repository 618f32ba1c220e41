"""Physics throughput, three ways on the same model and N, in one run (same noise).

    python benchmarks/sim_throughput.py -- cartpole-balance --num-envs 1024
    python benchmarks/sim_throughput.py --compare go1-flat --seconds 20 --chunk 10 \
        -- go1-rough --num-envs 1024

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance`, 1024 envs): the task, `--num-envs` and `--env.FIELD V`. The physics is
MuJoCo C on the host (the cpu sim) whatever `--sim` says.

raw:  `mujoco.rollout` with all threads, `--chunk` x substeps steps per call, from the env
      loop's current states (the ceiling)
sim:  trot's `BatchedSim.step` alone, one call per control step
env:  trot's env loop with random actions: observation, reward, termination, resets
All three count physics steps (control steps x substeps); ratios are against raw.
`--compare OTHER` adds a fourth, OTHER's env loop at the same N, in the same rounds, and
prints the cost of TASK's env loop per env step against OTHER's (e.g. go1-rough against
go1-flat: the terrain's collisions, height scan and curriculum).

Method (default `--method interleaved`): the three run in turn, `--chunk` control steps
each, round after round for `--seconds`; each throughput comes from its median chunk time.
This VM's speed drifts by 10-30% over seconds, so short alternating chunks put all three in
the same machine state, and the median drops the rounds a host hiccup hit. The spread of
the per-round env/raw ratio is printed too. `--method best-of` is the earlier method: the
best of `--repeats` longer runs of each (it rewards whichever caught the fastest moment).
The sim-only chunks step their own env, so that the env loop runs undisturbed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Literal

import mujoco
import numpy as np
import torch

import trot
from trot.bench import (
    RawRollout,
    env_loop,
    env_seconds,
    full_physics_columns,
    random_actions,
    raw_rollout,
    sim_only,
    sim_seconds,
)
from trot.agents.train_config import TrainConfig
from trot.benchmark import main
from trot.tasks.env import Env


@dataclass(frozen=True)
class Settings:
    method: Literal["interleaved", "best-of"] = "interleaved"
    """interleaved chunks round after round, or the best of longer runs"""
    chunk: int = 50
    """interleaved: control steps a chunk"""
    seconds: float = 60.0
    """interleaved: time to run"""
    steps: int = 300
    """best-of: control steps a run"""
    repeats: int = 3
    """best-of: runs of each"""
    compare: str | None = None
    """interleaved: another task's env loop, in the same rounds"""


def interleaved(a: Settings, cfg: TrainConfig, env: Env) -> tuple[dict[str, float], np.ndarray]:
    """Median physics steps/s of raw, sim and env, and the per-round env/raw ratios."""
    sim_env = trot.make_env(cfg.task, num_envs=cfg.num_envs, seed=2, config=cfg.env)
    n, s, k = cfg.num_envs, env.sim.substeps, a.chunk
    raw = RawRollout(env.sim.model, n, k * s, env.sim.nthread)
    env.reset()
    actions = random_actions(env, seed=0)
    timers = {"raw": raw.seconds, "sim": lambda: sim_seconds(sim_env, k),
              "env": lambda: env_seconds(env, actions, k)}
    if a.compare:
        other = trot.make_env(a.compare, num_envs=n, seed=1)
        other.reset()
        other_actions = random_actions(other, seed=0)
        timers["other"] = lambda: env_seconds(other, other_actions, k)
    cols = full_physics_columns(env.sim.model)
    for timer in timers.values():  # warm-up
        timer()
    times: dict[str, list[float]] = {key: [] for key in timers}
    end = time.perf_counter() + a.seconds
    while time.perf_counter() < end or len(times["env"]) < 3:
        # the ceiling starts from the env loop's current states: same contacts (a robot
        # falling from qpos0 through empty air would make a flattering ceiling)
        raw.start_from(env.sim.state_dict()["state"].numpy()[:, cols])
        for key, timer in timers.items():
            times[key].append(timer())
    raw.close()
    steps = n * k * s
    rates = {key: steps / float(np.median(t)) for key, t in times.items()}
    if a.compare:  # env steps, not physics steps: the two may differ in substeps
        rates["other"] = n * k / float(np.median(times["other"]))
        rates["env_steps"] = n * k / float(np.median(times["env"]))
        cost = np.array(times["env"]) / np.array(times["other"])
        rates["cost"], rates["cost_q"] = float(np.median(cost)), np.percentile(cost, [25, 75])
    return rates, np.array(times["raw"]) / np.array(times["env"])


def best_of(a: Settings, cfg: TrainConfig, env: Env) -> dict[str, float]:
    n, s = cfg.num_envs, env.sim.substeps
    best = {"raw": 0.0, "sim": 0.0, "env": 0.0}
    for r in range(a.repeats):
        best["raw"] = max(best["raw"], raw_rollout(env.sim.model, n, a.steps * s,
                                                   env.sim.nthread))
        best["sim"] = max(best["sim"], sim_only(env, a.steps))
        best["env"] = max(best["env"], env_loop(env, a.steps, r))
    return best


def run(a: Settings, cfg: TrainConfig) -> None:
    if a.compare and a.method != "interleaved":
        raise SystemExit("--compare needs --method interleaved (both loops in the same rounds)")
    torch.set_num_threads(1)  # physics gets the cores; the torch work here is small
    env = trot.make_env(cfg.task, num_envs=cfg.num_envs, seed=1, config=cfg.env)  # measured
    substeps, nthread = env.sim.substeps, env.sim.nthread
    if a.method == "interleaved":
        rates, ratios = interleaved(a, cfg, env)
        q25, q75 = np.percentile(ratios, [25, 75])
        how = (f"interleaved: {len(ratios)} rounds of {a.chunk} control steps, median chunk "
               f"times; env/raw per round: median {np.median(ratios):.2f}, "
               f"quartiles {q25:.2f}-{q75:.2f}")
    else:
        rates = best_of(a, cfg, env)
        how = f"best of {a.repeats} runs of {a.steps} control steps"
    print(f"task={cfg.task} N={cfg.num_envs} substeps={substeps} threads={nthread} "
          f"cpus={os.cpu_count()} mujoco={mujoco.__version__} torch={torch.__version__}")
    print(how)
    print(f"{'measured':<28}{'physics steps/s':>18}{'vs raw':>9}")
    for name, key in (("raw mujoco.rollout", "raw"), ("trot BatchedSim.step", "sim"),
                      ("trot env loop (random)", "env")):
        print(f"{name:<28}{rates[key]:>18,.0f}{rates[key] / rates['raw']:>9.2f}")
    if a.compare and a.method == "interleaved":
        q = rates["cost_q"]
        print(f"env steps/s: {cfg.task} {rates['env_steps']:,.0f}, {a.compare} "
              f"{rates['other']:,.0f}; cost per env step {cfg.task} / {a.compare}: median "
              f"{rates['cost']:.2f} over the rounds, quartiles {q[0]:.2f}-{q[1]:.2f}")


if __name__ == "__main__":
    main(Settings, run, ("cartpole-balance",))
