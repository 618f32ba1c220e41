"""Throughput of the mjx backend: physics only, the env loop, and training, per env count.

    python benchmarks/gpu_bench.py                      # cuda, 1024 4096 8192 envs
    python benchmarks/gpu_bench.py --sizes 64 128 --steps 20 --train-iters 2 \
        -- cartpole-balance --sim mjx --device cpu --capture off

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`cartpole-balance --sim mjx --device cuda --capture off`): the task, `--sim`, `--device`,
`--capture` (of the timed training iterations: off, eager, the reference; auto: inductor
on CUDA; named in the backend column) and `--env.FIELD V`. `--sim cpu` with a cuda device
measures Sebulba mode instead (tasks/hosted.py: MuJoCo C on the host cores, the env loop's
results and the learner on the GPU). The env counts are `--sizes`; the timed and the short
training runs use PPO's defaults (PPOConfig, rollouts of `--rollout` steps), so that the
rows of every task compare.

Prints one table (env-steps/s = control steps x envs per second; physics steps are that times
the task's substeps) and a short training run; with --out DIR also
writes bench.json and bench.txt there; with --append FILE each size's row is appended to
FILE as soon as it is measured. Times are taken after a warm-up call, so compilation
is excluded (and reported in its own column).
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import trot
from trot.agents.config import PPOConfig
from trot.agents.learners import start
from trot.agents.loop import train
from trot.agents.train_config import TrainConfig
from trot.agents.trainer import Trainer
from trot.bench import env_loop, sim_only
from trot.benchmark import main, number
from trot.sim import resolve_device


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...] = (1024, 4096, 8192)
    """env counts measured"""
    steps: int = 200
    """control steps per measurement"""
    train_iters: int = 10
    """timed training iterations"""
    rollout: int = 16
    """rollout steps per iteration"""
    impl: str | None = None
    """jax or warp (default: the backend's choice)"""
    warp_graph: str | None = None
    """MJX-Warp CUDA-graph mode, e.g. WARP_STAGED (default: MJX's)"""
    train_envs: int = 4096
    """envs for the short training run (sim mjx)"""
    train_seconds: float = 60.0
    """wall-clock budget of the short training run (0: skip it)"""
    train_max_iters: int = 60
    """iterations of the short training run at most"""
    cpu_baseline: int = 1024
    """also time the cpu backend at this N (0: skip)"""
    out: str | None = None
    """directory for bench.json/.txt"""
    append: str | None = None
    """a file that gets one table row per measurement as soon as it is measured
    (benchmarks/gpu_check.sh's results.md)"""


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
    capture: TrainConfig.capture; its compile happens in the untimed warm-up iteration.
    The iterations are called here to time them alone (a measurement, not a training run:
    the loop's logs and checkpoints stay out of the time)."""
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


def short_training(cfg: TrainConfig, seconds: float, max_iters: int) -> list[dict]:
    """cfg trained from scratch through trot's one loop (agents/loop.py) for a wall-clock
    budget or `max_iters` iterations; its per-iteration log (the run's metrics.csv)."""
    cfg = dataclasses.replace(cfg, minutes=seconds / 60, export=False,
                              max_env_steps=max_iters * cfg.num_envs * cfg.agent.rollout_steps)
    with tempfile.TemporaryDirectory() as tmp:
        trainer, run_dir = start(dataclasses.replace(cfg, run_dir=tmp))
        train(trainer, run_dir, quiet=True)
        with open(run_dir / "metrics.csv", newline="") as f:
            return [{k: number(v) for k, v in r.items() if v} for r in csv.DictReader(f)]


def measure(s: Settings, cfg: TrainConfig, n: int, device: torch.device) -> dict:
    """One env count: build, physics only, env loop and training env-steps/s."""
    t = time.perf_counter()
    env = trot.make_env(cfg.task, num_envs=n, sim=cfg.sim, device=device, config=cfg.env)
    build_s = time.perf_counter() - t
    sub = env.sim.substeps
    sebulba = cfg.sim == "cpu" and device.type != "cpu"
    backend = f"mjx-{env.sim.impl}" if cfg.sim == "mjx" else "sebulba" if sebulba else "cpu"
    backend += "" if cfg.capture == "off" else f" ({cfg.capture})"
    row = {"num_envs": n, "backend": backend,
           "compile_s": getattr(env.sim, "compile_seconds", 0.0), "build_s": build_s}
    row["env_loop"] = env_loop(env, s.steps) / sub  # env-steps/s (bench returns physics)
    row["physics"] = sim_only(env, s.steps) / sub  # from the env loop's own states
    row["train"], row["train_return"] = train_throughput(env, cfg.sim, device, s.train_iters,
                                                         s.rollout, cfg.capture)
    row["overflow_steps"] = int(getattr(env.sim, "overflow_steps", 0))
    return row


def cpu_baseline(task: str, n: int, steps: int) -> dict:
    """The cpu backend (all host threads) at n envs: physics only and env loop."""
    env = trot.make_env(task, num_envs=n, sim="cpu")
    s = env.sim.substeps
    return {"num_envs": n, "physics": sim_only(env, steps) / s,
            "env_loop": env_loop(env, steps) / s, "threads": getattr(env.sim, "nthread", 0)}


def report_training(say, training: list[dict], s: Settings, task: str) -> None:
    say()
    say(f"training run: {task}, sim=mjx, {s.train_envs} envs, PPO defaults, "
        f"budget {s.train_seconds:.0f} s")
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


def jax_info() -> str:
    try:  # Sebulba (--sim cpu) needs no JAX: a broken JAX must not stop its rows
        import jax
        return f"jax={jax.__version__} jax_devices={jax.devices()}"
    except Exception as e:  # noqa: BLE001
        return f"jax unusable ({type(e).__name__}: {e})"


def run(s: Settings, cfg: TrainConfig) -> None:
    if s.impl:
        os.environ["TROT_MJX_IMPL"] = s.impl
    if s.warp_graph:
        os.environ["TROT_MJX_WARP_GRAPH"] = s.warp_graph
    device = resolve_device(cfg.device)
    import mujoco

    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    say(f"task={cfg.task} device={device} ({gpu}) torch={torch.__version__} {jax_info()}"
        f" mujoco={mujoco.__version__} cpus={os.cpu_count()}")
    rows = []
    for n in s.sizes:
        row = measure(s, cfg, n, device)
        rows.append(row)
        print(f"  N={n}: {row}", flush=True)
        if s.append:  # now, so that a timeout loses nothing measured
            with open(s.append, "a") as f:
                f.write(f"| {cfg.task} | {row['backend']} | {n} | {row['compile_s']:.1f} | "
                        f"{row['physics']:,.0f} | {row['env_loop']:,.0f} | "
                        f"{row['train']:,.0f} |\n")
        _free(device)
    cpu_row = cpu_baseline(cfg.task, s.cpu_baseline, s.steps) if s.cpu_baseline else None
    training = []
    if s.train_seconds > 0:
        training = short_training(TrainConfig(
            task=cfg.task, num_envs=s.train_envs, sim="mjx", device=str(device),
            env=cfg.env), s.train_seconds, s.train_max_iters)
        report_training(say, training, s, cfg.task)
    report_table(say, rows, cpu_row, device, cfg.task)
    if s.out:
        out = Path(s.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.txt").write_text("\n".join(lines) + "\n")
        args = dataclasses.asdict(s) | {k: getattr(cfg, k) for k in ("task", "device", "sim",
                                                                     "capture")}
        (out / "bench.json").write_text(json.dumps(
            {"rows": rows, "cpu": cpu_row, "training": training, "args": args}, indent=1,
            default=str))


if __name__ == "__main__":
    main(Settings, run, ("cartpole-balance", "--sim", "mjx", "--device", "cuda",
                         "--capture", "off"))
