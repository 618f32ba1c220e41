"""The generic legged velocity task over robot descriptions (tasks/legged.py,
tasks/legged_robot.py): mirrors checked against the model's geometry, an external MJCF with other names, bad descriptions,
the runner's joint order."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from trot.agents.loop import save
from trot.tasks.g1 import G1
from trot.tasks.go1 import GO1
from trot.tasks.go2 import GO2
from trot.tasks.legged_config import LeggedConfig
from trot.tasks.locomotion import flat
from trot.tasks.velocity import Velocity
from trot.tasks.legged_robot import LeggedRobot, prepare

DATA = Path(__file__).parent / "data"
EXTERNAL = DATA / "other_quadruped.xml"
LEGS = ("LF", "RF", "LH", "RH")
# the file's own order is LF, RF, LH, RH; the description asks for another one
EXTERNAL_JOINTS = tuple(f"{leg}_{j}" for leg in ("RF", "LF", "RH", "LH")
                        for j in ("HAA", "HFE", "KFE"))


def _external(**changes) -> LeggedRobot:
    return dataclasses.replace(LeggedRobot(
        mjcf=EXTERNAL, joints=EXTERNAL_JOINTS, feet=tuple(f"{leg}_FOOT" for leg in LEGS),
        base="torso", terminate_contacts=("torso",), home="standing",
        mirror=tuple((f"{a}_{j}", f"{b}_{j}", -1.0 if j == "HAA" else 1.0)
                     for a, b in (("LF", "RF"), ("LH", "RH")) for j in ("HAA", "HFE", "KFE"))),
        **changes)


def _task(robot: LeggedRobot) -> Velocity:
    return flat(robot)


@pytest.mark.parametrize("robot", [GO1, GO2, G1, _external()],
                         ids=["go1", "go2", "g1", "external"])
def test_mirror_matches_the_model_geometry(robot):
    """Each joint's mirror sits at its reflected anchor (y -> -y) and its sign follows from
    the axes: reflecting a rotation about a by angle q gives one about M a by -q, so the
    mirror joint's angle is -q where its axis is M a and +q where it is -M a."""
    m = prepare(robot).compile()
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY,
                                                        robot.home))
    d.qpos[3:7] = [1, 0, 0, 0]  # level base: the reflection is about the base's x-z plane
    mujoco.mj_kinematics(m, d)
    flip = np.array([1.0, -1.0, 1.0])
    perm, signs = robot.mirror_map()
    base = d.xpos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, robot.base)]
    for i, j in enumerate(robot.joints):
        a = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j)
        b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, robot.joints[perm[i]])
        # anchors at the home pose differ where the legs' angles do (hip roll); compare the
        # joints' positions in the zero pose of their parent chain: the body frames
        anchor_a = d.xpos[m.jnt_bodyid[a]] - base
        anchor_b = d.xpos[m.jnt_bodyid[b]] - base
        assert np.allclose(anchor_b, flip * anchor_a, atol=0.02), (j, robot.joints[perm[i]])
        axis_a, axis_b = d.xaxis[a], d.xaxis[b]
        dot = float(np.dot(axis_b, flip * axis_a))
        assert abs(abs(dot) - 1.0) < 1e-6  # the mirror's axis is +-M a
        assert signs[i] == -round(dot), f"mirror sign of {j}"
    assert all(perm[p] == i for i, p in enumerate(perm))  # an involution


def test_a_wrong_mirror_is_caught_by_the_geometry_check():
    wrong = dataclasses.replace(GO1, mirror=tuple((a, b, 1.0) for a, b, _ in GO1.mirror))
    with pytest.raises(AssertionError, match="mirror sign of FR_hip"):
        test_mirror_matches_the_model_geometry(wrong)


def test_external_mjcf_with_other_names_and_order_trains_a_step():
    robot = _external()
    cls = _task(robot)
    task = cls(LeggedConfig())
    model = task.build().compile()
    acts = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, model.actuator_trnid[i, 0])
            for i in range(model.nu)]
    assert tuple(acts) == EXTERNAL_JOINTS  # actuators put in the description's order
    src = mujoco.MjModel.from_xml_path(str(EXTERNAL))
    for i, j in enumerate(EXTERNAL_JOINTS):  # each kept its own gains and limits
        k = mujoco.mj_name2id(src, mujoco.mjtObj.mjOBJ_ACTUATOR, j)
        assert np.array_equal(model.actuator_gainprm[i], src.actuator_gainprm[k])
        assert np.array_equal(model.actuator_ctrlrange[i], src.actuator_ctrlrange[k])
    assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, "LF_FOOT_contact") >= 0
    from trot.sim import make_sim
    from trot.tasks.env import Env

    env = Env("external", task, make_sim("cpu", model, 2, task.config.substeps, "cpu"), 0)
    env.reset()
    action = torch.zeros(2, 12)
    action[:, 0] = 1.0  # the first policy joint: RF_HAA
    env.step(action)
    ctrl = env.sim._b.bind("ctrl")[0]
    home = env.task.home_pose()
    assert ctrl[0] == pytest.approx(home[0] + env.task.config.action_scale)
    assert np.allclose(ctrl[1:], home[1:])


@pytest.mark.parametrize("change, message", [
    (dict(joints=("LF_HAA", "LF_HIP")), r"joints \['LF_HIP'\] that the model lacks; the "
                                        r"model's joints: .*LF_HAA"),
    (dict(feet=("LF_FOOT", "LF_TOE")), r"geoms \['LF_TOE'\] .*LF_FOOT"),
    (dict(terminate_contacts=("chassis",)), r"bodies \['chassis'\] .*torso"),
    (dict(home="home"), r"keyframes \['home'\] .*standing"),
    (dict(base="LF_thigh"), r"base body 'LF_thigh' has no free joint"),
    (dict(mirror=(("LF_HAA", "RF_HAA", -1.0),)), r"mirror leaves joints \['RF_HFE'"),
])
def test_bad_descriptions_fail_at_build_naming_what_the_model_has(change, message):
    robot = _external(**change)
    with pytest.raises(ValueError, match=message):
        _task(robot)(LeggedConfig()).build()


def test_runner_maps_the_robots_own_joint_order(tmp_path):
    """Hardware orders motors its own way (Unitree's SDK: FR, FL, RR, RL; go2.xml and the
    policy: FL, FR, RL, RR). The runner permutes per-joint arrays both ways by name."""
    from trot.agents.config import PPOConfig
    from trot.agents.learners import start
    from trot.agents.train_config import TrainConfig
    from trot.export.onnx import export_run
    from trot.export.runner import ContractError, OnnxPolicy

    threads = torch.get_num_threads()
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(16,), critic_hidden=(16,))
    trainer, run = start(TrainConfig(task="go2-flat", num_envs=2, agent=agent,
                                         run_dir=str(tmp_path / "run")))
    save(trainer, run)
    export_run(run, quiet=True)
    torch.set_num_threads(threads)
    sdk = [f"{leg}_{j}_joint" for leg in ("FR", "FL", "RR", "RL")
           for j in ("hip", "thigh", "calf")]
    policy = OnnxPolicy(run, robot_joints=sdk)
    assert policy.policy_joints == list(GO2.joints)
    action = np.linspace(-0.9, 0.9, 12)
    ctrl = policy.ctrl(action)
    robot_ctrl = policy.robot_ctrl(action)
    for k, name in enumerate(sdk):  # the robot's k-th motor gets its own joint's target
        assert robot_ctrl[k] == ctrl[list(GO2.joints).index(name)]
    q_robot = np.arange(12.0)
    q_policy = policy.joints.to_policy(q_robot)
    assert [sdk[int(v)] for v in q_policy] == list(GO2.joints)
    assert np.array_equal(policy.joints.to_robot(q_policy), q_robot)
    with pytest.raises(ContractError, match="not the policy's"):
        OnnxPolicy(run, robot_joints=sdk[:-1] + ["RL_knee_joint"])


@pytest.mark.parametrize("change, message", [
    (dict(joints="LF_HAA"), r"joints must be a tuple of names, got 'LF_HAA' \(write \('LF_HAA',\)\)"),
    (dict(feet=("LF_FOOT", "RF_FOOT", "LF_FOOT")), r"feet names \['LF_FOOT'\] more than once"),
    (dict(imu_pos=(0.0, 0.1)), r"imu_pos must be 3 numbers"),
    (dict(config=(("action_scale", 0.3),)), r"LeggedRobot.config was removed: .* facts only"),
    (dict(kp="80"), r"kp must be a number >= 0 or None, got '80'"),
])
def test_mistyped_descriptions_fail_where_they_are_written(change, message):
    """Each slipped through before: a string of joints iterated as letters, a dict of
    settings (now refused: task settings are the declaration's), a 2-number IMU position, a duplicate
    foot (its contact counted twice)."""
    with pytest.raises(ValueError, match=message):
        _external(**change)


def test_a_mirror_sign_other_than_plus_or_minus_one_is_refused():
    robot = _external(mirror=tuple((f"LF_{j}", f"RF_{j}", 0.5) for j in ("HAA", "HFE", "KFE")))
    with pytest.raises(ValueError, match=r"has sign 0.5; accepted: 1 .* or -1"):
        robot.mirror_map()


def test_kp_kd_on_torque_motors_is_refused(tmp_path):
    """kp/kd overwrite a position servo's gains; on a <motor> they only scaled the torque
    command (no PD loop at all), silently. Now the build names the actuator."""
    xml = EXTERNAL.read_text().replace('<position kp="80" kv="2" forcerange="-40 40"/>',
                                       '<motor ctrlrange="-40 40"/>')
    xml = xml.replace("<position ctrlrange", "<motor ctrlrange").replace("<position name",
                                                                      "<motor name")
    (tmp_path / "motors.xml").write_text(xml)
    robot = _external(mjcf=tmp_path / "motors.xml", kp=40.0, kd=1.0)
    with pytest.raises(ValueError, match=r"actuator 'RF_HAA' is not a position servo"):
        _task(robot)(LeggedConfig()).build()
    plain = _external(mjcf=tmp_path / "motors.xml")  # without kp/kd: the motors as they are
    _task(plain)(LeggedConfig()).build()


def test_a_foot_listed_without_its_mirror_foot_is_named():
    """The mirror maps a touch sensor to the mirror body's site at the same place in its
    list; with RH_FOOT left out of `feet` its body has no site, and the lookup was an
    IndexError deep in the observation mirror. Now a ValueError names both bodies."""
    from trot.sim import make_sim
    from trot.tasks.env import Env

    robot = _external(feet=("LF_FOOT", "RF_FOOT", "LH_FOOT"))
    task = _task(robot)(LeggedConfig())
    model = task.build().compile()
    env = Env("external", task, make_sim("cpu", model, 2, task.config.substeps, "cpu"), 0)
    with pytest.raises(ValueError, match=r"site '\w+' has no mirror: its body 'LH_\w+' has 1 "
                                         r"sites and the mirror body 'RH_\w+' 0"):
        env.mirrors()


def test_a_subset_of_the_actuated_joints_keeps_its_keyframe_controls():
    """The policy drives 9 of the MJCF's 12 actuated joints: the keyframe's ctrl follows
    its actuators into policy order (it kept the MJCF's 12 entries, and compiling failed
    on its size)."""
    robot = _external(joints=EXTERNAL_JOINTS[:9], mirror=())
    model = _task(robot)(LeggedConfig()).build().compile()
    src = mujoco.MjModel.from_xml_path(str(EXTERNAL))
    want = [src.key_ctrl[0, mujoco.mj_name2id(src, mujoco.mjtObj.mjOBJ_ACTUATOR, j)]
            for j in EXTERNAL_JOINTS[:9]]
    assert model.nu == 9 and np.array_equal(model.key_ctrl[0], want)
