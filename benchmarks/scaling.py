"""Data-parallel scaling: training env-steps/s with 1, 2, ... processes under torchrun.

    python benchmarks/scaling.py --task cartpole-balance --procs 1 2 --num-envs 1024
    python benchmarks/scaling.py --task go1-flat --device cuda --sim mjx --procs 1 2 4 8 \\
        --num-envs 4096                                    # one process per GPU

Each process count trains the same task with the same per-process `--num-envs` (weak
scaling, DD-PPO style: more processes, more envs, the same per-process batch). On the CPU
each of K processes is pinned to 1/K of the cores (trot.agents.distributed.pin_cpus), so on
one machine the cores are split, not multiplied; on GPUs each process owns one GPU.
Throughput is read from the run's metrics.csv, after `--warmup` iterations. The table shows
each count's env-steps/s and its ratio to the 1-process run measured in the same invocation.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def run(task: str, procs: int, args: argparse.Namespace, root: Path) -> float:
    run_dir = root / f"p{procs}"
    steps = args.iterations * args.rollout_steps * args.num_envs * procs
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={procs}", "-m", "trot", "train", task,
           "--num-envs", str(args.num_envs), "--device", args.device, "--sim", args.sim,
           "--max-env-steps", str(steps), "--run-dir", str(run_dir), "--no-export",
           "--agent.rollout-steps", str(args.rollout_steps), "--log-every", "1000",
           "--checkpoint-every", "100000"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(run_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f)]
    a, b = rows[args.warmup - 1], rows[-1]
    return (float(b["env_steps"]) - float(a["env_steps"])) / (float(b["wall_s"])
                                                             - float(a["wall_s"]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="cartpole-balance")
    p.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    p.add_argument("--num-envs", type=int, default=1024, help="envs per process")
    p.add_argument("--device", default="cpu")
    p.add_argument("--sim", default="cpu")
    p.add_argument("--rollout-steps", type=int, default=16)
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    print(f"task={args.task} device={args.device} sim={args.sim} envs/process="
          f"{args.num_envs} cpus={os.cpu_count()} iterations={args.iterations}")
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.procs:
            sps = run(args.task, k, args, Path(tmp))
            base = base or sps
            print(f"processes={k:<3} env-steps/s={sps:>12,.0f}  ratio to {args.procs[0]}="
                  f"{sps / base:.2f}", flush=True)


if __name__ == "__main__":
    main()
