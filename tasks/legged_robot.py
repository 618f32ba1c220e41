"""A legged robot as data: `LeggedRobot` names what the velocity-tracking task
(tasks/legged.py) needs in the robot's MJCF, and `prepare` edits the MjSpec to provide it.

The MJCF needs nothing trot-specific. `prepare` adds, by MjSpec edits: a floor (where the
model has no plane), the IMU and base sites, and the sensors the task reads: gyro,
accelerometer, orientation and up-vector at the IMU; base velocity and position; joint
position, velocity and actuator torque per policy joint; per foot a touch sensor and its
world position and velocity; a touch sensor per colliding geom of the contact bodies. A
touch sensor sits on a site that encloses its geom (TOUCH_MARGIN).

PD gains: the MJCF's position actuators are used as they are, unless the description sets
`kp`/`kd`, which then win for every policy joint (and a joint without an actuator gets a
position actuator, which needs them). Actuators are put in policy order, so an action's
index is its actuator's. The exported policy.json carries the gains the sim used.

The mirror's signs are checked against the model (`check_mirror`, run by `prepare` for every
robot a task builds): symmetry augmentation trains on mirrored transitions, and a wrong sign
there made wrong mirror images, silently.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from trot.tasks.robots import load_robot

MIRROR_ANCHOR_TOL = 0.02
"""m a joint's anchor may sit from its mirror joint's reflected anchor (home pose, base
frame): the shipped models' left and right differ by millimetres, a wrong pair by decimetres"""
MIRROR_AXIS_TOL = 1e-3
"""1 - |cos| accepted between a mirror joint's axis and the reflected axis (about 2.6 deg):
beyond it the axes are neither parallel nor antiparallel and the sign has no clear answer"""
_FLIP = np.array([1.0, -1.0, 1.0])  # reflection through the base's x-z plane: y -> -y

TOUCH_MARGIN = 0.006
"""m added to a geom's radius / half-sizes for the touch site around it: contact points lie
on or just inside the geom, so they fall in the site; other geoms' contacts do not"""

_OBJ = mujoco.mjtObj
_SENS = mujoco.mjtSensor
# Copied when actuators are put in policy order (every setting of an actuator except its
# identity: id, signature; the name moves over once the original is deleted).
_ACTUATOR_FIELDS = ("target", "trntype", "gaintype", "gainprm", "biastype", "biasprm",
                    "dyntype", "dynprm", "ctrllimited", "ctrlrange", "forcelimited",
                    "forcerange", "actlimited", "actrange", "gear", "group", "armature",
                    "damping", "actearly", "inheritrange", "lengthrange", "cranklength",
                    "refsite", "slidersite", "classname")


@dataclass(frozen=True)
class LeggedRobot:
    """Everything the legged task needs to know about a robot (names are the MJCF's)."""

    mjcf: str | os.PathLike
    """an MJCF path, a shipped asset name ("go1") or a Menagerie folder (tasks/robots.py)"""
    joints: tuple[str, ...]
    """actuated joints in policy order (observation and action order)"""
    feet: tuple[str, ...]
    """foot geoms, in the order the task reports them (air time, contact forces)"""
    base: str
    """the floating base body (its free joint is the root)"""
    terminate_contacts: tuple[str, ...] = ()
    """bodies whose ground contact ends an episode (a fall)"""
    penalize_contacts: tuple[str, ...] = ()
    """bodies whose ground contact is penalized (undesired_contacts)"""
    home: str = "home"
    """keyframe: the standing pose, the action offset and the start state"""
    imu_pos: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """IMU position in the base body's frame (m)"""
    kp: float | None = None
    """position gain for every policy joint (None: the MJCF's actuators')"""
    kd: float | None = None
    """velocity gain for every policy joint (None: the MJCF's actuators')"""
    mirror: tuple[tuple[str, str, float], ...] = ()
    """left-right mirror: (joint, its mirror joint, sign) pairs covering every policy joint
    once; a joint on the symmetry plane pairs with itself"""
    config: tuple[tuple[str, Any], ...] = ()
    """removed: a description holds the robot's facts only (a non-empty value is refused);
    task settings are the task declaration's `changes` (docs/tasks.md)"""

    def __post_init__(self) -> None:
        """Check the description's own types where it is written (nothing is changed)."""
        _check_fields(self)

    def mirror_map(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """(perm, signs) over policy joints: mirrored[:, i] = signs[i] * joints[:, perm[i]]."""
        index = {j: i for i, j in enumerate(self.joints)}
        perm, signs = [None] * len(self.joints), [0.0] * len(self.joints)
        for a, b, sign in self.mirror:
            for x, y in ((a, b), (b, a)):
                if x not in index or y not in index:
                    raise ValueError(f"mirror pair ({a}, {b}) names a joint that is not a "
                                     f"policy joint; policy joints: {', '.join(self.joints)}")
                if perm[index[x]] not in (None, index[y]):
                    raise ValueError(f"mirror maps joint {x} twice")
                if sign not in (1, -1):
                    raise ValueError(f"mirror pair ({a}, {b}) has sign {sign!r}; accepted: "
                                     "1 (same direction) or -1 (reversed)")
                perm[index[x]], signs[index[x]] = index[y], float(sign)
        missing = [j for j, p in zip(self.joints, perm) if p is None]
        if missing:
            raise ValueError(f"mirror leaves joints {missing} unmapped")
        return tuple(perm), tuple(signs)


def _names(items) -> list[str]:
    return [x.name for x in items if x.name]


def _require(kind: str, wanted: tuple[str, ...], have: list[str]) -> None:
    missing = [w for w in wanted if w not in have]
    if missing:
        raise ValueError(f"the robot description names {kind} {missing} that the model lacks; "
                         f"the model's {kind}: {', '.join(have) or '(none)'}")


def _colliding(g: mujoco.MjsGeom) -> bool:
    return bool(g.contype or g.conaffinity)


def _check_fields(robot: LeggedRobot) -> None:
    """The description's own types: the mistakes a dataclass does not catch."""
    for f in ("joints", "feet", "terminate_contacts", "penalize_contacts"):
        v = getattr(robot, f)
        if isinstance(v, str) or not all(isinstance(x, str) for x in v):
            raise ValueError(f"LeggedRobot.{f} must be a tuple of names, got {v!r}"
                             + (f" (write ({v!r},))" if isinstance(v, str) else ""))
        twice = sorted({x for x in v if list(v).count(x) > 1})
        if twice:
            raise ValueError(f"LeggedRobot.{f} names {twice} more than once")
    if len(robot.imu_pos) != 3:
        raise ValueError(f"LeggedRobot.imu_pos must be 3 numbers (x, y, z in the base "
                         f"frame, m), got {robot.imu_pos!r}")
    if robot.config:
        raise ValueError("LeggedRobot.config was removed: a robot description holds the robot's "
                         "facts only. Put task settings (ranges, action_scale, weights) in the "
                         "task's declaration, Velocity(..., changes=...) (docs/tasks.md, "
                         f"'Migrating'); got {robot.config!r}")
    for f in ("kp", "kd"):
        v = getattr(robot, f)
        if v is not None and not (isinstance(v, (int, float)) and v >= 0):
            raise ValueError(f"LeggedRobot.{f} must be a number >= 0 or None, got {v!r}")


def check(robot: LeggedRobot, spec: mujoco.MjSpec) -> None:
    """Fail at build time, naming the missing piece and what the model has."""
    _require("joints", robot.joints, _names(spec.joints))
    _require("bodies", (robot.base, *robot.terminate_contacts, *robot.penalize_contacts),
             _names(spec.bodies))
    _require("geoms", robot.feet, _names(spec.geoms))
    _require("keyframes", (robot.home,), _names(spec.keys))
    if not any(j.type == mujoco.mjtJoint.mjJNT_FREE for j in spec.body(robot.base).joints):
        raise ValueError(f"base body {robot.base!r} has no free joint; a legged robot's base "
                         "must float")
    for b in (*robot.terminate_contacts, *robot.penalize_contacts):
        if not any(_colliding(g) for g in spec.body(b).geoms):
            raise ValueError(f"contact body {b!r} has no colliding geom (contype/conaffinity "
                             "0): its ground contact could never be seen")
    if robot.mirror:
        robot.mirror_map()
        check_mirror(robot, spec.copy().compile())


def _base_frame(robot: LeggedRobot, m: mujoco.MjModel) -> mujoco.MjData:
    """The model at the home pose with the base level (the reflection is about the base's
    x-z plane, so a tilted home would tilt it)."""
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, mujoco.mj_name2id(m, _OBJ.mjOBJ_KEY, robot.home))
    base = mujoco.mj_name2id(m, _OBJ.mjOBJ_BODY, robot.base)
    adr = m.jnt_qposadr[m.body_jntadr[base]]  # its free joint (check() saw one)
    d.qpos[adr + 3:adr + 7] = [1.0, 0.0, 0.0, 0.0]
    mujoco.mj_kinematics(m, d)
    return d


def mirror_signs(robot: LeggedRobot, m: mujoco.MjModel) -> tuple[float, ...]:
    """The sign each pair of `robot.mirror` must have, from the model's joint axes at the
    home pose with the base level, in the base frame: a hinge's axis reflects as an axial
    vector, M a = (-a_x, a_y, -a_z), a slide's as a polar one, (a_x, -a_y, a_z); the sign is
    +1 where the mirror joint's axis is M a, -1 where it is -M a. A pair that is not a mirror
    image (anchors apart, axes not parallel, other joint types) has no sign: refused."""
    d = _base_frame(robot, m)
    base = mujoco.mj_name2id(m, _OBJ.mjOBJ_BODY, robot.base)
    rot, origin = d.xmat[base].reshape(3, 3), d.xpos[base]
    kinds = {mujoco.mjtJoint.mjJNT_HINGE: -1.0, mujoco.mjtJoint.mjJNT_SLIDE: 1.0}
    out = []
    for a, b, _ in robot.mirror:
        ids = [mujoco.mj_name2id(m, _OBJ.mjOBJ_JOINT, x) for x in (a, b)]
        types = [mujoco.mjtJoint(int(m.jnt_type[i])) for i in ids]
        if any(t not in kinds for t in types) or types[0] != types[1]:
            kind = [t.name.removeprefix("mjJNT_").lower() for t in types]
            raise ValueError(f"mirror pair ({a}, {b}) joins a {kind[0]} and a {kind[1]} "
                             "joint; accepted: hinge with hinge, slide with slide")
        pa, pb = (rot.T @ (d.xanchor[i] - origin) for i in ids)
        xa, xb = (rot.T @ d.xaxis[i] for i in ids)
        apart = float(np.linalg.norm(pb - _FLIP * pa))
        if apart > MIRROR_ANCHOR_TOL:
            raise ValueError(
                f"mirror pair ({a}, {b}): the anchors are not mirror images: {a} at "
                f"{_vec(pa)} reflects to {_vec(_FLIP * pa)}, {b} is at {_vec(pb)}, "
                f"{apart * 100:.1f} cm apart (accepted: {MIRROR_ANCHOR_TOL * 100:g} cm; base "
                f"frame at home pose {robot.home!r})")
        reflected = kinds[types[0]] * _FLIP * xa
        cos = float(np.dot(xb, reflected))
        if 1.0 - abs(cos) > MIRROR_AXIS_TOL:
            raise ValueError(
                f"mirror pair ({a}, {b}): the axes are neither parallel nor antiparallel, so "
                f"the sign has no clear answer: {a}'s axis {_vec(xa)} reflects to "
                f"{_vec(reflected)}, {b}'s axis is {_vec(xb)} ({_degrees(cos):.1f} deg from "
                "either; base frame at home pose)")
        out.append(1.0 if cos > 0 else -1.0)
    return tuple(out)


def check_mirror(robot: LeggedRobot, m: mujoco.MjModel) -> None:
    """Refuse declared signs the axes contradict: augmentation would otherwise train on
    wrong mirror images, silently."""
    wrong = [f"pair ({a}, {b}) declares sign {sign:+g}, its axes imply {want:+g}"
             for (a, b, sign), want in zip(robot.mirror, mirror_signs(robot, m))
             if sign != want]
    if wrong:
        raise ValueError(f"the mirror of {Path(robot.mjcf).name} contradicts its joint axes: "
                         f"{'; '.join(wrong)}. Declare the implied signs (a hinge about x or z "
                         "flips, -1; one about y keeps, +1; axes read at home pose "
                         f"{robot.home!r}, base level, in the base frame)")


def _vec(v: np.ndarray) -> str:
    return "(" + ", ".join(f"{round(float(x), 3) + 0.0:.3f}" for x in v) + ")"


def _degrees(cos: float) -> float:
    """The angle between two axes, taken as lines (0..90 deg)."""
    return math.degrees(math.acos(min(1.0, abs(cos))))


def prepare(robot: LeggedRobot) -> mujoco.MjSpec:
    """The robot's MjSpec with the floor, sites, sensors and actuators the task reads."""
    spec = load_robot(robot.mjcf)
    check(robot, spec)
    _add_floor(spec)
    base = spec.body(robot.base)
    base.add_site(name="base", pos=[0.0, 0.0, 0.0])
    base.add_site(name="imu", pos=list(robot.imu_pos))
    _order_actuators(robot, spec)
    _add_sensors(robot, spec)
    return spec


def _add_floor(spec: mujoco.MjSpec) -> None:
    if any(g.type == mujoco.mjtGeom.mjGEOM_PLANE for g in spec.worldbody.geoms):
        return  # the model brings its own ground
    spec.worldbody.add_light(pos=[0, 0, 4], dir=[0, 0, -1],
                             type=mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)
    spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05],
                            contype=1, conaffinity=0, priority=1, friction=[1.0, 0.005, 1e-4],
                            rgba=[0.35, 0.4, 0.45, 1])


def floor_geom(spec: mujoco.MjSpec) -> str:
    """The name of the ground plane (the first plane of the world body)."""
    g = next(g for g in spec.worldbody.geoms if g.type == mujoco.mjtGeom.mjGEOM_PLANE)
    if not g.name:
        g.name = "floor"
    return g.name


def _order_actuators(robot: LeggedRobot, spec: mujoco.MjSpec) -> None:
    """One position actuator per policy joint, in policy order, with the description's
    gains where it sets them."""
    on = {a.target: a for a in spec.actuators if a.trntype == mujoco.mjtTrn.mjTRN_JOINT}
    before = [a.target for a in spec.actuators]
    if before != list(robot.joints):
        _reorder_key_ctrl(spec, before, robot.joints)
        for j in robot.joints:  # re-add in policy order, then drop the originals
            old = on.get(j)
            if old is None:
                if robot.kp is None or robot.kd is None:
                    raise ValueError(f"joint {j!r} has no actuator in the MJCF; give kp and kd "
                                     "in the robot description to add position actuators")
                new = spec.add_actuator(name=j, target=j, trntype=mujoco.mjtTrn.mjTRN_JOINT)
                new.set_to_position(kp=robot.kp, kv=robot.kd)
                new.inheritrange = 1.0  # ctrlrange = the joint's range
                continue
            new = spec.add_actuator()
            for f in _ACTUATOR_FIELDS:
                setattr(new, f, getattr(old, f))
            name = old.name
            spec.delete(old)
            new.name = name  # once the original's name is free
        for a in list(spec.actuators)[:len(spec.actuators) - len(robot.joints)]:
            spec.delete(a)  # actuators on joints the policy does not drive
    if robot.kp is not None or robot.kd is not None:
        for a in spec.actuators:
            if a.biastype != mujoco.mjtBias.mjBIAS_AFFINE:  # gains would scale a torque
                raise ValueError(
                    f"actuator {a.name or a.target!r} is not a position servo (a <motor>, or "
                    "<general> without an affine bias), so kp and kd cannot make it a PD "
                    "loop; declare <position> actuators in the MJCF, or leave kp and kd None "
                    "to drive the MJCF's actuators as they are")
            kp = a.gainprm[0] if robot.kp is None else robot.kp
            kd = -a.biasprm[2] if robot.kd is None else robot.kd
            a.gainprm[0], a.biasprm[1], a.biasprm[2] = kp, -kp, -kd


def _reorder_key_ctrl(spec: mujoco.MjSpec, before: list[str], joints: tuple[str, ...]
                      ) -> None:
    """Keyframes' ctrl [nu] follow the actuators into policy order (0 for an added one; the
    task sets ctrl from the action anyway); without this a subset of the MJCF's actuated
    joints failed to compile on the keyframe's ctrl size."""
    for key in spec.keys:
        ctrl = list(key.ctrl)
        if len(ctrl) == len(before):
            key.ctrl = [ctrl[before.index(j)] if j in before else 0.0 for j in joints]


def _touch_site(body: mujoco.MjsBody, g: mujoco.MjsGeom, name: str) -> None:
    size = [s + TOUCH_MARGIN if s > 0 else 0.0 for s in g.size]
    if g.type in (mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_CYLINDER):
        size[1] = g.size[1]  # the half-length: the end caps already grew with the radius
    site = body.add_site(name=name, type=g.type, size=size, pos=list(g.pos),
                         quat=list(g.quat), group=4)
    if not math.isnan(g.fromto[0]):  # a geom placed by fromto
        site.fromto = list(g.fromto)


def contact_sensors(robot: LeggedRobot, spec: mujoco.MjSpec, body: str) -> list[str]:
    """Touch sensor names for a contact body, one per colliding geom."""
    geoms = [g for g in spec.body(body).geoms if _colliding(g)]
    return [f"{body}_contact" if len(geoms) == 1 else f"{body}_contact_{i}"
            for i in range(len(geoms))]


def _add_sensors(robot: LeggedRobot, spec: mujoco.MjSpec) -> None:
    def sensor(name: str, kind: mujoco.mjtSensor, objtype: mujoco.mjtObj, obj: str,
               **kw) -> None:
        spec.add_sensor(name=name, type=kind, objtype=objtype, objname=obj, **kw)

    sensor("gyro", _SENS.mjSENS_GYRO, _OBJ.mjOBJ_SITE, "imu")
    sensor("accelerometer", _SENS.mjSENS_ACCELEROMETER, _OBJ.mjOBJ_SITE, "imu")
    sensor("orientation", _SENS.mjSENS_FRAMEQUAT, _OBJ.mjOBJ_SITE, "imu")
    # the world's z axis seen from the base: minus the projected gravity direction
    sensor("upvector", _SENS.mjSENS_FRAMEZAXIS, _OBJ.mjOBJ_XBODY, "world",
           reftype=_OBJ.mjOBJ_XBODY, refname=robot.base)
    for suffix, kind in (("pos", _SENS.mjSENS_JOINTPOS), ("vel", _SENS.mjSENS_JOINTVEL)):
        for j in robot.joints:
            sensor(f"{j}_{suffix}", kind, _OBJ.mjOBJ_JOINT, j)
    for j, a in zip(robot.joints, spec.actuators):  # policy order (see _order_actuators)
        sensor(f"{j}_torque", _SENS.mjSENS_ACTUATORFRC, _OBJ.mjOBJ_ACTUATOR, a.name)
    for foot in robot.feet:
        g = spec.geom(foot)
        _touch_site(g.parent, g, f"{foot}_touch")
        sensor(f"{foot}_contact", _SENS.mjSENS_TOUCH, _OBJ.mjOBJ_SITE, f"{foot}_touch")
    for suffix, kind in (("pos", _SENS.mjSENS_FRAMEPOS), ("vel", _SENS.mjSENS_FRAMELINVEL)):
        for foot in robot.feet:  # world frame: clearance, slip and the gait metrics
            sensor(f"{foot}_{suffix}", kind, _OBJ.mjOBJ_GEOM, foot)
    sensor("base_linvel", _SENS.mjSENS_VELOCIMETER, _OBJ.mjOBJ_SITE, "base")
    sensor("base_pos", _SENS.mjSENS_FRAMEPOS, _OBJ.mjOBJ_SITE, "base")
    for b in (*robot.terminate_contacts, *robot.penalize_contacts):
        body = spec.body(b)
        geoms = [g for g in body.geoms if _colliding(g)]
        for name, g in zip(contact_sensors(robot, spec, b), geoms):
            _touch_site(body, g, f"{name}_site")
            sensor(name, _SENS.mjSENS_TOUCH, _OBJ.mjOBJ_SITE, f"{name}_site")
