"""Where one training iteration's time goes, on a registered task with its registered agent
settings: physics and task (env.step), acting (the policy's forward and sampling), the
rollout's critic pass, GAE and PopArt (prepare), the update, the normalizers and logging.

Each part is timed by wrapping the trainer's own methods (no copy of the loop), after
warm-up iterations, and printed as seconds per iteration and a share of the whole. The
random-action env loop at the same N is timed in the same run, so "train / env loop" is
the ratio issue 23 asks for (>= 0.60).

    python benchmarks/profile_iteration.py --iterations 10 -- go1-flat
    python benchmarks/profile_iteration.py -- go2-flat --agent.symmetry augment
    python benchmarks/profile_iteration.py -- go1-flat --async-collect --actor-lag 1

The flags before `--` are this benchmark's; after it come `trot train`'s own (default
`go1-flat`): the task, `--num-envs`, `--agent.FIELD V`, `--env.FIELD V` (e.g.
`--env.obs-history 4`) and the synchronous mode's and the run's settings (e.g.
`--async-collect --actor-lag 1`: the parts then overlap, and only the env-steps/s line adds
up; `--torch-threads`, `--update-threads`).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from trot.agents.collect import set_threads
from trot.agents.learners import build
from trot.agents.logger import RunLogger
from trot.agents.modes import Sync
from trot.agents.train_config import TrainConfig
from trot.benchmark import main


@dataclass(frozen=True)
class Settings:
    iterations: int = 10
    """timed iterations"""
    warmup: int = 3
    """untimed iterations first"""


def _timed(obj, name: str, totals: dict[str, float], label: str) -> None:
    fn = getattr(obj, name)

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        totals[label] += time.perf_counter() - t
        return out

    setattr(obj, name, wrapper)


def env_loop_rate(trainer, steps: int) -> float:
    """Env steps/s of the random-action loop on the trainer's own env."""
    env, gen = trainer.env, torch.Generator().manual_seed(0)
    torch.set_num_threads(max(1, trainer.cfg.torch_threads))
    t = time.perf_counter()
    for _ in range(steps):
        env.step(torch.rand(env.num_envs, env.action_dim, generator=gen) * 2 - 1)
    return steps * env.num_envs / (time.perf_counter() - t)


def update_flops(trainer, agent) -> float:
    """Matrix-multiply FLOPs of one update: 6 per weight per sample (2 forward, 4 backward),
    over the actor's and critic's linear layers, every sample of every epoch (twice with
    symmetry augmentation). Biases, activations and Adam are left out: a floor, not a sum."""
    weights = sum(m.in_features * m.out_features for m in trainer.ac.modules()
                  if isinstance(m, torch.nn.Linear))
    samples = agent.rollout_steps * trainer.env.num_envs * agent.epochs
    return 6.0 * weights * samples * (2 if agent.symmetry == "augment" else 1)


def sgemm_rate(threads: int) -> float:
    """FLOP/s of a float32 [6144, 256] x [256, 256] product, the update's own shape, on the
    update's threads."""
    set_threads(threads)
    a, b = torch.randn(6144, 256), torch.randn(256, 256)
    for _ in range(3):
        a @ b
    t, reps = time.perf_counter(), 50
    for _ in range(reps):
        a @ b
    return 2 * 6144 * 256 * 256 * reps / (time.perf_counter() - t)


def run(s: Settings, cfg: TrainConfig) -> None:
    if not isinstance(cfg.mode, Sync) or cfg.mode.nproc > 1:
        raise SystemExit("this profile is of one synchronous learner: give no other mode "
                         "after --")
    agent = cfg.agent
    with tempfile.TemporaryDirectory() as tmp:
        cfg = dataclasses.replace(cfg, run_dir=tmp)
        trainer = build(cfg)
        # the learner's iterations, called here to time their parts: a measurement, not a
        # training run (agents/loop.py's loop would add its checkpoints and budgets)
        logger = RunLogger(Path(tmp), tensorboard=True, curve_every_s=600.0)
        for _ in range(s.warmup):
            logger.log(trainer.iterate() | {"wall_s": 0.0, "steps_per_s": 0.0})
        totals: dict[str, float] = defaultdict(float)
        algo, ac = trainer.algo, trainer.ac
        _timed(trainer.env, "step", totals, "physics + task (env.step)")
        _timed(algo, "act", totals, "acting (policy forward + sample)")
        _timed(ac.critic, "value", totals, "critic passes (rollout values, GAE bootstrap)")
        _timed(algo, "prepare", totals, "prepare (GAE, PopArt; includes a critic pass)")
        _timed(algo, "update", totals, "update (epochs x minibatches)")
        _timed(ac, "update_normalizers", totals, "observation normalizers")
        _timed(logger, "log", totals, "logging (csv, tensorboard)")
        t = time.perf_counter()
        for _ in range(s.iterations):
            logger.log(trainer.iterate() | {"wall_s": 0.0, "steps_per_s": 0.0})
        total = time.perf_counter() - t
        logger.close()
        steps = s.iterations * agent.rollout_steps * cfg.num_envs
        totals = dict(totals)  # the env loop below steps the same (wrapped) env
        loop = env_loop_rate(trainer, 3 * agent.rollout_steps)
        gemm = sgemm_rate(trainer.cfg.update_threads)
    print(f"task={cfg.task} N={cfg.num_envs} T={agent.rollout_steps} epochs={agent.epochs} "
          f"minibatches={agent.minibatches} symmetry={agent.symmetry} "
          f"threads: sim {trainer.env.sim.nthread}, torch {trainer.cfg.torch_threads} / "
          f"update {trainer.cfg.update_threads or 'all'}"
          + (" async_collect (collection overlaps the update)" if cfg.mode.async_collect else ""))
    n = s.iterations
    for label, sec in totals.items():
        print(f"  {label:<48} {sec / n:7.3f} s/it  {100 * sec / total:5.1f}%")
    rest = total - sum(v for k, v in totals.items() if not k.startswith("critic"))
    print(f"  {'other (rollout writes, checks, host sync)':<48} {rest / n:7.3f} s/it  "
          f"{100 * rest / total:5.1f}%  (critic passes are inside collection and prepare)")
    upd = totals["update (epochs x minibatches)"] / n
    flops = update_flops(trainer, agent)
    print(f"update: {flops / 1e9:.0f} GFLOP of matrix products per iteration, "
          f"{flops / upd / 1e9:.0f} GFLOP/s; this machine's float32 matrix product: "
          f"{gemm / 1e9:.0f} GFLOP/s, so the update's floor is {flops / gemm:.3f} s/it")
    train = steps / total
    print(f"training {train:,.0f} env-steps/s; random-action env loop {loop:,.0f} env-steps/s; "
          f"train / env loop = {train / loop:.2f}")


if __name__ == "__main__":
    main(Settings, run, ("go1-flat",))
