"""`trot.gym.make_vec`: Gymnasium's vector-env API over a trot env, with same-step autoreset.

Final observations are checked against an independent computation: each step is redone in
a plain MjData from the sim's float64 state, and the observation is rebuilt in numpy from
the layout's sensor slices."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from extras import need

gymnasium = need("gymnasium")

from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import trot.gym
from trot.sim.base import sensor_slices

BAL = "cartpole-balance"


def test_spaces_shapes_and_dtypes():
    envs = trot.gym.make_vec(BAL, num_envs=8, seed=1)
    assert envs.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    so, sa = envs.single_observation_space, envs.single_action_space
    assert so.shape == (envs.env.obs_dim,) and so.dtype == np.float32
    assert sa.shape == (1,) and sa.dtype == np.float32
    assert np.all(sa.low == -1.0) and np.all(sa.high == 1.0)
    assert envs.observation_space.shape == (8, envs.env.obs_dim)
    assert envs.action_space.shape == (8, 1)
    obs, infos = envs.reset(seed=0)
    assert infos == {} and obs.dtype == np.float32 and envs.observation_space.contains(obs)
    envs.action_space.seed(0)
    for _ in range(5):
        obs, rew, term, trunc, infos = envs.step(envs.action_space.sample())
        assert envs.observation_space.contains(obs)
        assert rew.shape == term.shape == trunc.shape == (8,)
        assert rew.dtype == np.float64 and term.dtype == trunc.dtype == np.bool_
        assert all(so.contains(o) for o in obs)


def test_reset_seed_determinism():
    a, b = (trot.gym.make_vec(BAL, num_envs=4, seed=s) for s in (0, 1))
    oa, _ = a.reset(seed=7)
    ob, _ = b.reset(seed=7)  # another instance built with another seed: the reset seed rules
    np.testing.assert_array_equal(oa, ob)
    acts = np.random.default_rng(0).uniform(-1, 1, (20, 4, 1)).astype(np.float32)
    for act in acts:
        ra, rb = a.step(act), b.step(act)
        for x, y in zip(ra[:4], rb[:4]):
            np.testing.assert_array_equal(x, y)
    again, _ = a.reset(seed=7)
    np.testing.assert_array_equal(again, oa)
    other, _ = a.reset(seed=8)
    assert not np.array_equal(other, oa)


def _observe(model: mujoco.MjModel, data: mujoco.MjData, layout) -> np.ndarray:
    """The policy observation of a plain MjData, from the layout's sensor terms alone."""
    sl = sensor_slices(model)
    parts = []
    for slot in layout.slots:
        t = slot.term
        assert t.kind == "sensor"
        raw = np.concatenate([data.sensordata[sl[n].start:sl[n].start + sl[n].size]
                              for n in t.sensors])
        offset = np.asarray(t.offset) if t.offset else 0.0
        parts.append((raw - offset) * t.scale)
    return np.concatenate(parts)


def test_random_policy_final_obs_matches_plain_mujoco():
    n, steps = 8, 300
    envs = trot.gym.make_vec(BAL, num_envs=n, seed=0)
    stats = RecordEpisodeStatistics(envs)  # Gymnasium's own SAME_STEP bookkeeping
    env = envs.env
    model, data = env.sim.model, mujoco.MjData(env.sim.model)
    layout, substeps = env.policy_layout, env.sim.substeps
    obs, _ = stats.reset(seed=3)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(steps):
        state = env.sim.state_dict()["state"].numpy()  # [N, nstate] float64, before the step
        act = rng.uniform(-1.0, 1.0, (n, 1)).astype(np.float32)
        new_obs, _, term, trunc, infos = stats.step(act)
        done = term | trunc
        # independent: the same step in a plain MjData, the observation rebuilt in numpy
        expect = np.empty_like(new_obs)
        qpos = np.empty((n, model.nq))
        for i in range(n):
            mujoco.mj_setState(model, data, state[i], mujoco.mjtState.mjSTATE_INTEGRATION)
            data.ctrl[:] = act[i]
            mujoco.mj_step(model, data, nstep=substeps)
            expect[i] = _observe(model, data, layout)
            qpos[i] = data.qpos
        if not done.any():
            assert "final_obs" not in infos
            np.testing.assert_allclose(new_obs, expect, rtol=1e-6, atol=1e-6)
            obs = new_obs
            continue
        ended += int(done.sum())
        assert infos["final_obs"].dtype == object and infos["final_obs"].shape == (n,)
        np.testing.assert_array_equal(infos["_final_obs"], done)
        np.testing.assert_array_equal(infos["episode"]["l"][done], infos["episode"]["r"][done])
        for i in range(n):
            final = infos["final_obs"][i]
            if not done[i]:
                assert final is None
                np.testing.assert_allclose(new_obs[i], expect[i], rtol=1e-6, atol=1e-6)
                continue
            np.testing.assert_allclose(final, expect[i], rtol=1e-6, atol=1e-6)
            assert envs.single_observation_space.contains(final)
            # balance ends on a fallen pole or a runaway cart; the new episode starts near 0
            assert term[i] == (abs(qpos[i, 1]) > 0.25 or abs(qpos[i, 0]) > 1.8)
            assert abs(new_obs[i][0]) <= 0.05 and not np.allclose(new_obs[i], final)
        obs = new_obs
    assert ended >= 20  # a random policy drops the pole within a few dozen steps
    assert len(stats.return_queue) == min(ended, stats.return_queue.maxlen)
    assert obs.shape == (n, env.obs_dim)


def test_torch_mode_keeps_tensors_on_device():
    envs = trot.gym.make_vec(BAL, num_envs=6, seed=0, torch=True)
    obs, _ = envs.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and obs.shape == (6, envs.env.obs_dim)
    g = torch.Generator().manual_seed(0)
    saw_end = False
    for _ in range(200):
        act = 2.0 * torch.rand(6, 1, generator=g) - 1.0
        obs, rew, term, trunc, infos = envs.step(act)
        assert rew.dtype == torch.float32 and term.dtype == torch.bool
        mask = infos["_final_obs"]
        assert torch.equal(mask, term | trunc)
        final = infos["final_obs"]
        assert torch.equal(final[~mask], obs[~mask])  # dense: equal to obs where no env ended
        saw_end |= bool(mask.any())
    assert saw_end


def test_errors():
    envs = trot.gym.make_vec(BAL, num_envs=2)
    with pytest.raises(TypeError, match="one int"):
        envs.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="not supported"):
        envs.reset(options={"reset_mask": np.ones(2, dtype=bool)})
    envs.reset()
    with pytest.raises(ValueError):
        envs.step(np.zeros((3, 1), dtype=np.float32))  # wrong number of envs
