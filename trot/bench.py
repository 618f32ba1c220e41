"""Throughput measurements shared by `trot sim-bench` and benchmarks/sim_throughput.py.
Each returns physics steps per second (control steps x substeps x envs)."""

from __future__ import annotations

import time

import mujoco
import numpy as np
import torch
from mujoco import rollout

from trot.tasks.env import Env


def raw_rollout(model: mujoco.MjModel, n: int, nstep: int, nthread: int) -> float:
    """One long `mujoco.rollout` call from qpos0 under zero control: the ceiling."""
    data = [mujoco.MjData(model) for _ in range(nthread)]
    full = mujoco.mjtState.mjSTATE_FULLPHYSICS.value
    state0 = np.zeros(mujoco.mj_stateSize(model, full))
    mujoco.mj_getState(model, data[0], state0, full)
    init = np.tile(state0, (n, 1))
    ctrl = np.zeros((n, nstep, model.nu))
    out_s = np.zeros((n, nstep, state0.size))
    out_d = np.zeros((n, nstep, model.nsensordata))
    models = [model] * n
    with rollout.Rollout(nthread=nthread if nthread > 1 else 0) as pool:
        pool.rollout(models, data, init, ctrl, skip_checks=True, nstep=nstep,
                     state=out_s, sensordata=out_d)  # warm-up
        t = time.perf_counter()
        pool.rollout(models, data, init, ctrl, skip_checks=True, nstep=nstep,
                     state=out_s, sensordata=out_d)
        return n * nstep / (time.perf_counter() - t)


def sim_only(env: Env, steps: int) -> float:
    """`BatchedSim.step` alone under zero control."""
    ctrl = torch.zeros(env.num_envs, env.sim.model.nu, device=env.device)
    env.sim.step(ctrl)
    _sync(env.device)
    t = time.perf_counter()
    for _ in range(steps):
        env.sim.step(ctrl)
    _sync(env.device)
    return env.num_envs * steps * env.sim.substeps / (time.perf_counter() - t)


def env_loop(env: Env, steps: int, seed: int = 0) -> float:
    """The env loop under uniform random actions, resets and all."""
    gen = torch.Generator(device=env.device).manual_seed(seed)
    env.reset()
    acts = [torch.rand(env.num_envs, env.action_dim, generator=gen, device=env.device) * 2 - 1
            for _ in range(8)]
    env.step(acts[0])
    _sync(env.device)
    t = time.perf_counter()
    for i in range(steps):
        env.step(acts[i % 8])
    _sync(env.device)
    return env.num_envs * steps * env.sim.substeps / (time.perf_counter() - t)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
