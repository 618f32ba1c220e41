"""The env loop (`trot.make_env`): determinism, time limits, termination, NaN guard, errors,
observation layout and episode statistics, checked against plain MuJoCo where possible."""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
import pytest
import torch

import trot
from trot.tasks.registry import get_task

BAL, SWING = "cartpole-balance", "cartpole-swingup"


def _cfg(name: str, **kw):
    return dataclasses.replace(get_task(name).config, **kw)


def _env(name=BAL, n=8, seed=0, **kw):
    return trot.make_env(name, num_envs=n, seed=seed, config=_cfg(name, **kw))


def _actions(n: int, steps: int, seed: int, amp: float = 1.0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [(2.0 * torch.rand(n, 1, generator=g) - 1.0) * amp for _ in range(steps)]


def _slices(env) -> dict[str, slice]:
    return {s["name"]: slice(s["start"], s["start"] + s["size"])
            for s in env.policy_layout.to_json()}


def _scales(env) -> dict[str, float]:
    return {s["name"]: s["scale"] for s in env.policy_layout.to_json()}


def _expected_obs(env, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
    """Cartpole policy observation from the physical state alone: cart x, the pole's z axis
    (sin a, 0, cos a) for a hinge about +y, and the scaled velocities."""
    sl, sc = _slices(env), _scales(env)
    out = np.zeros(env.obs_dim)
    a = qpos[1]
    out[sl["cart_pos"]] = qpos[0] * sc["cart_pos"]
    out[sl["pole_axis"]] = np.array([math.sin(a), 0.0, math.cos(a)]) * sc["pole_axis"]
    out[sl["cart_vel"]] = qvel[0] * sc["cart_vel"]
    out[sl["pole_vel"]] = qvel[1] * sc["pole_vel"]
    return out


def _obs_from_sensordata(env, d: mujoco.MjData) -> np.ndarray:
    """The policy observation a plain MjData's sensordata gives, by sensor name."""
    model = env.sim.model
    out = np.zeros(env.obs_dim)
    for s in env.policy_layout.to_json():
        assert s["source"]["kind"] == "sensor"
        raw = []
        for name in s["source"]["sensors"]:
            sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, name)
            adr, dim = model.sensor_adr[sid], model.sensor_dim[sid]
            raw.append(d.sensordata[adr : adr + dim])
        raw = np.concatenate(raw) - np.asarray(s["offset"])
        out[s["start"] : s["start"] + s["size"]] = raw * s["scale"]
    return out


def _assert_obs_close(env, actual: torch.Tensor, want: np.ndarray, tol: float) -> None:
    """Every term, pole_axis with its sign (test_pole_axis_is_pole_body_z_axis checks the
    convention), equal up to tol."""
    np.testing.assert_allclose(actual.double().numpy(), want, rtol=tol, atol=tol)


def _assert_finite(result) -> None:
    for t in (result.obs.policy, result.obs.critic, result.final_obs.policy,
              result.final_obs.critic, result.reward):
        assert torch.isfinite(t).all()


# ---------------------------------------------------------------------------- determinism
def _trajectory(seed: int, steps: int = 100):
    env = trot.make_env(BAL, num_envs=16, seed=seed)  # default config: obs noise on
    out = [env.reset().policy.clone()]
    for a in _actions(16, steps, seed=123):
        r = env.step(a)
        out += [r.obs.policy.clone(), r.reward.clone(), r.terminated.clone(),
                r.truncated.clone(), r.final_obs.policy.clone()]
    return out


def test_same_seed_same_trajectory_different_seed_differs():
    a, b, c = _trajectory(0), _trajectory(0), _trajectory(1)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert any(not torch.equal(x, y) for x, y in zip(a, c))
    assert not torch.equal(a[0], c[0])  # initial states differ already
    # the random actions ended some episodes (the pole fell), so resets were covered
    assert any(t.any() for t in a[3::5])


# ---------------------------------------------------------------------------- time limit
def test_truncation_at_time_limit_with_final_obs():
    n = 8
    env = _env(SWING, n=n, episode_seconds=0.2, obs_noise=False)
    model = env.sim.model
    substeps = env.sim.substeps
    expected_steps = round(0.2 / (model.opt.timestep * substeps))
    assert env.max_episode_steps == expected_steps == 10

    env.reset()
    # initial states are float32 (exact in MuJoCo's float64): replay them on plain MjData
    datas = []
    for i in range(n):
        d = mujoco.MjData(model)
        d.qpos[:] = env.sim.qpos[i].double().numpy()
        d.qvel[:] = env.sim.qvel[i].double().numpy()
        datas.append(d)

    actions = _actions(n, expected_steps, seed=7)
    for k, a in enumerate(actions, start=1):
        r = env.step(a)
        last_sub = []  # state at the start of the last substep, per env
        for i, d in enumerate(datas):
            d.ctrl[:] = a[i].double().numpy()
            for j in range(substeps):
                if j == substeps - 1:
                    last_sub.append((d.qpos.copy(), d.qvel.copy()))
                mujoco.mj_step(model, d)
        _assert_finite(r)
        assert not r.terminated.any()
        if k < expected_steps:
            assert not r.truncated.any(), k
            assert torch.equal(r.final_obs.policy, r.obs.policy)
            assert torch.equal(env.episode_step, torch.full((n,), k))

    # step == max_episode_steps: every env truncated, none terminated
    assert r.truncated.all() and not r.terminated.any()
    # sensors are those of mj_step's forward pass (start of the last substep), exactly what
    # the plain MjData holds; with no noise the observation is those, scaled
    want = np.stack([_obs_from_sensordata(env, d) for d in datas])
    np.testing.assert_allclose(r.final_obs.policy.double().numpy(), want, rtol=1e-5, atol=1e-5)
    # ... i.e. they describe the physical state at the start of the last substep
    phys = np.stack([_expected_obs(env, q, v) for q, v in last_sub])
    _assert_obs_close(env, r.final_obs.policy, phys, tol=1e-5)
    # obs is a fresh episode: new start state, clock back to 0
    assert torch.equal(env.episode_step, torch.zeros(n, dtype=torch.int64))
    assert torch.all(env.sim.time == 0.0)
    fresh = np.stack([_expected_obs(env, q, v) for q, v in
                      zip(env.sim.qpos.double().numpy(), env.sim.qvel.double().numpy())])
    _assert_obs_close(env, r.obs.policy, fresh, tol=1e-6)
    assert not torch.allclose(r.obs.policy, r.final_obs.policy)
    # swing-up starts hanging: angle pi +- 0.2
    assert torch.all((env.sim.qpos[:, 1] - math.pi).abs() <= 0.2 + 1e-6)
    assert r.obs.critic.shape == (n, env.critic_obs_dim)

    # the next episode is truncated again exactly 10 steps later
    for k, a in enumerate(_actions(n, expected_steps, seed=8), start=1):
        r = env.step(a)
        assert bool(r.truncated.all()) == (k == expected_steps), k
        assert not r.terminated.any()


# ---------------------------------------------------------------------------- termination
def test_balance_termination_when_pole_falls_or_cart_leaves():
    n = 8
    env = _env(BAL, n=n, obs_noise=False)
    env.reset()
    zero = torch.zeros(n, 1)
    for _ in range(2):
        r = env.step(zero)
        assert not r.terminated.any()

    sim = env.sim
    mask = torch.zeros(n, dtype=torch.bool)
    mask[[2, 5, 6]] = True
    qpos, qvel = sim.qpos.clone(), sim.qvel.clone()
    qpos[2, 1] = 0.6  # pole far past max_angle=0.25
    qpos[5, 1] = -0.6
    qpos[6] = torch.tensor([1.9, 0.0])  # cart past max_cart=1.8 (rail limit is 2)
    qvel[mask] = 0.0
    sim.reset(mask, qpos, qvel)

    r = env.step(zero)
    assert torch.equal(r.terminated, mask)
    assert not r.truncated.any()
    _assert_finite(r)
    assert torch.equal(env.episode_step, torch.where(mask, 0, 3))
    sl = _slices(env)
    # final_obs shows the fallen state, obs the fresh start (|angle| <= 0.1, |x| <= 0.05)
    # (pole_axis z is |cos(angle)|; its sign is checked in test_pole_axis_is_pole_body_z_axis)
    assert torch.all(r.final_obs.policy[[2, 5], sl["pole_axis"]][:, 2].abs() < math.cos(0.25))
    assert float(r.final_obs.policy[6, sl["cart_pos"]]) > 1.8
    assert torch.all(r.obs.policy[mask, sl["pole_axis"]][:, 2].abs() >= math.cos(0.1) - 1e-6)
    assert torch.all(r.obs.policy[mask, sl["cart_pos"]].abs() <= 0.05 + 1e-6)
    keep = ~mask
    assert torch.equal(r.obs.policy[keep], r.final_obs.policy[keep])


# ---------------------------------------------------------------------------- NaN guard
def _check_guard(env, r, mask: torch.Tensor, steps_before: int) -> None:
    k = int(mask.sum())
    _assert_finite(r)
    assert torch.equal(r.terminated, mask)
    assert not r.truncated.any()
    assert int(r.metrics["unstable"]) == k
    assert torch.all(r.reward[mask] == 0.0)
    assert torch.equal(env.episode_step, torch.where(mask, 0, steps_before + 1))
    stats = env.stats.drain(env.reward_terms)
    assert stats["unstable_envs"] == k
    assert stats["episodes"] == k


def _env_after_3_steps(n: int):
    env = _env(BAL, n=n, obs_noise=False)
    env.reset()
    for _ in range(3):
        env.step(torch.zeros(n, 1))
    return env


def test_nan_guard_after_injected_velocity(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT to the cwd
    n, env = 8, _env_after_3_steps(8)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[[1, 5]] = True
    qvel = env.sim.qvel.clone()
    qvel[mask] = 1e12
    env.sim.reset(mask, env.sim.qpos.clone(), qvel)
    r = env.step(torch.zeros(n, 1))
    _check_guard(env, r, mask, steps_before=3)


def test_nan_guard_mid_episode_divergence(tmp_path, monkeypatch):
    """Divergence mid-episode (huge actuator gain in some envs, full push): only those envs
    are terminated, zero-rewarded, reset and counted; the others continue."""
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT to the cwd
    n, env = 8, _env_after_3_steps(8)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[[0, 6]] = True
    gain = env.sim.params("actuator_gainprm").clone()
    gain[:, 0, 0] = 1e15
    env.sim.set_params("actuator_gainprm", mask, gain)

    r = env.step(torch.ones(n, 1))
    _check_guard(env, r, mask, steps_before=3)
    # the next step (no push) is ordinary again
    r = env.step(torch.zeros(n, 1))
    _assert_finite(r)
    assert int(r.metrics["unstable"]) == 0


# ---------------------------------------------------------------------------- bad input
def test_bad_construction_arguments():
    with pytest.raises(ValueError) as e:
        trot.make_env("cartpole-balanse", num_envs=2)
    assert "cartpole-balance" in str(e.value) and "cartpole-swingup" in str(e.value)
    for bad in (0, -3):
        with pytest.raises(ValueError, match="num_envs"):
            trot.make_env(BAL, num_envs=bad)
    with pytest.raises(ValueError) as e:
        trot.make_env(BAL, num_envs=2, sim="foo")
    assert "foo" in str(e.value) and "cpu" in str(e.value)
    with pytest.raises(ValueError, match="tpu9"):
        trot.make_env(BAL, num_envs=2, device="tpu9")
    # no GPU: torch sees none; with a GPU: the cpu backend cannot live there. Both are errors.
    with pytest.raises(ValueError, match="cuda"):
        trot.make_env(BAL, num_envs=2, device="cuda")
    with pytest.raises(TypeError, match="CartpoleConfig"):
        trot.make_env(BAL, num_envs=2, config=trot.tasks.TaskConfig())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_gpu_message():
    with pytest.raises(ValueError, match="no CUDA"):
        trot.make_env(BAL, num_envs=2, device="cuda")


def test_bad_actions():
    n = 4
    env = _env(BAL, n=n)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(n, 1))
    env.reset()
    with pytest.raises(ValueError, match=r"shape"):
        env.step(torch.zeros(n, 2))
    with pytest.raises(ValueError, match=r"shape"):
        env.step(torch.zeros(n))
    with pytest.raises(ValueError, match=r"shape"):
        env.step(torch.zeros(n + 1, 1))
    with pytest.raises(TypeError, match="float32"):
        env.step(torch.zeros(n, 1, dtype=torch.float64))
    with pytest.raises(TypeError, match="Tensor"):
        env.step(np.zeros((n, 1), dtype=np.float32))
    bad = torch.zeros(n, 1)
    bad[2] = float("nan")
    with pytest.raises(ValueError, match="NaN") as e:
        env.step(bad)
    assert "[2]" in str(e.value)
    bad[2] = float("inf")
    with pytest.raises(ValueError, match="Inf"):
        env.step(bad)
    # a rejected action did not advance anything
    assert torch.equal(env.episode_step, torch.zeros(n, dtype=torch.int64))
    # out-of-range actions are clipped, not rejected
    r = env.step(torch.full((n, 1), 5.0))
    _assert_finite(r)


# ---------------------------------------------------------------------------- layout
def test_policy_layout_contiguous_and_consistent_with_state():
    n = 16
    env = _env(BAL, n=n, obs_noise=False)
    obs = env.reset()
    lay = env.policy_layout.to_json()
    names = [s["name"] for s in lay]
    assert len(set(names)) == len(names)
    start = 0
    for s in lay:
        assert s["start"] == start and s["size"] > 0
        assert len(s["offset"]) == s["size"]
        start += s["size"]
    assert start == env.obs_dim == obs.policy.shape[1]
    assert obs.critic.shape == (n, env.critic_obs_dim)
    crit = env.critic_layout.to_json()
    assert sum(s["size"] for s in crit) == env.critic_obs_dim

    sl = _slices(env)
    assert torch.equal(obs.policy[:, sl["cart_pos"]][:, 0], env.sim.qpos[:, 0])
    want = np.stack([_expected_obs(env, q, v) for q, v in
                     zip(env.sim.qpos.double().numpy(), env.sim.qvel.double().numpy())])
    _assert_obs_close(env, obs.policy, want, tol=1e-6)


def test_pole_axis_is_pole_body_z_axis():
    env = _env(BAL, n=4, obs_noise=False)
    model = env.sim.model
    pole = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "pole")
    qpos = torch.tensor([[0.0, 0.0], [0.1, 0.3], [-0.2, -1.0], [0.0, 2.5]])
    env.reset()
    env.sim.reset(torch.ones(4, dtype=torch.bool), qpos, torch.zeros(4, 2))
    obs = env.observe().policy[:, _slices(env)["pole_axis"]]
    for i in range(4):
        d = mujoco.MjData(model)
        d.qpos[:] = qpos[i].double().numpy()
        mujoco.mj_kinematics(model, d)
        body_z = d.xmat[pole].reshape(3, 3)[:, 2]  # the pole's own frame, along the pole
        a = float(qpos[i, 1])
        np.testing.assert_allclose(body_z, [math.sin(a), 0.0, math.cos(a)], atol=1e-12)
        np.testing.assert_allclose(obs[i].double().numpy(), body_z, atol=1e-6)


# ---------------------------------------------------------------------------- statistics
def test_episode_statistics_match_counted_episodes():
    n = 32
    env = _env(BAL, n=n)
    env.reset()
    running = torch.zeros(n)
    lengths = []
    for a in _actions(n, 150, seed=11):
        r = env.step(a)
        assert torch.all(r.reward == 1.0)
        running += 1
        done = r.terminated | r.truncated
        lengths += running[done].tolist()
        running[done] = 0
    stats = env.stats.drain(env.reward_terms)
    assert stats["episodes"] == len(lengths) > 0
    assert stats["unstable_envs"] == 0
    mean = sum(lengths) / len(lengths)
    assert stats["episode_length"] == pytest.approx(mean, rel=1e-5)
    assert stats["episode_return"] == pytest.approx(mean, rel=1e-5)  # reward 1 per step
    assert stats[f"reward/{env.reward_terms[0]}"] == pytest.approx(mean, rel=1e-5)
    # draining empties the accumulators
    assert env.stats.drain(env.reward_terms) == {"episodes": 0.0, "unstable_envs": 0.0}


def test_staggered_start_spreads_resets_and_counts_only_full_episodes():
    entry = get_task("cartpole-swingup")
    cfg = dataclasses.replace(entry.config, episode_seconds=0.2)  # 10 control steps
    env = trot.make_env("cartpole-swingup", num_envs=64, config=cfg, seed=3)
    env.reset(stagger=True)
    starts = env.episode_step.clone()
    assert len(set(starts.tolist())) > 3  # clocks spread over [0, 10)
    ended_at = []
    for t in range(25):
        res = env.step(torch.zeros(64, 1))
        ended_at.append(res.truncated.clone())
    ended = torch.stack(ended_at)  # [25, N]
    first_end = ended.float().argmax(0)  # each env's first (partial unless it started at 0)
    assert torch.equal(first_end, 10 - 1 - starts)  # a staggered clock truncates early
    full = ended.sum() - (starts > 0).sum()  # every later episode is full length
    stats = env.stats.drain(env.reward_terms)
    assert stats["episodes"] == full.item()
    assert stats["episode_length"] == 10.0


def test_statistics_of_older_checkpoint_layouts_are_refused():
    """Checkpoints store the running table [N, 3 + K] and the counted flags. Tables written
    before it had its count column, or before it was one table, are refused with a message
    naming both layouts. The bug: copying a [N, 2 + K] table into [N, 3 + K] (broadcast or
    shifted by a column), so a resumed run reports other episode returns without a word."""
    n = 16
    env = _env(BAL, n=n)
    env.reset()
    for a in _actions(n, 30, seed=5):
        env.step(a)
    state = env.state_dict()
    table, counted = state["running"]
    old_table = dict(state, running=[table[:, 1:], counted])  # return, length, terms
    old_split = dict(state, running=[table[:, 1], table[:, 2], table[:, 3:], counted])
    for old, found in ((old_table, rf"2 tensors, the first \[{n}, 3\]"),
                       (old_split, rf"4 tensors, the first \[{n}\]")):
        with pytest.raises(ValueError, match=found + r".*before 0\.1.*running \[N, 4\]"):
            _env(BAL, n=n).load_state_dict(old)
    e = _env(BAL, n=n)
    e.load_state_dict(state)
    assert torch.equal(e.stats.running, table)


def test_cartpole_state_without_its_start_bank_is_refused():
    """The cartpole's task state is its start-state bank. A state without it (written before
    the bank) is refused. The bug: keeping the fresh bank, so the resumed run draws other
    start states than the straight one and is not bitwise."""
    env = _env(BAL, n=4)
    env.reset()
    state = env.state_dict()
    assert state["task"] and all(k.startswith("start_draws/") for k in state["task"])
    with pytest.raises(ValueError, match=r"no start_draws/\* entries.*before 0\.1"):
        _env(BAL, n=4).load_state_dict(dict(state, task={}))


def test_uniform_bank_hands_out_the_per_step_draws_in_order():
    """Drawing a block at once is invisible when nothing else draws in between: step t gets
    what the t-th per-step `torch.rand` would, across block boundaries and a checkpoint."""
    from trot.tasks.sampling import UniformBank

    g_bank, g_ref = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    bank = UniformBank(100, 4, torch.device("cpu"), block=5)
    for _ in range(7):
        assert torch.equal(bank.draw(g_bank), torch.rand(100, 4, generator=g_ref))
    saved, gen_state = bank.state_dict(), g_bank.get_state()
    resumed = UniformBank(100, 4, torch.device("cpu"), block=5)
    resumed.load_state_dict(saved)
    g_bank.set_state(gen_state)
    for _ in range(6):
        assert torch.equal(resumed.draw(g_bank), torch.rand(100, 4, generator=g_ref))
    with pytest.raises(ValueError, match="block"):
        UniformBank(100, 4, torch.device("cpu"), block=0)
