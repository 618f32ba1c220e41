"""Throughput measurements shared by `trot sim-bench` and benchmarks/sim_throughput.py.
Each returns physics steps per second (control steps x substeps x envs)."""

from __future__ import annotations

import time

import mujoco
import numpy as np
import torch
from mujoco import rollout
from torch import Tensor

from trot.tasks.env import Env


def full_physics_columns(model: mujoco.MjModel) -> np.ndarray:
    """Columns of an mjSTATE_INTEGRATION row (a cpu-backend state row) that make up the
    mjSTATE_FULLPHYSICS state `mujoco.rollout` starts from (components in bit order)."""
    full = int(mujoco.mjtState.mjSTATE_FULLPHYSICS)
    cols, start = [], 0
    for bit in range(int(mujoco.mjtState.mjNSTATE)):
        size = mujoco.mj_stateSize(model, 1 << bit)
        if full & (1 << bit):
            cols.extend(range(start, start + size))
        start += size
    return np.array(cols, dtype=np.int64)


class RawRollout:
    """`mujoco.rollout` of N envs for nstep physics steps under zero control, all threads:
    the ceiling. Starts from qpos0, or from given states (`start_from`). Prepared once, so
    that it can be timed in repeated chunks."""

    def __init__(self, model: mujoco.MjModel, n: int, nstep: int, nthread: int):
        self.n, self.nstep = n, nstep
        self.models = [model] * n
        self.data = [mujoco.MjData(model) for _ in range(nthread)]
        full = mujoco.mjtState.mjSTATE_FULLPHYSICS.value
        state0 = np.zeros(mujoco.mj_stateSize(model, full))
        mujoco.mj_getState(model, self.data[0], state0, full)
        self.init = np.tile(state0, (n, 1))  # [N, S]
        self.ctrl = np.zeros((n, nstep, model.nu))
        self.out_s = np.zeros((n, nstep, state0.size))
        self.out_d = np.zeros((n, nstep, model.nsensordata))
        self.pool = rollout.Rollout(nthread=nthread if nthread > 1 else 0)

    def start_from(self, states: np.ndarray) -> None:
        """[N, S] mjSTATE_FULLPHYSICS states (e.g. an env's current ones, so that the
        ceiling steps the same contacts as the env loop it is compared with)."""
        self.init[...] = states

    def seconds(self) -> float:
        """Wall time of one call."""
        t = time.perf_counter()
        self.pool.rollout(self.models, self.data, self.init, self.ctrl, skip_checks=True,
                          nstep=self.nstep, state=self.out_s, sensordata=self.out_d)
        return time.perf_counter() - t

    def close(self) -> None:
        self.pool.close()


def raw_rollout(model: mujoco.MjModel, n: int, nstep: int, nthread: int) -> float:
    """One long rollout after a warm-up call: physics steps/s."""
    raw = RawRollout(model, n, nstep, nthread)
    raw.seconds()
    rate = n * nstep / raw.seconds()
    raw.close()
    return rate


def sim_seconds(env: Env, steps: int) -> float:
    """Wall time of `steps` calls of `BatchedSim.step` under zero control."""
    ctrl = torch.zeros(env.num_envs, env.sim.model.nu, device=env.sim.device)  # the sim's own
    t = time.perf_counter()
    for _ in range(steps):
        env.sim.step(ctrl)
    _sync(env.sim.device)
    return time.perf_counter() - t


def env_seconds(env: Env, actions: list[Tensor], steps: int) -> float:
    """Wall time of `steps` env-loop steps cycling through `actions`, resets and all."""
    t = time.perf_counter()
    for i in range(steps):
        env.step(actions[i % len(actions)])
    _sync(env.device)
    return time.perf_counter() - t


def random_actions(env: Env, seed: int, count: int = 8) -> list[Tensor]:
    gen = torch.Generator(device=env.device).manual_seed(seed)
    return [torch.rand(env.num_envs, env.action_dim, generator=gen, device=env.device) * 2 - 1
            for _ in range(count)]


def sim_only(env: Env, steps: int) -> float:
    """`BatchedSim.step` alone under zero control: physics steps/s."""
    sim_seconds(env, 1)
    return env.num_envs * steps * env.sim.substeps / sim_seconds(env, steps)


def env_loop(env: Env, steps: int, seed: int = 0) -> float:
    """The env loop under uniform random actions, resets and all: physics steps/s."""
    env.reset()
    actions = random_actions(env, seed)
    env_seconds(env, actions, 1)
    return env.num_envs * steps * env.sim.substeps / env_seconds(env, actions, steps)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
