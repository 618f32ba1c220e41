"""The generic legged velocity task over robot descriptions (tasks/legged.py,
tasks/legged_robot.py): mirrors checked against the model's geometry at build, an external
MJCF with other names, bad descriptions, the runner's joint order."""

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
from trot.tasks.legged_robot import LeggedRobot, mirror_signs, prepare

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


def _mirror_misses(robot: LeggedRobot, m: mujoco.MjModel, signs, seed: int = 0) -> list[str]:
    """The bodies a mirrored pose does not put at their mirror images, found by MuJoCo's
    forward kinematics alone (no axis rule): the policy joints at q (home +- 0.2..0.5 rad)
    and at q'[i] = signs[i] * q[perm[i]], base level; under q' each policy joint's body
    (origin and centre of mass, base frame) must sit at the reflection y -> -y of its mirror
    body's under q. A wrong sign turns a limb the other way: centimetres off."""
    perm, _ = robot.mirror_map()
    rng = np.random.default_rng(seed)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY,
                                                        robot.home))
    adr = [m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j)]
           for j in robot.joints]
    bodies = [m.jnt_bodyid[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j)]
              for j in robot.joints]
    base = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, robot.base)
    q = d.qpos[adr] + rng.uniform(0.2, 0.5, len(adr)) * rng.choice([-1.0, 1.0], len(adr))
    d.qpos[3:7] = [1, 0, 0, 0]  # level base: the reflection is about the base's x-z plane

    def pose(angles) -> np.ndarray:  # [joints, 2, 3] body origin and COM, base frame
        d.qpos[adr] = angles
        mujoco.mj_kinematics(m, d)
        rel = np.stack([d.xpos[bodies], d.xipos[bodies]], 1) - d.xpos[base]
        return rel @ d.xmat[base].reshape(3, 3)

    here, mirrored = pose(q), pose(np.asarray(signs) * q[list(perm)])
    flip = np.array([1.0, -1.0, 1.0])
    return [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, bodies[i])
            for i in range(len(bodies))
            if np.abs(mirrored[i] - flip * here[perm[i]]).max() > 5e-3]


@pytest.mark.parametrize("robot", [GO1, GO2, G1, _external()],
                         ids=["go1", "go2", "g1", "external"])
def test_mirror_matches_the_model_geometry(robot):
    """The build's check (legged_robot.mirror_signs: the axes' reflection) implies the
    declared signs; the reference, independent of that rule, is the kinematics: the
    declared signs mirror every body of a random pose."""
    m = prepare(robot).compile()  # prepare checks the mirror; here the signs are compared
    assert mirror_signs(robot, m) == tuple(float(sign) for _, _, sign in robot.mirror)
    assert _mirror_misses(robot, m, robot.mirror_map()[1]) == []


def test_a_wrong_mirror_is_refused_at_build_and_missed_by_the_kinematics():
    """GO1 with every sign +1: the build names both hip pairs, and the independent
    kinematic reference sees the hips' children turned the wrong way."""
    wrong = dataclasses.replace(GO1, mirror=tuple((a, b, 1.0) for a, b, _ in GO1.mirror))
    with pytest.raises(ValueError, match=r"pair \(FR_hip, FL_hip\) declares sign \+1, its "
                                         r"axes imply -1; pair \(RR_hip, RL_hip\)"):
        prepare(wrong)
    m = prepare(GO1).compile()
    misses = _mirror_misses(GO1, m, [1.0] * len(GO1.joints))
    assert {"FR_thigh", "FL_thigh", "RR_thigh", "RL_thigh"} <= set(misses)


def test_a_quadruped_with_one_hip_sign_wrong_is_refused_at_build():
    """Issue 73: a wrong sign was accepted, and symmetry augmentation trained on wrong
    mirror images. Now the task's build names the pair, its sign and the axes' sign; the
    shipped robots build with the signs they declare."""
    mirror = tuple((a, b, 1.0 if a == "LH_HAA" else sign) for a, b, sign in _external().mirror)
    with pytest.raises(ValueError, match=r"other_quadruped.xml contradicts its joint axes: "
                                         r"pair \(LH_HAA, RH_HAA\) declares sign \+1, its axes "
                                         r"imply -1\. Declare the implied signs"):
        _task(_external(mirror=mirror))(LeggedConfig()).build()
    for robot in (GO1, GO2, G1):
        _task(robot)(LeggedConfig()).build()


def _edited(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    xml = EXTERNAL.read_text()
    for old, new in edits:
        assert old in xml
        xml = xml.replace(old, new)
    (tmp_path / "edited.xml").write_text(xml)
    return tmp_path / "edited.xml"


# a yaw joint on the symmetry plane (a tail, the torso's last child), mirrored to itself
_TAIL_BODY = ('<body name="tail" pos="-0.32 0 0"><joint name="tail_yaw" axis="0 0 1"/>'
              '<geom size="0.02" mass="0.1"/></body>')
TAIL = (("    </body>\n  </worldbody>", f"      {_TAIL_BODY}\n    </body>\n  </worldbody>"),
        ('-0.6 1.2"\n', '-0.6 1.2 0"\n'), ('-0.6 1.2"/>', '-0.6 1.2 0"/>'),
        ("</actuator>", '<position name="tail_yaw" joint="tail_yaw"/></actuator>'))
_RF_HAA = '<joint name="RF_HAA" class="HAA"/>'
_RF_HIP = '<body name="RF_hip" pos="0.25 -0.1 0">'
# both abductions made slides along x: a direction reflects as a polar vector, x keeps (+1)
SLIDES = tuple((f'<joint name="{leg}_HAA" class="HAA"/>',
                f'<joint name="{leg}_HAA" class="HAA" type="slide" range="-0.1 0.1"/>')
               for leg in ("LF", "RF"))


@pytest.mark.parametrize("edits, mirror, message", [
    (TAIL, (("tail_yaw", "tail_yaw", 1.0),),
     r"pair \(tail_yaw, tail_yaw\) declares sign \+1, its axes imply -1"),
    (((_RF_HAA, _RF_HAA.replace("/>", ' axis="0 0 1"/>')),), (),
     (r"mirror pair \(LF_HAA, RF_HAA\): the axes are neither parallel nor antiparallel, .*"
      r"LF_HAA's axis \(1.000, 0.000, 0.000\) reflects to \(-1.000, 0.000, 0.000\), "
      r"RF_HAA's axis is \(0.000, 0.000, 1.000\) \(90.0 deg")),
    (((_RF_HIP, _RF_HIP.replace("-0.1", "-0.15")),), (),
     (r"mirror pair \(LF_HAA, RF_HAA\): the anchors are not mirror images: LF_HAA at "
      r"\(0.250, 0.100, 0.000\) reflects to \(0.250, -0.100, 0.000\), RF_HAA is at "
      r"\(0.250, -0.150, 0.000\), 5.0 cm apart \(accepted: 2 cm")),
    (((_RF_HAA, _RF_HAA.replace("/>", ' type="slide"/>')),), (),
     (r"mirror pair \(LF_HAA, RF_HAA\) joins a hinge and a slide joint; accepted: hinge "
      r"with hinge, slide with slide")),
    (SLIDES, (), r"pair \(LF_HAA, RF_HAA\) declares sign -1, its axes imply \+1"),
], ids=["self-mirrored-yaw", "axes-not-parallel", "anchors-apart", "hinge-with-slide",
        "slides"])
def test_mirror_pairs_that_are_not_mirror_images_are_refused(tmp_path, edits, mirror,
                                                             message):
    robot = _external(mjcf=_edited(tmp_path, *edits))
    if mirror:
        robot = dataclasses.replace(robot, joints=robot.joints + ("tail_yaw",),
                                    mirror=robot.mirror + mirror)
    with pytest.raises(ValueError, match=message):
        prepare(robot)
    if mirror:  # the sign the axes imply is accepted
        prepare(dataclasses.replace(robot, mirror=robot.mirror[:-1] + (
            ("tail_yaw", "tail_yaw", -1.0),)))


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
