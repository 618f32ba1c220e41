"""Physics throughput, three ways on the same model and N, in one run (same noise).

    python benchmarks/sim_throughput.py --task cartpole-balance --num-envs 1024

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

import argparse
import os
import time

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
from trot.tasks.env import Env


def interleaved(a: argparse.Namespace, env: Env) -> tuple[dict[str, float], np.ndarray]:
    """Median physics steps/s of raw, sim and env, and the per-round env/raw ratios."""
    sim_env = trot.make_env(a.task, num_envs=a.num_envs, seed=2)
    n, s, k = a.num_envs, env.sim.substeps, a.chunk
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


def best_of(a: argparse.Namespace, env: Env) -> dict[str, float]:
    n, s = a.num_envs, env.sim.substeps
    best = {"raw": 0.0, "sim": 0.0, "env": 0.0}
    for r in range(a.repeats):
        best["raw"] = max(best["raw"], raw_rollout(env.sim.model, n, a.steps * s,
                                                   env.sim.nthread))
        best["sim"] = max(best["sim"], sim_only(env, a.steps))
        best["env"] = max(best["env"], env_loop(env, a.steps, r))
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="cartpole-balance")
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--method", choices=("interleaved", "best-of"), default="interleaved")
    p.add_argument("--chunk", type=int, default=50, help="interleaved: control steps a chunk")
    p.add_argument("--seconds", type=float, default=60.0, help="interleaved: time to run")
    p.add_argument("--steps", type=int, default=300, help="best-of: control steps a run")
    p.add_argument("--repeats", type=int, default=3, help="best-of: runs of each")
    p.add_argument("--compare", default=None,
                   help="interleaved: another task's env loop, in the same rounds")
    a = p.parse_args()
    if a.compare and a.method != "interleaved":
        p.error("--compare needs --method interleaved (both loops in the same rounds)")
    torch.set_num_threads(1)  # physics gets the cores; the torch work here is small
    env = trot.make_env(a.task, num_envs=a.num_envs, seed=1)  # the env loop measured
    substeps, nthread = env.sim.substeps, env.sim.nthread
    if a.method == "interleaved":
        rates, ratios = interleaved(a, env)
        q25, q75 = np.percentile(ratios, [25, 75])
        how = (f"interleaved: {len(ratios)} rounds of {a.chunk} control steps, median chunk "
               f"times; env/raw per round: median {np.median(ratios):.2f}, "
               f"quartiles {q25:.2f}-{q75:.2f}")
    else:
        rates = best_of(a, env)
        how = f"best of {a.repeats} runs of {a.steps} control steps"
    print(f"task={a.task} N={a.num_envs} substeps={substeps} threads={nthread} "
          f"cpus={os.cpu_count()} mujoco={mujoco.__version__} torch={torch.__version__}")
    print(how)
    print(f"{'measured':<28}{'physics steps/s':>18}{'vs raw':>9}")
    for name, key in (("raw mujoco.rollout", "raw"), ("trot BatchedSim.step", "sim"),
                      ("trot env loop (random)", "env")):
        print(f"{name:<28}{rates[key]:>18,.0f}{rates[key] / rates['raw']:>9.2f}")
    if a.compare and a.method == "interleaved":
        q = rates["cost_q"]
        print(f"env steps/s: {a.task} {rates['env_steps']:,.0f}, {a.compare} "
              f"{rates['other']:,.0f}; cost per env step {a.task} / {a.compare}: median "
              f"{rates['cost']:.2f} over the rounds, quartiles {q[0]:.2f}-{q[1]:.2f}")


if __name__ == "__main__":
    main()
