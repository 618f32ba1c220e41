"""Heading commands (LeggedConfig.heading_command): the yaw of the base, the steering law's
wrap, and the env's use of them, against MuJoCo's own rotation and complex phases."""

from __future__ import annotations

import math
from dataclasses import replace

import mujoco
import numpy as np
import pytest
import torch

import trot
import trot.tasks.go1  # noqa: F401  (registers go1-flat-airtime)
from trot.tasks.terms import commands as loco
from trot.tasks.legged_config import LeggedConfig
from trot.tasks.terms.commands import VelocityCommand

QUIET = replace(LeggedConfig(), randomize=False, push=False, init_joint_noise=0.0,
                init_vel_noise=0.0, obs_noise=False, heading_command=True)


def test_yaw_of_matches_mujocos_rotation_of_the_x_axis():
    """Catches a quaternion read in the wrong order (x, y, z, w) or a flipped sign."""
    rng = np.random.default_rng(0)
    quats = rng.normal(size=(200, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    quats[:, 1:3] *= 0.3  # mostly upright, as a walking base, but tilted
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    expected = []
    for q in quats:
        x_axis = np.zeros(3)
        mujoco.mju_rotVecQuat(x_axis, np.array([1.0, 0.0, 0.0]), q)
        expected.append(math.atan2(x_axis[1], x_axis[0]))
    got = loco.yaw_of(torch.tensor(quats, dtype=torch.float64))
    assert np.allclose(got.numpy(), expected, atol=1e-9)


def test_heading_error_takes_the_short_way_round():
    """Catches a missing or wrong wrap: from 170 to -170 degrees is +20, not -340."""
    rng = np.random.default_rng(1)
    target, yaw = rng.uniform(-3 * np.pi, 3 * np.pi, (2, 500))
    error = np.angle(np.exp(1j * (target - yaw)))  # the complex phase: wrapped by numpy
    got = loco.heading_yaw_rate(torch.tensor(target), torch.tensor(yaw), 0.5, -1.0, 1.0)
    assert np.allclose(got.numpy(), np.clip(0.5 * error, -1.0, 1.0), atol=1e-9)
    turn = loco.heading_yaw_rate(torch.tensor([math.radians(-170)]),
                                 torch.tensor([math.radians(170)]), 1.0, -1.0, 1.0)
    assert float(turn) == pytest.approx(math.radians(20), abs=1e-6)


def _env(n: int = 6, **changes) -> trot.tasks.Env:
    return trot.make_env("go1-flat-airtime", num_envs=n, seed=0,
                         config=replace(QUIET, **changes))


def test_env_steers_from_the_simulated_bases_yaw():
    """Turning the base in the simulator changes the next yaw-rate command by stiffness x
    the turn: catches reading the yaw from anything but the base's state."""
    env = _env(standing_fraction=0.0, heading_stiffness=0.25)
    env.reset()
    env.step(torch.zeros(env.num_envs, env.action_dim))
    task = env.task
    task.body.term(VelocityCommand).target.copy_(loco.yaw_of(env.sim.qpos[:, 3:7]) + 1.0)  # 1 rad to go
    env.step(torch.zeros(env.num_envs, env.action_dim))
    before = task.command[:, 2].clone()
    assert torch.allclose(before, torch.full_like(before, 0.25), atol=0.03)  # ~0.25 x 1 rad
    qpos = env.sim.qpos.clone()
    turn = 0.4  # rad about world z: q <- (cos t/2, 0, 0, sin t/2) * q
    rot = torch.tensor([math.cos(turn / 2), 0.0, 0.0, math.sin(turn / 2)])
    quat = np.stack([_mul(rot.numpy(), q) for q in qpos[:, 3:7].numpy()])
    qpos[:, 3:7] = torch.tensor(quat, dtype=qpos.dtype)
    env.sim.reset(torch.ones(env.num_envs, dtype=torch.bool), qpos, env.sim.qvel.clone())
    env.step(torch.zeros(env.num_envs, env.action_dim))
    assert torch.allclose(task.command[:, 2], before - 0.25 * turn, atol=0.03)


def test_the_observed_command_steers_from_the_yaw_the_step_reached():
    """The yaw-rate command in a step's observation, in `final_obs` as in `obs`, is the
    steering law at the yaw the physics reached: catches steering after `final_obs` is
    observed (it then showed the previous step's command) or from the yaw before it."""
    env = _env(n=16, standing_fraction=0.0, resample_seconds=0.1, episode_seconds=0.5,
               heading_stiffness=1.0)
    env.reset()
    task, gen = env.task, torch.Generator().manual_seed(1)
    slot = next(s for s in env.policy_layout.to_json() if s["name"] == "command")
    col, scale = slot["start"] + 2, slot["scale"]  # the yaw-rate command
    ended = 0
    for _ in range(40):
        r = env.step(2 * torch.rand(env.num_envs, env.action_dim, generator=gen) - 1)
        done = r.terminated | r.truncated
        ended += int(done.sum())
        heading = task.body.term(VelocityCommand)
        want = loco.heading_yaw_rate(heading.target, loco.yaw_of(env.sim.qpos[:, 3:7]),
                                     1.0, *heading.yaw_limits)
        assert torch.allclose(r.obs.policy[:, col], scale * want, atol=1e-6)
        assert torch.equal(r.final_obs.policy[~done], r.obs.policy[~done])
        assert torch.equal(r.final_obs.critic[~done], r.obs.critic[~done])
    assert ended > 0  # resets, and commands drawn mid-episode, happened on the way


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, a, b)
    return out


def test_standing_commands_stay_still_and_the_heading_is_checkpointed():
    """Standing envs must not be steered (they would turn on the spot), and a resumed run
    must steer to the same headings."""
    env = _env(n=64, standing_fraction=0.5, resample_seconds=0.1)
    env.reset()
    for _ in range(8):
        env.step(torch.zeros(env.num_envs, env.action_dim))
    cmd = env.task.command
    standing = (cmd[:, :2] == 0).all(-1)
    assert 10 < int(standing.sum()) < 54
    assert (cmd[standing, 2] == 0).all()
    assert (cmd[~standing, 2] != 0).all()
    state = env.task.state_dict()
    twin = _env(n=64, standing_fraction=0.5, resample_seconds=0.1)
    twin.load_state_dict(env.state_dict())
    heading = twin.task.body.term(VelocityCommand)
    assert torch.equal(heading.target, state["VelocityCommand.target"])
    assert torch.equal(heading.moving, state["VelocityCommand.moving"])
    a, b = env.step(torch.zeros(64, env.action_dim)), twin.step(torch.zeros(64, env.action_dim))
    assert torch.equal(env.task.command, twin.task.command)
    assert torch.equal(a.obs.policy, b.obs.policy)


def test_curriculum_odds_tracker_follows_the_closed_form_circle():
    """benchmarks/curriculum_odds.py's perfect tracker against the exact arc of a constant
    (v, 0, w) command: catches a base-to-world rotation with the wrong sign or axis."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).parents[1] / "benchmarks" / "curriculum_odds.py"
    spec = importlib.util.spec_from_file_location("curriculum_odds", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    odds, track = bench.odds, bench.track

    v, w, T, dt = 0.8, 0.6, 4.0, 1e-4
    yaw0 = torch.tensor([0.3], dtype=torch.float64)
    cmd = torch.tensor([[v, 0.0, w]], dtype=torch.float64)
    xy, asked = track(lambda t, yaw: cmd, yaw0, torch.zeros(1, 2, dtype=torch.float64),
                      round(T / dt), dt)
    r = v / w  # centre of the turn: r to the base's left of the start
    cx, cy = -r * math.sin(0.3), r * math.cos(0.3)
    end = (cx + r * math.sin(0.3 + w * T), cy - r * math.cos(0.3 + w * T))
    assert np.allclose(xy[0].numpy(), end, atol=1e-3)
    assert float(asked) == pytest.approx(v * T, rel=1e-6)
    (up_rate, down_rate), (up_head, down_head) = odds(False, 500), odds(True, 500)
    assert up_head > up_rate and down_head < down_rate
