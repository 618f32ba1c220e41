"""Benchmark plumbing that decides what a ratio means: the ceiling's start states."""

from __future__ import annotations

import mujoco
import numpy as np
import torch

import trot
from trot.bench import RawRollout, full_physics_columns


def test_ceiling_starts_from_the_env_states_it_is_given():
    """The FULLPHYSICS columns of a cpu-backend state row are what mj_getState gives for
    that env, and a rollout from them matches mj_step from the env's MjData."""
    env = trot.make_env("go1-flat", num_envs=3, seed=4)
    env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        env.step(torch.rand(3, env.action_dim, generator=g) * 2 - 1)
    m, full = env.sim.model, mujoco.mjtState.mjSTATE_FULLPHYSICS.value
    states = env.sim.state_dict()["state"].numpy()[:, full_physics_columns(m)]
    raw = RawRollout(m, 3, 4, nthread=1)
    raw.start_from(states)
    raw.seconds()
    for i in range(3):
        d = mujoco.MjData(m)
        env.sim._b.get_data(i, d)
        want = np.zeros(mujoco.mj_stateSize(m, full))
        mujoco.mj_getState(m, d, want, full)
        np.testing.assert_array_equal(states[i], want)
        d.ctrl[:] = 0.0
        for _ in range(4):
            mujoco.mj_step(m, d)
        np.testing.assert_allclose(raw.out_s[i, -1, 1:1 + m.nq], d.qpos, atol=1e-6)
    raw.close()
