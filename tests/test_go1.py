"""go1-flat: the Go1 model, the robot loader, locomotion rewards, commands, randomization,
pushes and action latency. Small N and short horizons: the whole file runs in seconds."""

from __future__ import annotations

import math
from dataclasses import replace

import mujoco
import numpy as np
import pytest
import torch

import trot
import trot.tasks.go1 as go1  # registers go1-flat
from trot.agents.loop import train
from trot.tasks.legged_config import LeggedConfig
from trot.tasks.terms import commands as loco
from trot.tasks.terms.body import Step
from trot.tasks.terms.clock import GaitClock
from trot.tasks.terms.rewards import FeetAirTime, PreviousAction
from trot.tasks.registry import get_task
from trot.tasks.robots import RobotNotFoundError, load_robot, resolve_robot

QUIET = replace(LeggedConfig(), randomize=False, push=False, init_joint_noise=0.0,
                init_vel_noise=0.0, obs_noise=False)
HOME = (0.0, 0.9, -1.8) * 4


def make(n: int = 4, seed: int = 0, **changes) -> trot.tasks.Env:
    """The Go1 through the plain legged task (go1-flat-airtime): its terms, no clock."""
    return trot.make_env("go1-flat-airtime", num_envs=n, seed=seed,
                         config=replace(QUIET, **changes))


# ------------------------------------------------------------------------- model


def test_model_facts():
    m = load_robot("go1").compile()
    assert (m.nq, m.nv, m.nu) == (19, 18, 12)
    assert m.opt.timestep == pytest.approx(0.005)
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, m.actuator_trnid[i, 0])
             for i in range(m.nu)]
    assert tuple(names) == go1.JOINTS
    assert sum(m.body_mass) == pytest.approx(13.1, abs=0.01)
    limits = np.abs(m.actuator_forcerange[:, 1]).reshape(4, 3)
    assert np.allclose(limits, [23.7, 23.7, 35.55])
    assert go1.GO1_FLAT_AIRTIME(QUIET).home_pose() == pytest.approx(HOME)
    # only robot-floor contacts: robot geoms never collide with each other
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    robot = [g for g in range(m.ngeom) if g != floor]
    for a in robot:
        for b in robot:
            assert not (m.geom_contype[a] & m.geom_conaffinity[b])
    colliding = {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) for g in robot
                 if m.geom_contype[floor] & m.geom_conaffinity[g]}
    assert colliding == {"trunk"} | {f"{leg}_{p}" for leg in go1.LEGS
                                     for p in ("foot", "thigh", "shoulder")}


def test_stands_for_5_seconds_with_zero_actions():
    env = make(4)
    env.reset()
    zero = torch.zeros(4, 12)
    heights, ended = [], torch.zeros(4, dtype=torch.bool)
    for _ in range(250):  # 5 s at 50 Hz
        res = env.step(zero)
        ended |= res.terminated | res.truncated
        heights.append(env.sim.qpos[:, 2].clone())
    h = torch.stack(heights)
    assert not ended.any()
    # it sags under kp=35 from the geometric 0.285 m by ~4.5 cm in the first 0.5 s, then
    # holds: after 1 s the height stays within 2 cm and ends within 5 cm of the keyframe
    assert ((h[-1] - 0.285).abs() < 0.05).all()
    assert (h[50:].max(0).values - h[50:].min(0).values < 0.02).all()
    assert (env.sim.sensor("upvector")[:, 2] > 0.99).all()  # upright
    feet = torch.cat([env.sim.sensor(f"{leg}_foot_contact") for leg in go1.LEGS], dim=1)
    assert (feet > 10).all()  # every foot carries weight
    assert (env.sim.sensor("trunk_contact") == 0).all()


def test_contact_sensors_and_termination():
    env = make(2)
    env.reset()
    sim = env.sim
    q, v = sim.qpos.clone(), torch.zeros_like(sim.qvel)
    q[0, 2], q[0, 3:7] = 0.2, torch.tensor([0.0, 1.0, 0.0, 0.0])  # upside down
    q[1, 2], q[1, 7:] = 0.16, torch.tensor([0.0, 0.6, -2.7] * 4)  # kneeling on its thighs
    sim.reset(torch.ones(2, dtype=torch.bool), q, v)
    for _ in range(25):
        sim.step(q[:, 7:])  # hold the poses
    thighs = torch.cat([sim.sensor(f"{leg}_thigh_contact") for leg in go1.LEGS], dim=1)
    assert sim.sensor("trunk_contact")[0, 0] > 10 and sim.sensor("trunk_contact")[1, 0] == 0
    assert (thighs[1] > 1).all() and (thighs[0] == 0).all()
    assert env.task.terminated(sim).tolist() == [True, False]
    total, terms = _last_terms(env)
    assert terms["undesired_contacts"][1] == pytest.approx(-1.0 * 4 * env.control_dt)
    # the fall costs the termination weight once (not x dt), outside the clip at 0
    w = env.task.weights["termination"]
    assert w == -2.0
    assert terms["termination"].tolist() == [w, 0.0]
    assert w <= total[0] <= w + 1.5 * env.control_dt and total[1] >= 0  # clip + penalty


def test_action_affine_and_contract_bits():
    env = make(2)
    scale, offset = env.task.action_affine(env.sim.model)
    assert scale == [0.5] * 12 and offset == pytest.approx(HOME)
    assert env.task.command_ranges() == {"lin_vel_x": [-1.0, 1.0], "lin_vel_y": [-0.5, 0.5],
                                         "yaw_rate": [-1.0, 1.0]}
    assert env.obs_dim == 3 + 3 + 12 + 12 + 12 + 3
    assert env.critic_obs_dim == env.obs_dim + 3 + 1 + 4 + 4 + 1  # + floor friction


# ------------------------------------------------------------------------- rewards


def test_reward_terms_on_a_hand_set_state():
    """Sensors, command and action history set by hand on one env, then read by reward();
    each expected number is worked out below from the registered weights (per second) x
    dt 0.02, not with the task's expressions."""
    env = make(1)
    env.reset()
    sim, task = env.sim, env.task
    w = task.weights
    assert (w["lin_vel"], w["yaw_rate"], w["lin_vel_z"], w["ang_vel_xy"],
            w["action_rate"], w["undesired_contacts"]) == (1.0, 0.5, -2.0, -0.05, -0.01, -1.0)
    task.body.term(loco.VelocityCommand).seen[:] = torch.tensor([1.0, 0.0, 1.0])
    sim.sensor("base_linvel")[:] = torch.tensor([0.5, 0.0, 0.2])  # m/s, base frame
    sim.sensor("gyro")[:] = torch.tensor([1.0, 2.0, 0.0])  # rad/s
    for leg, f in zip(go1.LEGS, (0.0, 2.0, 5.0, 0.5)):  # N on the thighs
        sim.sensor(f"{leg}_thigh_contact")[:] = f
    prev = task.body.term(PreviousAction)
    prev.prev[:] = 0.0
    prev.prev[0, :2] = torch.tensor([0.0, 0.5])
    action = torch.zeros(1, 12)
    action[0, :2] = torch.tensor([0.5, -0.5])
    _, terms = task.reward(sim, action)
    dt = 0.02
    got = {k: v.item() for k, v in terms.items()}
    assert got["lin_vel"] == pytest.approx(1.0 * dt * math.exp(-0.25 / 0.25))  # |0.5|^2/std^2
    assert got["yaw_rate"] == pytest.approx(0.5 * dt * math.exp(-1.0 / 0.25))
    assert got["lin_vel_z"] == pytest.approx(-2.0 * dt * 0.04)
    assert got["ang_vel_xy"] == pytest.approx(-0.05 * dt * 5.0)
    assert got["action_rate"] == pytest.approx(-0.01 * dt * (0.25 + 1.0))
    assert got["undesired_contacts"] == pytest.approx(-1.0 * dt * 2)  # two above 1 N


def test_feet_air_time_by_hand():
    """One foot (FR): stance, lift-off, two steps in the air, touchdown; dt 0.02, target
    0.05. The step after lift-off still counts as contact (filter), so the swing is 0.06 s
    when it lands -> 0.06 - 0.05 = 0.01 once, at touchdown; nothing when the command is
    below 0.1 m/s. The other feet stay down and score nothing."""
    for speed, want in ((1.0, 0.01), (0.05, 0.0)):
        env = make(1, air_time_target=0.05)
        env.reset()
        term, body = env.task.body.term(FeetAirTime), env.task.body
        scores = []
        for c in (True, False, False, False, True):
            for leg in go1.LEGS:
                env.sim.sensor(f"{leg}_foot_contact")[:] = 50.0 if c or leg != "FR" else 0.0
            term.post_step(Step(body, torch.zeros(1, 12), torch.tensor([[speed, 0.0, 0.0]])))
            scores.append(term.value.item())
        assert scores == pytest.approx([0.0, 0.0, 0.0, 0.0, want])
        assert term.air[0, 0].item() == 0.0


def test_env_terms_are_weight_times_dt_times_term():
    """The reward is the clamped sum of its terms, and two terms are checked against
    the config's weights, the control dt and the raw sensors, computed here. The bugs: a
    wrong weight or dt on a term, a term left out of the total, the clamp dropped."""
    env = make(3)
    env.reset()
    env.step(torch.zeros(3, 12))
    env.step(torch.full((3, 12), 0.3))
    total, terms = _last_terms(env)
    dt, sim = env.control_dt, env.sim
    torque_sq = sum(sim.sensor(f"{j}_torque")[:, 0].double() ** 2 for j in go1.JOINTS)
    up = sim.sensor("upvector").double()  # gravity in the base frame is -upvector
    torch.testing.assert_close(terms["torques"].double(), -2e-4 * dt * torque_sq,
                               rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(terms["orientation"].double(),
                               -1.0 * dt * (up[:, 0] ** 2 + up[:, 1] ** 2),
                               rtol=1e-5, atol=1e-9)
    assert (terms["torques"] < 0).all()
    assert (terms["termination"] == 0).all()  # standing: no fall
    summed = torch.stack(list(terms.values())).sum(0)
    torch.testing.assert_close(total, summed.clamp(min=0))
    assert (summed < 0).any() or (summed > 0).all()  # the clamp is exercised or moot


def test_torque_orientation_and_energy_terms_on_a_hand_set_state():
    """Sensors set by hand on one env, then read by reward() and eval_metrics(); the
    expected numbers are worked out below, not with the task's expressions."""
    env = make(1)
    env.reset()
    sim, task = env.sim, env.task
    assert (env.control_dt, task.weights["torques"], task.weights["orientation"]) == \
        (0.02, -2e-4, -1.0)  # the go1-flat defaults the numbers below use
    for j in go1.JOINTS:
        sim.sensor(f"{j}_torque")[:] = 0.0
        sim.sensor(f"{j}_vel")[:] = 0.0
    sim.sensor("FR_hip_torque")[:], sim.sensor("FR_thigh_torque")[:] = 2.0, 3.0  # Nm
    sim.sensor("FR_hip_vel")[:], sim.sensor("FR_thigh_vel")[:] = 1.0, -2.0  # rad/s
    sim.sensor("upvector")[:] = torch.tensor([0.3, -0.4, 0.866])  # gravity = -upvector
    sim.qvel[:, :2] = torch.tensor([3.0, 4.0])  # base planar velocity, m/s
    _, terms = task.reward(sim, torch.zeros(1, 12))
    # torques: 2^2 + 3^2 = 13 Nm^2;  x w -2e-4 x dt 0.02  ->  -5.2e-5
    assert terms["torques"].item() == pytest.approx(-5.2e-5, rel=1e-6)
    # orientation: gx^2 + gy^2 = 0.09 + 0.16 = 0.25;  x w -1 x dt 0.02  ->  -0.005
    assert terms["orientation"].item() == pytest.approx(-0.005, rel=1e-6)
    m = {k: v.item() for k, v in task.eval_metrics(sim).items()}
    assert m["power"] == pytest.approx(8.0)  # |2 x 1| + |3 x -2| = 2 + 6 W
    assert m["speed"] == pytest.approx(5.0)  # sqrt(3^2 + 4^2) m/s
    out = task.summarize({"power": m["power"], "speed": m["speed"],
                          "terminated_rate": 0.25, "mean_length": 50.0})
    # 8 W / 5 m/s = 1.6 J/m;  50 steps x 0.02 s = 1 s;  the fall rate is the termination rate
    assert out == pytest.approx({"energy_per_meter": 1.6, "episode_seconds": 1.0,
                                 "fall_rate": 0.25})


def _last_terms(env):
    """reward() of the last step, evaluated again: it only reads (memory advanced in the
    step's post_step), so the same state and action give the step's own terms."""
    return env.task.reward(env.sim, env.last_action)


# ------------------------------------------------------------------------- commands


def test_sample_commands_ranges_and_standing_share():
    gen = torch.Generator().manual_seed(0)
    low, high = torch.tensor([-1.0, -0.5, -1.0]), torch.tensor([1.0, 0.5, 1.0])
    cmd = loco.sample_commands(4000, low, high, 0.25, gen)
    assert ((cmd >= low) & (cmd <= high)).all()
    standing = (cmd == 0).all(1).float().mean().item()
    assert abs(standing - 0.25) < 0.03


def test_commands_resampled_exactly_on_schedule():
    n = 8
    env = make(n, resample_seconds=0.2, standing_fraction=0.0)  # every 10 control steps
    env.reset()
    zero = torch.zeros(n, 12)
    prev = env.task.command.clone()
    changed = {}
    for step in range(1, 36):
        prev_seen = env.task.command.clone()
        res = env.step(zero)
        assert not (res.terminated | res.truncated).any()
        cmd = env.task.command
        changed[step] = int((cmd != prev).any(1).sum())
        if step in (10, 20, 30):  # the reward of the changing step scores the old command
            assert torch.equal(env.task.body.term(loco.VelocityCommand).seen, prev_seen)
        prev = cmd.clone()
    assert {s: k for s, k in changed.items() if k} == {10: n, 20: n, 30: n}
    lo, hi = torch.tensor([-1.0, -0.5, -1.0]), torch.tensor([1.0, 0.5, 1.0])
    assert ((prev >= lo) & (prev <= hi)).all()


# ------------------------------------------------------------------------- randomization


def test_domain_randomization_differs_across_envs_within_ranges():
    n = 12
    c = LeggedConfig()
    env = make(n, randomize=True)
    env.reset()
    m, sim = env.sim.model, env.sim
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    trunk = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "trunk")

    fric = sim.params("geom_friction")[:, floor, 0]
    mass = sim.params("body_mass")[:, trunk] - float(m.body_mass[trunk])
    com = sim.params("body_ipos")[:, trunk] - torch.tensor(m.body_ipos[trunk]).float()
    kp = sim.params("actuator_gainprm")[:, :, 0] / 35.0
    bias = sim.params("actuator_biasprm")
    kv = -bias[:, :, 2] / 0.5
    for x, (lo, hi) in ((fric, c.friction_range), (mass, c.added_mass_range)):
        assert x.unique().numel() == n
        assert ((x >= lo - 1e-5) & (x <= hi + 1e-5)).all()
    assert (com.abs() <= torch.tensor(c.com_offset) + 1e-6).all() and com.std(0).min() > 0
    s_lo, s_hi = c.motor_strength_range
    for x, (lo, hi) in ((kp, c.kp_range), (kv, c.kd_range)):
        assert x.unique().numel() == n * 12
        assert ((x >= s_lo * lo - 1e-5) & (x <= s_hi * hi + 1e-5)).all()
    assert torch.equal(bias[:, :, 1], -sim.params("actuator_gainprm")[:, :, 0])  # servo
    # the per-env models really are the randomized ones
    assert sim._b.get_model(3).geom_friction[floor, 0] == pytest.approx(float(fric[3]))

    # a partial reset redraws only the masked envs
    before = {f: sim.params(f).clone() for f in ("geom_friction", "body_mass")}
    mask = torch.arange(n) < n // 2
    env.task.randomize(sim, mask, env.gen)
    for f, old in before.items():
        new = sim.params(f)
        assert torch.equal(new[~mask], old[~mask]) and not torch.equal(new[mask], old[mask])


def test_an_episodes_first_observation_sees_its_own_parameters():
    """A reset's forward pass, which the first observation reads, runs with the parameters
    drawn for the new episode: each env's sensors equal a plain mj_forward of its own
    randomized model at its start state. (Drawn after the reset's forward, as before
    2026-12-03, the accelerometer and the motor torques, which depend on masses and gains,
    came from the last episode's parameters.)"""
    n = 4
    env = make(n, randomize=True)
    sim = env.sim

    def forward(m: mujoco.MjModel, i: int) -> np.ndarray:
        d = mujoco.MjData(m)
        d.qpos, d.qvel = sim.qpos[i].double().numpy(), sim.qvel[i].double().numpy()
        mujoco.mj_forward(m, d)
        return d.sensordata

    for _ in range(2):  # the first draw, then a redraw over the first one's parameters
        env.reset()
        for i in range(n):
            want = forward(sim._b.get_model(i), i)  # env i's own model, constants included
            assert np.abs(forward(sim.model, i) - want).max() > 0.1  # the draw shows
            np.testing.assert_allclose(sim.sensordata[i].numpy(), want, rtol=1e-4, atol=1e-3)


def test_no_randomization_when_off():
    env = make(4)
    env.reset()
    m = env.sim.model
    assert torch.equal(env.sim.params("body_mass"),
                       torch.tensor(m.body_mass).float().expand(4, -1))


def test_push_changes_base_velocity_on_schedule():
    n, zero = 4, torch.zeros(4, 12)
    pushed = make(n, push=True, push_interval_seconds=(0.1, 0.1), push_velocity=1.0)
    calm = make(n)
    pushed.reset(), calm.reset()
    for step in range(1, 6):  # the kick lands in the 5th step's pre_step
        pushed.step(zero), calm.step(zero)
        dv = (pushed.sim.qvel - calm.sim.qvel)[:, :2]
        if step < 5:
            assert torch.equal(pushed.sim.qvel, calm.sim.qvel)
    assert (dv.abs().max(1).values > 1e-3).all() and dv.abs().max() > 0.1
    assert (dv.abs() <= 1.0 + 1e-3).all()


# ------------------------------------------------------------------------- latency


def _ctrls(env, actions):
    seen = []
    step = env.sim.step
    env.sim.step = lambda ctrl: (seen.append(ctrl.clone()), step(ctrl))[1]
    for a in actions:
        env.step(a)
    env.sim.step = step
    return seen


@pytest.mark.parametrize("latency", [1, 2])
def test_latency_delays_actions_exactly(latency):
    n = 2
    gen = torch.Generator().manual_seed(1)
    actions = [0.2 * (2 * torch.rand(n, 12, generator=gen) - 1) for _ in range(8)]
    env0, envL = make(n), make(n, latency_steps=latency)
    env0.reset(), envL.reset()
    c0, cL = _ctrls(env0, actions), _ctrls(envL, actions)
    home = torch.tensor(HOME).expand(n, -1)
    for t in range(len(actions)):
        want = home if t < latency else c0[t - latency]
        assert torch.allclose(cL[t], want), t
    # a reset clears the pending actions: the first `latency` targets are home again
    envL.reset()
    after = _ctrls(envL, actions[:latency + 1])
    for t in range(latency):
        assert torch.allclose(after[t], home)
    assert torch.allclose(after[latency], c0[0])


def test_state_dict_roundtrip():
    env = make(2, latency_steps=1)
    env.reset()
    env.step(torch.full((2, 12), 0.1))
    state = env.task.state_dict()
    env.step(torch.full((2, 12), -0.1))
    env.task.load_state_dict(state)
    assert env.task.state_dict().keys() == state.keys()
    for k, v in env.task.state_dict().items():
        assert torch.equal(v, state[k]) if torch.is_tensor(v) else v == state[k], k


# ------------------------------------------------------------------------- loader

TINY = """<mujoco model="tiny">
  <worldbody>
    <body name="arm"><joint name="j" type="hinge"/><geom type="capsule" size="0.02"
      fromto="0 0 0 0 0 0.3" mass="0.5"/></body>
  </worldbody>
</mujoco>"""


def test_load_robot_from_path(tmp_path):
    f = tmp_path / "tiny.xml"
    f.write_text(TINY)
    spec = load_robot(f)
    assert isinstance(spec, mujoco.MjSpec) and spec.compile().njnt == 1
    assert load_robot(go1.GO1.mjcf).compile().nu == 12
    assert resolve_robot("go1") == go1.GO1.mjcf  # shipped asset by name


def test_load_robot_missing_file(tmp_path):
    missing = tmp_path / "nope.xml"
    with pytest.raises(FileNotFoundError, match="nope.xml"):
        load_robot(missing)
    bad = tmp_path / "bad.xml"
    bad.write_text("<mujoco><worldbody><body></mujoco>")
    with pytest.raises(ValueError, match="bad.xml"):
        load_robot(bad)


def test_load_robot_menagerie_root_unset(monkeypatch):
    monkeypatch.delenv("MENAGERIE_ROOT", raising=False)
    with pytest.raises(RobotNotFoundError, match="MENAGERIE_ROOT is not set") as e:
        load_robot("unitree_go1")
    assert "unitree_go1" in str(e.value)


def test_load_robot_menagerie_layout(tmp_path, monkeypatch):
    d = tmp_path / "unitree_go1"
    d.mkdir()
    (d / "go1.xml").write_text(TINY)
    (d / "scene.xml").write_text('<mujoco model="scene"><include file="go1.xml"/>'
                                 '<worldbody><geom name="floor" type="plane" size="1 1 .1"/>'
                                 "</worldbody></mujoco>")
    monkeypatch.setenv("MENAGERIE_ROOT", str(tmp_path))
    assert resolve_robot("unitree_go1") == d / "scene.xml"
    assert resolve_robot("unitree_go1", scene=False) == d / "go1.xml"
    assert resolve_robot("unitree_go1/go1.xml") == d / "go1.xml"
    assert load_robot("unitree_go1").compile().ngeom == 2  # robot + the scene's floor
    with pytest.raises(RobotNotFoundError, match="unitree_a1") as e:
        load_robot("unitree_a1")
    assert "scene.xml" in str(e.value) and "a1.xml" in str(e.value)


def test_eval_and_sim2sim_report_the_locomotion_metrics(tmp_path, monkeypatch):
    """`trot eval` and `trot sim2sim` both print tracking errors, fall rate, episode length
    and energy per meter for go1-flat (an untrained policy: the numbers' presence and
    consistency, not their quality)."""
    import dataclasses

    from trot.agents.config import PPOConfig
    from trot.agents.evaluate import evaluate
    from trot.agents.learners import start
    from trot.agents.train_config import TrainConfig
    from trot.export.onnx import export_run
    from trot.export.sim2sim import run_sim2sim

    monkeypatch.chdir(tmp_path)
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(16,), critic_hidden=(16,),
                                rollout_steps=4, minibatches=1, epochs=1)
    env_cfg = dataclasses.replace(get_task("go1-flat").config, episode_seconds=2.0)
    cfg = TrainConfig(task="go1-flat", num_envs=16, max_env_steps=64, agent=agent,
                      env=env_cfg, run_dir=str(tmp_path / "run"))
    trainer, run_dir = start(cfg)
    train(trainer, run_dir, quiet=True)
    export_run(run_dir, quiet=True)
    keys = {"lin_vel_error", "yaw_rate_error", "fall_rate", "episode_seconds",
            "energy_per_meter", "terminated_rate", "mean_length"}
    for out in (evaluate(run_dir, episodes=4), run_sim2sim(run_dir, episodes=2)):
        assert keys <= set(out), sorted(out)
        assert out["fall_rate"] == out["terminated_rate"]
        assert out["episode_seconds"] == pytest.approx(out["mean_length"] * 0.02)
        assert 0 < out["episode_seconds"] <= 2.0 and out["energy_per_meter"] > 0


def test_critic_sees_each_envs_randomized_floor_friction():
    env = trot.make_env("go1-flat", num_envs=64, seed=3)
    env.reset()
    assert env.task.body.floor == 0  # the term reads geom 0's sliding friction
    slot = next(s for s in env.critic_layout.slots if s.term.name == "floor_friction")
    seen = env.obs.critic[:, slot.start]  # [N]
    mu = env.sim.params("geom_friction")[:, 0, 0]  # [N], drawn per env at reset
    assert mu.std() > 0.05  # randomized
    torch.testing.assert_close(seen, (mu - 1.0) * 2.0)
    assert all(s.term.kind != "param" for s in env.policy_layout.slots)  # privileged only


def test_sim2sim_randomization_keeps_the_state():
    """PlainSim.set_params on a mass field (mj_setConst) must not move the robot."""
    from trot.export.sim2sim import PlainSim

    env = trot.make_env("go1-flat", num_envs=1)
    m = env.sim.model
    d = mujoco.MjData(m)
    d.qpos[:] = np.arange(m.nq) * 0.01 + 0.3
    d.qvel[:] = 0.5
    mujoco.mj_forward(m, d)
    q, v = d.qpos.copy(), d.qvel.copy()
    sim = PlainSim(m, d, 4)
    mass = torch.tensor(m.body_mass, dtype=torch.float32)[None] * 1.1
    sim.set_params("body_mass", torch.ones(1, dtype=torch.bool), mass)
    np.testing.assert_array_equal(d.qpos, q)
    np.testing.assert_array_equal(d.qvel, v)
    np.testing.assert_allclose(m.body_mass, mass[0].double().numpy(), rtol=1e-6)


# ------------------------------------------------------------------------- trotting clock


def _trot(n: int = 2, **changes) -> trot.tasks.Env:
    base = get_task("go1-flat").config
    cfg = replace(base, randomize=False, push=False, obs_noise=False, standing_fraction=0.0,
                  lin_vel_x=(0.5, 1.0), **changes)
    return trot.make_env("go1-flat", num_envs=n, seed=0, config=cfg)


def test_trot_clock_pairs_the_diagonal_feet():
    """Over one cycle, two feet share the clock's schedule exactly when they are diagonal
    in the model (opposite signs of x and y in the base frame at home), and the two pairs
    alternate. Catches offsets read in another order than the description's feet (a pace
    or a bound instead of a trot)."""
    env = _trot()
    env.reset()
    m = env.sim.model
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, "home"))
    mujoco.mj_kinematics(m, d)
    feet = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f) for f in go1.GO1.feet]
    base = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, go1.GO1.base)
    side = np.sign(d.geom_xpos[feet, :2] - d.xpos[base, :2])  # [F, 2]: front/back, left/right
    cycle = round(env.task.config.gait_period / env.control_dt)
    schedule = []
    for _ in range(cycle):
        env.step(torch.zeros(2, 12))
        task = env.task
        step = Step(task.body, env.last_action, task.body.term(loco.VelocityCommand).seen)
        schedule.append(task.body.term(GaitClock).stance_expected(step)[0].clone())
    schedule = torch.stack(schedule)  # [T, F]
    assert (schedule.sum(-1) == 2).all()  # one diagonal pair down at a time
    for i in range(4):
        for j in range(i + 1, 4):
            diagonal = bool((side[i] != side[j]).all())
            assert bool((schedule[:, i] == schedule[:, j]).all()) == diagonal, (i, j)


def test_gait_offsets_need_one_per_foot():
    with pytest.raises(ValueError, match="one per foot.*FR_foot"):
        _trot(gait_offsets=(0.0, 0.5))
