"""The mjx backend's env loop against its bare physics, on one model and batch, in one run:
how much of `env.step` is not physics (issue 22: host work that would dominate on a GPU).

    python benchmarks/mjx_overhead.py                       # go1-flat, 64 envs, cpu
    python benchmarks/mjx_overhead.py -- g1-flat --num-envs 128 --device cuda

The flags before `--` are this benchmark's (`--steps`, `--repeats`); after it come `trot
train`'s own (default `go1-flat --num-envs 64`): the task, `--num-envs`, `--device` and
`--env.FIELD V`. The sim is mjx whatever `--sim` says: it is what this measures.

Both sides start from the env loop's own states after a warm-up (so the same contacts are
stepped), with the task's randomization and pushes on:
  * bare: `jit(vmap(substeps x mjx.step))` of the same model, batch and per-env parameter
    tables, called `--steps` times back to back with the same controls (no task, no resets);
  * env: `Env.step` with the same controls (task observations, rewards, resets, pushes,
    domain randomization at reset).
  * independent: a bare program that shares nothing with trot's: `jit(vmap(substeps x
    mjx.step))` of `mjx.put_model` of the task's MjModel (no per-env tables), every env at
    the model's home keyframe (its first keyframe, else qpos0), the same controls.
It prints each in ms per control step and the ratios bare / env and independent / env (1.0:
no overhead), best of `--repeats` interleaved rounds (the least disturbed by other load).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jax
import torch
from mujoco import mjx

import trot
from trot.agents.train_config import TrainConfig
from trot.benchmark import main
from trot.sim.jax_bridge import to_jax


@dataclass(frozen=True)
class Settings:
    steps: int = 50
    """control steps per round"""
    repeats: int = 5
    """interleaved rounds; the best of each is reported"""


def bare_program(sim):
    """jit(vmap(substeps x mjx.step)) over the sim's model, tables and data, nothing else."""
    from trot.sim.mjx_programs import _model_axes, _with_params

    fields, substeps = tuple(sim._params), sim.substeps

    def one(m, d, ctrl):
        d = d.replace(ctrl=ctrl)
        return jax.lax.scan(lambda d, _: (mjx.step(m, d), None), d, None, length=substeps)[0]

    @jax.jit
    def step(m_leaves, tables, d_leaves, ctrl):
        m = _with_params(sim._ms.treedef.unflatten(m_leaves), fields, tables)
        d = sim._ds.treedef.unflatten(d_leaves)
        d = jax.vmap(one, in_axes=(_model_axes(m, fields), 0, 0))(m, d, ctrl)
        return jax.tree_util.tree_leaves(d)

    return step


def independent_program(model, n: int, substeps: int, jdev):
    """(step, data): jit(vmap(substeps x mjx.step)) of the plain model, [n] envs at home."""
    import numpy as np

    mx = mjx.put_model(model, device=jdev)
    qpos = model.key_qpos[0] if model.nkey else model.qpos0
    d0 = mjx.make_data(model, device=jdev)
    batch = jax.vmap(lambda q: d0.replace(qpos=q))(
        jax.device_put(np.tile(qpos.astype(np.float32), (n, 1)), jdev))

    def one(d, ctrl):
        d = d.replace(ctrl=ctrl)
        return jax.lax.scan(lambda d, _: (mjx.step(mx, d), None), d, None, length=substeps)[0]

    return jax.jit(jax.vmap(one)), batch


def run(s: Settings, cfg: TrainConfig) -> None:
    env = trot.make_env(cfg.task, num_envs=cfg.num_envs, sim="mjx", device=cfg.device, seed=0,
                        config=cfg.env)
    sim, dev = env.sim, env.device
    env.reset(stagger=True)
    gen = torch.Generator(device=dev).manual_seed(0)
    actions = [0.3 * torch.randn(cfg.num_envs, env.action_dim, generator=gen, device=dev)
               for _ in range(s.steps)]
    for x in actions[:20]:  # warm-up: every program compiled, contacts made
        env.step(x)
    bare = bare_program(sim)
    ctrl = to_jax(env.task.action_to_ctrl(actions[0]).contiguous())
    leaves = bare(sim._m_leaves, sim._tables(), sim._d_leaves, ctrl)
    jax.block_until_ready(leaves)

    def time_bare() -> float:
        d = sim._d_leaves
        t = time.perf_counter()
        for _ in range(s.steps):
            d = bare(sim._m_leaves, sim._tables(), d, ctrl)
        jax.block_until_ready(d)
        return (time.perf_counter() - t) / s.steps

    def time_env() -> float:
        t = time.perf_counter()
        for x in actions:
            env.step(x)
        float(env.sim.qpos.sum())  # one sync: everything queued has run
        return (time.perf_counter() - t) / s.steps

    ind, ind_d = independent_program(sim.model, cfg.num_envs, sim.substeps, sim._jdev)
    jax.block_until_ready(ind(ind_d, ctrl))

    def time_independent() -> float:
        d = ind_d
        t = time.perf_counter()
        for _ in range(s.steps):
            d = ind(d, ctrl)
        jax.block_until_ready(d)
        return (time.perf_counter() - t) / s.steps

    rounds = [(time_bare(), time_independent(), time_env()) for _ in range(s.repeats)]
    b, i, e = (min(r[k] for r in rounds) for k in range(3))
    print(f"task={cfg.task} N={cfg.num_envs} device={dev} impl={sim.impl} "
          f"substeps={sim.substeps} reset_capacity={sim.reset_capacity} jax={jax.__version__}")
    print(f"bare physics {1e3 * b:8.2f} ms/step   independent bare {1e3 * i:8.2f} ms/step   "
          f"env.step {1e3 * e:8.2f} ms/step   (best of {s.repeats} x {s.steps} steps)")
    print(f"ratio bare/env {b / e:.2f}   ratio independent/env {i / e:.2f}")


if __name__ == "__main__":
    main(Settings, run, ("go1-flat", "--num-envs", "64"))
