"""Data-parallel scaling: training env-steps/s with 1, 2, ... processes under torchrun.

    python benchmarks/scaling.py --procs 1 2 -- cartpole-balance --num-envs 1024 \
        --agent.rollout-steps 16
    python benchmarks/scaling.py --procs 1 2 4 8 -- go1-flat --device cuda --sim mjx \
        --num-envs 4096 --agent.rollout-steps 16          # one process per GPU

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance --num-envs 1024 --agent.rollout-steps 16`): the task, `--num-envs` (per
process), `--device`, `--sim`, `--agent.FIELD V`, `--env.FIELD V`. Each process count
trains that run with the same per-process envs (weak scaling, DD-PPO style: more
processes, more envs, the same per-process batch) for `--iterations` iterations; the
benchmark sets the step budget, the run directory, no export and rare logs and
checkpoints. On the CPU each of K processes is pinned to 1/K of the cores
(trot.agents.distributed.pin_cpus), so on one machine the cores are split, not multiplied;
on GPUs each process owns one GPU. Throughput is read from the run's metrics.csv, after
`--warmup` iterations. The table shows each count's env-steps/s and its ratio to the first
count's, measured in the same invocation.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trot.agents.train_config import TrainConfig
from trot.benchmark import given_train_args, main

TRAIN = ("cartpole-balance", "--num-envs", "1024", "--agent.rollout-steps", "16")


@dataclass(frozen=True)
class Settings:
    procs: tuple[int, ...] = (1, 2)
    """the process counts, in turn (the ratios are to the first)"""
    iterations: int = 40
    """training iterations per process count"""
    warmup: int = 5
    """iterations left out of the throughput (start-up, first compiles)"""


def throughput(s: Settings, cfg: TrainConfig, procs: int, root: Path) -> float:
    """Env-steps/s of the run in `procs` processes, after the warm-up iterations."""
    run_dir = root / f"p{procs}"
    steps = s.iterations * cfg.agent.rollout_steps * cfg.num_envs * procs
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={procs}", "-m", "trot", "train", *given_train_args(default=TRAIN),
           "--max-env-steps", str(steps), "--run-dir", str(run_dir), "--no-export",
           "--log-every", "1000", "--checkpoint-every", "100000"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    a, b = rows[s.warmup - 1], rows[-1]
    return (float(b["env_steps"]) - float(a["env_steps"])) / (float(b["wall_s"])
                                                             - float(a["wall_s"]))


def run(s: Settings, cfg: TrainConfig) -> None:
    print(f"task={cfg.task} device={cfg.device} sim={cfg.sim} envs/process={cfg.num_envs} "
          f"cpus={os.cpu_count()} iterations={s.iterations}")
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        for k in s.procs:
            sps = throughput(s, cfg, k, Path(tmp))
            base = base or sps
            print(f"processes={k:<3} env-steps/s={sps:>12,.0f}  ratio to {s.procs[0]}="
                  f"{sps / base:.2f}", flush=True)


if __name__ == "__main__":
    main(Settings, run, TRAIN)
