"""Throughput of the mjx backend: physics only, the env loop, and training, per env count.

    python benchmarks/gpu_bench.py                      # cuda, 1024,4096,8192 envs
    python benchmarks/gpu_bench.py --device cpu --sizes 64,128 --steps 20 --train-iters 2

`--sim cpu` with a cuda device measures Sebulba mode instead (tasks/hosted.py: MuJoCo C on
the host cores, the env loop's results and the learner on the GPU).

Prints one table (env-steps/s = control steps x envs per second; physics steps are that times
the task's substeps) and a short training run; with --out DIR also
writes bench.json and bench.txt there; with --append FILE each size's row is appended to
FILE as soon as it is measured. Times are taken after a warm-up call, so compilation
is excluded (and reported in its own column).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

import trot
from trot.agents.config import PPOConfig
from trot.agents.learners import build
from trot.agents.trainer import Trainer
from trot.bench import env_loop, sim_only
from trot.agents.train_config import TrainConfig
from trot.sim import resolve_device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def train_throughput(env, sim: str, device: torch.device, iters: int,
                     rollout: int, capture: str = "off") -> tuple[float, float]:
    """Trainer.iterate (rollout + PPO update) env-steps/s, and the last mean return seen.
    capture: TrainConfig.capture; its compile happens in the untimed warm-up iteration."""
    agent = dataclasses.replace(PPOConfig(), rollout_steps=rollout)
    cfg = TrainConfig(task=env.name, num_envs=env.num_envs, sim=sim, device=str(device),
                      agent=agent, max_env_steps=10**12, capture=capture)
    trainer = Trainer(cfg, env)
    trainer.iterate()  # warm-up (the update's kernels, the reset program)
    _sync(device)
    t = time.perf_counter()
    ret = float("nan")
    for _ in range(iters):
        ret = trainer.iterate().get("episode_return", ret)
    _sync(device)
    return iters * rollout * env.num_envs / (time.perf_counter() - t), ret


def short_training(task: str, num_envs: int, device: torch.device, seconds: float,
                   max_iters: int) -> list[dict]:
    """Train from scratch for a wall-clock budget; return the per-iteration log."""
    cfg = TrainConfig(task=task, num_envs=num_envs, sim="mjx", device=str(device),
                      max_env_steps=10**12)
    trainer = build(cfg)
    log, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds and trainer.iteration < max_iters:
        m = trainer.iterate()
        m["wall_s"] = time.perf_counter() - t0
        log.append(m)
    return log


def measure(a: argparse.Namespace, n: int, device: torch.device) -> dict:
    """One env count: build, physics only, env loop and training env-steps/s."""
    t = time.perf_counter()
    env = trot.make_env(a.task, num_envs=n, sim=a.sim, device=device)
    build_s = time.perf_counter() - t
    s = env.sim.substeps
    sebulba = a.sim == "cpu" and device.type != "cpu"
    backend = f"mjx-{env.sim.impl}" if a.sim == "mjx" else "sebulba" if sebulba else "cpu"
    backend += "" if a.capture == "off" else f" ({a.capture})"
    row = {"num_envs": n, "backend": backend,
           "compile_s": getattr(env.sim, "compile_seconds", 0.0), "build_s": build_s}
    row["env_loop"] = env_loop(env, a.steps) / s  # env-steps/s (bench returns physics)
    row["physics"] = sim_only(env, a.steps) / s  # from the env loop's own states
    row["train"], row["train_return"] = train_throughput(env, a.sim, device, a.train_iters,
                                                         a.rollout, a.capture)
    row["overflow_steps"] = int(getattr(env.sim, "overflow_steps", 0))
    return row


def cpu_baseline(task: str, n: int, steps: int) -> dict:
    """The cpu backend (all host threads) at n envs: physics only and env loop."""
    env = trot.make_env(task, num_envs=n, sim="cpu")
    s = env.sim.substeps
    return {"num_envs": n, "physics": sim_only(env, steps) / s,
            "env_loop": env_loop(env, steps) / s, "threads": getattr(env.sim, "nthread", 0)}


def report_training(say, training: list[dict], a: argparse.Namespace) -> None:
    say()
    say(f"training run: {a.task}, sim=mjx, {a.train_envs} envs, PPO defaults, "
        f"budget {a.train_seconds:.0f} s")
    ret = float("nan")  # iterations where no episode ended report none: carry the last
    for m in training:
        m["last_return"] = ret = m.get("episode_return", ret)
    for m in training[:: max(1, len(training) // 10)] + training[-1:]:
        say(f"  iter {m['iteration']:>4}  env_steps {m['env_steps']:>11,}  "
            f"wall {m['wall_s']:>6.1f} s  mean return {m['last_return']:>7.1f}  "
            f"unstable envs {m.get('unstable_envs', 0):.0f}")


def report_table(say, rows: list[dict], cpu_row: dict | None, device: torch.device,
                 task: str) -> None:
    say()
    say(f"env-steps/s on {device} ({task}; physics steps/s = env-steps/s x substeps)")
    head = (f"{'backend':<10}{'envs':>7}{'compile s':>11}{'physics only':>15}{'env loop':>13}"
            f"{'training':>13}")
    say(head)
    say("-" * len(head))
    for r in rows:
        say(f"{r['backend']:<10}{r['num_envs']:>7}{r['compile_s']:>11.1f}"
            f"{r['physics']:>15,.0f}{r['env_loop']:>13,.0f}{r['train']:>13,.0f}")
    if cpu_row:
        say(f"{'cpu':<10}{cpu_row['num_envs']:>7}{'-':>11}{cpu_row['physics']:>15,.0f}"
            f"{cpu_row['env_loop']:>13,.0f}{'-':>13}   ({cpu_row['threads']} threads)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="cartpole-balance")
    p.add_argument("--device", default="cuda")
    p.add_argument("--sim", default="mjx", choices=("mjx", "cpu"),
                   help="physics backend of the measured rows (cpu + cuda: Sebulba)")
    p.add_argument("--sizes", default="1024,4096,8192", help="comma-separated env counts")
    p.add_argument("--steps", type=int, default=200, help="control steps per measurement")
    p.add_argument("--train-iters", type=int, default=10, help="timed Trainer iterations")
    p.add_argument("--rollout", type=int, default=16, help="rollout steps per iteration")
    p.add_argument("--impl", default=None, help="jax or warp (default: the backend's choice)")
    p.add_argument("--warp-graph", default=None,
                   help="MJX-Warp CUDA-graph mode, e.g. WARP_STAGED (default: MJX's)")
    p.add_argument("--capture", default="off",
                   help="TrainConfig.capture of the timed training iterations (off: eager, "
                        "the reference; auto: inductor on CUDA), named in the backend column")
    p.add_argument("--train-envs", type=int, default=4096, help="envs for the training run")
    p.add_argument("--train-seconds", type=float, default=60.0,
                   help="wall-clock budget of the training run (0: skip it)")
    p.add_argument("--train-max-iters", type=int, default=60)
    p.add_argument("--cpu-baseline", type=int, default=1024,
                   help="also time the cpu backend at this N (0: skip)")
    p.add_argument("--out", default=None, help="directory for bench.json/.txt")
    p.add_argument("--append", default=None,
                   help="a file that gets one table row per measurement as soon as it is "
                        "measured (benchmarks/gpu_check.sh's results.md)")
    a = p.parse_args()
    if a.impl:
        os.environ["TROT_MJX_IMPL"] = a.impl
    if a.warp_graph:
        os.environ["TROT_MJX_WARP_GRAPH"] = a.warp_graph
    device = resolve_device(a.device)
    sizes = [int(s) for s in a.sizes.split(",") if s]

    import mujoco

    try:  # Sebulba (--sim cpu) needs no JAX: a broken JAX must not stop its rows
        import jax
        jax_info = f"jax={jax.__version__} jax_devices={jax.devices()}"
    except Exception as e:  # noqa: BLE001
        jax_info = f"jax unusable ({type(e).__name__}: {e})"
    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    say(f"task={a.task} device={device} ({gpu}) torch={torch.__version__} {jax_info}"
        f" mujoco={mujoco.__version__} cpus={os.cpu_count()}")
    rows = []
    for n in sizes:
        row = measure(a, n, device)
        rows.append(row)
        print(f"  N={n}: {row}", flush=True)
        if a.append:  # now, so that a timeout loses nothing measured
            with open(a.append, "a") as f:
                f.write(f"| {a.task} | {row['backend']} | {n} | {row['compile_s']:.1f} | "
                        f"{row['physics']:,.0f} | {row['env_loop']:,.0f} | "
                        f"{row['train']:,.0f} |\n")
        _free(device)

    cpu_row = cpu_baseline(a.task, a.cpu_baseline, a.steps) if a.cpu_baseline else None

    training = []
    if a.train_seconds > 0:
        training = short_training(a.task, a.train_envs, device, a.train_seconds,
                                  a.train_max_iters)
        report_training(say, training, a)
    report_table(say, rows, cpu_row, device, a.task)

    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.txt").write_text("\n".join(lines) + "\n")
        (out / "bench.json").write_text(json.dumps(
            {"rows": rows, "cpu": cpu_row, "training": training, "args": vars(a)}, indent=1,
            default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
