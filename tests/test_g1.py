"""g1-flat: trot's G1-class humanoid (tasks/assets/g1.xml) and the biped task
(tasks/clocked.py): the model's facts, standing under zero actions, its self-collisions, the
gait clock on both sides of the export, the biped terms on hand-set states, the mirror
(half a cycle later) and the gait metrics (tasks/gait.py) on a synthetic gait whose answers
are known by construction."""

from __future__ import annotations

import dataclasses
import math

import mujoco
import numpy as np
import pytest
import torch

import trot
from trot.agents.loop import train
from trot.export.runner import ObservationBuilder
from trot.tasks.g1 import G1, JOINTS
from trot.tasks.gait import GaitTracker
from trot.tasks.legged_robot import prepare
from trot.tasks.registry import get_task
from trot.tasks.terms.body import Step
from trot.tasks.terms.clock import GaitClock, feet_phase, gait_contact, swing_height
from trot.tasks.terms.commands import VelocityCommand
from trot.tasks.terms.rewards import Deviation, base_height, joint_limits

QUIET = dict(randomize=False, push=False, init_joint_noise=0.0, init_vel_noise=0.0,
             obs_noise=False)


def make(n: int = 4, **changes) -> trot.tasks.Env:
    cfg = dataclasses.replace(get_task("g1-flat").config, **(QUIET | changes))
    return trot.make_env("g1-flat", num_envs=n, seed=0, config=cfg)


def test_model_facts():
    m = prepare(G1).compile()
    assert (m.nq, m.nv, m.nu) == (19, 18, 12)
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, m.actuator_trnid[i, 0])
             for i in range(m.nu)]
    assert tuple(names) == JOINTS
    assert sum(m.body_mass) == pytest.approx(32.24, abs=0.01)  # the sum of Menagerie's links
    limits = np.abs(m.actuator_forcerange[:, 1]).reshape(2, 6)
    assert np.allclose(limits, [88, 139, 88, 139, 50, 50])
    # the standing pose's soles are level and on the ground
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_kinematics(m, d)
    for foot in G1.feet:
        g = m.geom(foot).id
        assert d.geom_xpos[g, 2] - m.geom_size[g, 2] == pytest.approx(0.0, abs=1e-4)
        assert d.geom_xmat[g].reshape(3, 3)[2, 2] == pytest.approx(1.0, abs=1e-6)


def test_only_the_biped_self_collisions():
    """Robot geoms meet the floor, and each other only foot-foot and shin-shin."""
    m = prepare(G1).compile()
    floor = m.geom("floor").id
    robot = [g for g in range(m.ngeom) if g != floor]
    for a in robot:
        for b in robot:
            assert not (m.geom_contype[a] & m.geom_conaffinity[b])
    pairs = {frozenset(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g)
                       for g in (m.pair_geom1[i], m.pair_geom2[i])) for i in range(m.npair)}
    assert pairs == {frozenset({"left_foot", "right_foot"}),
                     frozenset({"left_shin", "right_shin"})}
    # the feet stepping onto each other collide: a pair that did nothing would not
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    left = m.joint("left_hip_roll_joint").qposadr[0]
    d.qpos[left] = -0.26  # the left leg swung in, under the body
    d.qpos[m.joint("right_hip_roll_joint").qposadr[0]] = 0.26
    mujoco.mj_forward(m, d)
    feet = {m.geom("left_foot").id, m.geom("right_foot").id}
    shins = {m.geom("left_shin").id, m.geom("right_shin").id}
    touching = [{int(c.geom1), int(c.geom2)} for c in d.contact[:d.ncon]]
    assert feet in touching or shins in touching


def test_stands_for_2_seconds_with_zero_actions():
    env = make(4)
    env.reset()
    start = env.sim.qpos[:, :2].clone()
    ended = torch.zeros(4, dtype=torch.bool)
    for _ in range(100):  # 2 s at 50 Hz
        res = env.step(torch.zeros(4, 12))
        ended |= res.terminated | res.truncated
    assert not ended.any()
    assert ((env.sim.qpos[:, :2] - start).norm(dim=-1) < 0.02).all()  # base drift < 2 cm
    tilt = torch.rad2deg(torch.acos(env.sim.sensor("upvector")[:, 2].clamp(max=1.0)))
    assert (tilt < 5.0).all()
    feet = torch.cat([env.sim.sensor(f"{f}_contact") for f in G1.feet], 1)
    assert (feet > 50).all()  # both feet carry weight


def test_falls_end_the_episode():
    """Low pelvis, a tilt past 60 degrees, and the torso on the ground each end it."""
    env = make(3)
    env.reset()
    sim, task = env.sim, env.task
    q, v = sim.qpos.clone(), torch.zeros_like(sim.qvel)
    q[1, 2] = 0.35  # below min_base_height 0.4 (the legs sink into the floor)
    q[2, 2], q[2, 3:7] = 0.2, torch.tensor([math.cos(0.75), 0.0, math.sin(0.75), 0.0])
    sim.reset(torch.ones(3, dtype=torch.bool), q, v)
    assert task.terminated(sim).tolist() == [False, True, True]


def test_gait_clock_on_the_env_and_on_the_robot():
    """The policy's clock term is [sin, cos](2 pi k dt / period) after k steps of an
    episode, on the env (the task's counter) and on the robot (ObservationBuilder.time)."""
    env = make(2)
    obs = env.reset()
    layout = {s.term.name: s for s in env.policy_layout.slots}
    slot = layout["gait_clock"]
    newest = env.obs_dim - env.frame_dim  # the history's frames, oldest first
    cols = slice(newest + slot.start, newest + slot.start + slot.size)
    period, dt = env.task.config.gait_period, env.control_dt
    contract = {"observation": env.policy_layout.to_json(), "obs_dim": env.obs_dim,
                "command_dim": 3, "action_dim": 12}
    builder = ObservationBuilder(contract, env.sim.model)
    term = next(t for t in contract["observation"] if t["name"] == "gait_clock")
    for k in range(30):
        want = [math.sin(2 * math.pi * k * dt / period), math.cos(2 * math.pi * k * dt / period)]
        assert np.allclose(obs.policy[:, cols].numpy(), [want, want], atol=1e-5), k
        builder.time = k * dt
        assert builder.raw(term, None).tolist() == pytest.approx(want, abs=1e-9)
        obs = env.step(torch.zeros(2, 12)).obs
    # a reset restarts an env's clock
    env.task.on_reset(env.sim, torch.tensor([True, False]), env.gen)
    assert env.task.clock_seconds().tolist() == pytest.approx([0.0, 30 * dt])


def test_biped_terms_on_hand_set_states():
    """Robot held 5 cm up (feet in the air) at clock phase 0.6, and standing at home. Foot
    heights come from MuJoCo's own kinematics; the clock's arch is checked by what it must
    be (0 in stance, swing_height mid-swing, symmetric), not by its formula."""
    env = make(2)
    env.reset()
    sim, task, c = env.sim, env.task, env.task.config
    q, v = sim.qpos.clone(), torch.zeros_like(sim.qvel)
    q[0, 2] += 0.05  # env 0 in the air
    hip_roll = JOINTS.index("left_hip_roll_joint")
    q[1, 7 + hip_roll] = 0.1  # env 1 standing, one hip rolled by 0.1 rad,
    q[1, 2] -= 0.002  # its soles 2 mm into the floor: the touch sensors read its weight
    sim.reset(torch.ones(2, dtype=torch.bool), q, v)
    clock = task.body.term(GaitClock)
    cmd = task.body.term(VelocityCommand)
    clock.steps.fill_(round(0.6 * c.gait_period / env.control_dt) - 1)  # phase 0.6 after +1
    task.pre_step(sim, env.gen)
    cmd.seen.copy_(torch.tensor([[0.5, 0.0, 0.0]] * 2))
    step = Step(task.body, torch.zeros(2, 12), cmd.seen)
    # phase 0.6: the left foot should swing (0.6 > 0.55), the right stand (0.1)
    assert clock.stance_expected(step).tolist() == [[False, True]] * 2
    assert gait_contact(step).tolist() == pytest.approx([1.0, 1.0])  # one of two matches
    m, d = sim.model, mujoco.MjData(sim.model)  # each foot's height, by MuJoCo itself
    feet = [m.geom(f).id for f in G1.feet]
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_kinematics(m, d)
    home = d.geom_xpos[feet, 2].copy()
    heights = []
    for env_i in (0, 1):
        d.qpos[:] = q[env_i].double().numpy()
        mujoco.mj_kinematics(m, d)
        heights.append(d.geom_xpos[feet, 2] - home)
    up = heights[0]
    assert swing_height(step)[0] == pytest.approx(((up - c.swing_height) ** 2).sum(), abs=2e-5)
    assert swing_height(step)[1] == 0.0  # no foot in the air
    # the arch: 0 in stance, swing_height at mid-swing, rising and falling alike
    cycle, swing = (round(x / env.control_dt) for x in (c.gait_period,
                                                         c.gait_period * (1 - c.stance_share)))
    assert (cycle, swing) == (40, 18)  # the steps below: stance, and 3 before/at/after mid
    arch = []
    for k in (12, cycle - swing // 2 - 3, cycle - swing // 2, cycle - swing // 2 + 3):
        clock.steps.fill_(k)
        arch.append(clock.swing_target(step)[0, 0].item())  # the left foot's offset is 0
    stance, rising, mid, falling = arch
    assert stance == 0.0 and mid == pytest.approx(c.swing_height, rel=1e-4)
    assert 0 < rising < mid and rising == pytest.approx(falling, rel=1e-3)
    # the kernel: exp(-(summed squared miss) / std^2), 1 on target; standing, every target
    # is 0, so the miss is the feet's heights themselves
    cmd.seen.zero_()
    assert clock.stance_expected(step).all()  # standing: both feet down, whatever the clock
    for env_i in (0, 1):
        miss = (heights[env_i] ** 2).sum()
        assert feet_phase(step)[env_i] == pytest.approx(
            math.exp(-miss / c.feet_phase_std ** 2), rel=2e-3), env_i
    # 5 cm up vs on the floor (the registered kernel is 10 cm wide: exp(-0.5) for env 0)
    assert feet_phase(step)[0] < 0.7 < 0.99 < feet_phase(step)[1]
    assert task.body.term(Deviation)(step).tolist() == pytest.approx([0.0, 0.01], abs=1e-6)
    assert base_height(step)[0] == pytest.approx(0.05 ** 2, rel=1e-3)
    assert base_height(step)[1] == pytest.approx(0.002 ** 2, abs=1e-7)
    assert task.body.home_height == pytest.approx(0.71867)
    assert joint_limits(step).tolist() == [0.0, 0.0]  # home is well inside the ranges


def test_mirror_is_the_same_gait_half_a_cycle_later():
    """obs(mirror(state), clock + period / 2) == mirror(obs(state, clock)), policy obs
    exact; the state is mirrored here by the reflection y -> -y and the joints by name."""
    from test_mirror import _check, _walked

    env = make(4, obs_history=1)  # env.observe() is one frame; the history's maps: below
    _walked(env, steps=10)
    half = round(env.task.config.gait_period / 2 / env.control_dt)
    observe = env.observe

    def later():  # the mirrored state's observation, half a cycle later on the clock
        env.task.body.term(GaitClock).steps += half
        try:
            return observe()
        finally:
            env.task.body.term(GaitClock).steps -= half
    calls = iter([observe, later])
    env.observe = lambda *a: next(calls)(*a)
    policy, _ = _check(env, G1.mirror)
    assert policy < 1e-5


def test_mirror_of_a_history_mirrors_each_frame():
    """g1-flat registers a 4-frame history with symmetry augmentation: the policy's mirror
    map on the stacked frames is the one-frame map applied to each frame in its place."""
    one, four = make(1, obs_history=1), make(1)
    assert four.obs_dim == 4 * one.obs_dim
    frame, stacked = one.mirrors().policy, four.mirrors().policy
    x = torch.randn(3, four.obs_dim, generator=torch.Generator().manual_seed(0))
    want = torch.cat([frame(f) for f in x.split(one.obs_dim, dim=1)], dim=1)
    assert torch.equal(stacked(x), want)
    assert not torch.equal(stacked(x), x)  # a map that moves something


# ------------------------------------------------------------------------- gait metrics

def _synthetic_gait(period: int, stance: int, offset: int, steps: int, lift: float,
                    creep: float):
    """Two feet: foot i is down for `stance` of every `period` steps, foot 1 `offset` steps
    behind foot 0; a swing rises as a sine arch of height `lift`; a foot creeps `creep` m
    forward per stance step (so a stance of S steps slips (S - 1) * creep)."""
    contact = torch.zeros(steps, 2, dtype=torch.bool)
    pos = torch.zeros(steps, 2, 3)
    for i, shift in enumerate((0, offset)):
        x = 0.0
        for t in range(steps):
            k = (t - shift) % period
            down = k < stance
            contact[t, i] = down
            if down:
                x += creep if k > 0 else 0.0
                pos[t, i, 2] = 0.0
            else:
                u = (k - stance + 1) / (period - stance + 1)
                pos[t, i, 2] = lift * math.sin(math.pi * u)
                x += 0.02  # the swing carries it forward
            pos[t, i, 0] = x
    return contact, pos


@pytest.mark.parametrize("offset", [20, 10])
def test_gait_metrics_on_a_synthetic_gait(offset):
    period, stance, steps = 40, 22, 400
    contact, pos = _synthetic_gait(period, stance, offset, steps, lift=0.07, creep=0.001)
    g = GaitTracker(1, ("a", "b"), dt=0.02, device=torch.device("cpu"))
    g.reset(torch.ones(1, dtype=torch.bool))
    rows = [g.update(contact[t][None], pos[t][None], torch.tensor([0.5]))
            for t in range(steps)]
    mean = {k: float(np.nanmean([r[k][0].item() for r in rows])) for k in rows[0]}
    assert mean["gait/duty/a"] == pytest.approx(stance / period, abs=0.01)
    assert mean["gait/duty/b"] == pytest.approx(stance / period, abs=0.01)
    assert mean["gait/phase_offset"] == pytest.approx(offset / period, abs=1e-6)
    # both feet are up together only where their swings overlap
    up = (~contact).all(-1).float().mean().item()
    # the debounced contact state (settle_steps 2) lags the raw one by one step
    assert mean["gait/flight"] == pytest.approx(up, abs=1.0 / steps + 1e-6)
    assert (mean["gait/flight"] == 0.0) == (offset == 20)
    peak = max(0.07 * math.sin(math.pi * (j + 1) / (period - stance + 1))
               for j in range(period - stance))
    assert mean["gait/swing_height"] == pytest.approx(peak, abs=1e-6)
    assert mean["gait/stance_slip"] == pytest.approx((stance - 1) * 0.001, abs=1e-6)
    # standing commands count nothing
    g.reset(torch.ones(1, dtype=torch.bool))
    still = g.update(contact[0][None], pos[0][None], torch.tensor([0.1]))
    assert all(math.isnan(v[0].item()) for v in still.values())


def _means(contact, pos, **settle) -> dict[str, float]:
    """Metric means over a gait, by a tracker with its default debounce unless `settle`."""
    g = GaitTracker(1, ("a", "b"), dt=0.02, device=torch.device("cpu"), **settle)
    g.reset(torch.ones(1, dtype=torch.bool))
    rows = [g.update(contact[t][None], pos[t][None], torch.tensor([0.5]))
            for t in range(len(contact))]
    return {k: float(np.nanmean([r[k][0].item() for r in rows])) for k in rows[0]}


def test_one_step_contact_blips_are_neither_swings_nor_stances():
    """The synthetic gait with a one-step lift in the middle of every stance of foot 0 and
    a one-step touch in the middle of every swing of foot 1: the debounced metrics are the
    clean gait's, to the bit. The bugs: blips counted as steps (swing heights of a few mm,
    cycles cut short: what counting them raw does, checked too), a settled change dated
    at its acceptance instead of its first step (the phase offset and the swing heights
    move)."""
    period, stance, offset, steps = 40, 22, 20, 400
    contact, pos = _synthetic_gait(period, stance, offset, steps, lift=0.07, creep=0.001)
    blips = contact.clone()
    t = torch.arange(steps)
    blips[(t % period) == stance // 2, 0] = False  # foot 0: mid-stance
    blips[((t - offset) % period) == stance + 9, 1] = True  # foot 1: mid-swing
    clean = _means(contact, pos)
    assert _means(blips, pos) == clean
    # a blip on an episode's second step: the first step's contacts differ from the last
    # episode's (a new tracker's: none down), which must start no count toward settling
    early = contact.clone()
    assert early[:3, 0].all()  # foot 0 stands through the first steps
    early[1, 0] = False
    assert _means(early, pos) == clean
    raw = _means(blips, pos, settle_steps=1)
    assert raw["gait/swing_height"] < 0.8 * clean["gait/swing_height"]
    assert abs(raw["gait/phase_offset"] - clean["gait/phase_offset"]) > 0.02


def test_sim2sim_clock_follows_the_episode(tmp_path, monkeypatch):
    """Through an export, the plain-MuJoCo runner's clock term at control step k of an
    episode is [sin, cos](2 pi k dt / period), restarting with each episode: sim2sim
    advancing ObservationBuilder.time before the observation (off by one) or not at all
    fails here. Also eval and sim2sim both report the gait metrics."""
    from trot.agents.config import PPOConfig
    from trot.agents.evaluate import evaluate
    from trot.agents.learners import start
    from trot.agents.train_config import TrainConfig
    from trot.export.onnx import export_run
    from trot.export.sim2sim import PlainRunner, run_sim2sim

    monkeypatch.chdir(tmp_path)
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(16,), critic_hidden=(16,),
                                rollout_steps=4, minibatches=1, epochs=1)
    env_cfg = dataclasses.replace(get_task("g1-flat").config, episode_seconds=1.0)
    cfg = TrainConfig(task="g1-flat", num_envs=8, max_env_steps=32, agent=agent,
                      env=env_cfg, run_dir=str(tmp_path / "run"))
    trainer, run_dir = start(cfg)
    train(trainer, run_dir, quiet=True)
    export_run(run_dir, quiet=True)
    r = PlainRunner(run_dir)
    term = next(t for t in r.policy.contract.observation if t.name == "gait_clock")
    cols = slice(term.start, term.start + term.size)
    period, dt = term.source["period"], r.sim.control_dt
    seen = []
    r.policy.act = lambda obs: (seen.append(obs[cols].copy()), np.zeros(12))[1]
    gen = torch.Generator().manual_seed(0)
    for _ in range(2):  # two episodes: the clock restarts
        qpos, qvel = r.task.initial_state(r.sim, gen)
        r.start(qpos[0].double().numpy(), qvel[0].double().numpy(), gen)
        for _ in range(7):
            r.step(gen)
    want = [[math.sin(2 * math.pi * k * dt / period), math.cos(2 * math.pi * k * dt / period)]
            for k in range(7)] * 2
    assert np.allclose(seen, want, atol=1e-6)
    gait = {"gait/duty/left_foot", "gait/duty/right_foot", "gait/flight",
            "gait/swing_height", "gait/stance_slip", "gait/phase_offset"}
    for out in (evaluate(run_dir, episodes=4), run_sim2sim(run_dir, episodes=2)):
        assert gait <= set(out), sorted(out)
        assert 0.0 <= out["gait/duty/left_foot"] <= 1.0
