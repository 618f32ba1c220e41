"""Physics throughput, three ways on the same model and N, in one run (same noise).

    python benchmarks/sim_throughput.py --task cartpole-balance --num-envs 1024

raw:  one long `mujoco.rollout` call with all threads (the ceiling)
sim:  trot's `BatchedSim.step` alone, one call per control step
env:  trot's env loop with random actions: observation, reward, termination, resets
All three count physics steps (control steps x substeps); ratios are against raw.
Measurements are interleaved and repeated; the best of each is reported.
"""

from __future__ import annotations

import argparse
import os

import mujoco
import torch

import trot
from trot.bench import env_loop, raw_rollout, sim_only


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="cartpole-balance")
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=300, help="control steps per measurement")
    p.add_argument("--repeats", type=int, default=3, help="best of this many, interleaved")
    a = p.parse_args()
    torch.set_num_threads(1)  # physics gets the cores; the torch work here is small
    env = trot.make_env(a.task, num_envs=a.num_envs)
    n, s = a.num_envs, env.sim.substeps
    best = {"raw": 0.0, "sim": 0.0, "env": 0.0}
    for r in range(a.repeats):
        best["raw"] = max(best["raw"], raw_rollout(env.sim.model, n, a.steps * s,
                                                   env.sim.nthread))
        best["sim"] = max(best["sim"], sim_only(env, a.steps))
        best["env"] = max(best["env"], env_loop(env, a.steps, r))
    print(f"task={a.task} N={n} substeps={s} threads={env.sim.nthread} cpus={os.cpu_count()} "
          f"mujoco={mujoco.__version__} torch={torch.__version__}")
    print(f"{'measured':<28}{'physics steps/s':>18}{'vs raw':>9}")
    for name, key in (("raw mujoco.rollout", "raw"), ("trot BatchedSim.step", "sim"),
                      ("trot env loop (random)", "env")):
        print(f"{name:<28}{best[key]:>18,.0f}{best[key] / best['raw']:>9.2f}")


if __name__ == "__main__":
    main()
