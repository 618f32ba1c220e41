"""Observation terms of the locomotion tasks: each a function of the task (its robot, model
and config) returning an `ObsTerm` (tasks/observation.py), or None where the config leaves
it out. The policy sees only what the robot measures; the critic's privileged terms follow
the policy's, noise-free. Scales are legged_gym's (angular velocity 0.25, joint velocity
0.05); noise half-widths are its noise levels (gravity 0.05, gyro 0.2 rad/s, joint position
0.01 rad, joint velocity 1.5 rad/s) times the scale."""

from __future__ import annotations

import mujoco

from trot.core import heightfield as hf
from trot.tasks.observation import ObsTerm


def projected_gravity(t) -> ObsTerm:
    return ObsTerm("projected_gravity", "sensor", ("upvector",), scale=-1.0, noise=0.05)


def base_ang_vel(t) -> ObsTerm:
    return ObsTerm("base_ang_vel", "sensor", ("gyro",), scale=0.25, noise=0.05)


def joint_pos(t) -> ObsTerm:
    return ObsTerm("joint_pos", "sensor", tuple(f"{j}_pos" for j in t.robot.joints),
                   offset=t.home_pose(), noise=0.01)


def joint_vel(t) -> ObsTerm:
    return ObsTerm("joint_vel", "sensor", tuple(f"{j}_vel" for j in t.robot.joints),
                   scale=0.05, noise=0.075)


def last_action(t) -> ObsTerm:
    return ObsTerm("last_action", "last_action")


def command(t) -> ObsTerm:
    return ObsTerm("command", "command")


def gait_clock(t) -> ObsTerm:
    return ObsTerm("gait_clock", "clock", period=t.config.gait_period)


def _scan(t, perceived: bool) -> ObsTerm:
    """The base's height above each scan point, clipped as legged_gym's, around the home
    height; the policy's is perceived (noise and a per-episode offset)."""
    c = t.config
    p = len(hf.scan_offsets(c.scan_grid))
    return ObsTerm("height_scan", "height_scan", grid=c.scan_grid,
                   offset=(t.home_height(),) * p, clip=(-0.5, 1.5),
                   noise=c.scan_noise * perceived, episode_offset=c.scan_offset * perceived)


def perceived_scan(t) -> ObsTerm | None:
    """The height scan, for the policy with scan_policy (the critic sees it exact)."""
    return _scan(t, True) if t.config.scan_policy else None


# ---------------------------------------------------------------- the critic's
def base_lin_vel(t) -> ObsTerm:
    return ObsTerm("base_lin_vel", "sensor", ("base_linvel",), scale=2.0)


def base_height(t) -> ObsTerm:
    """The base's height: world z on a plane floor."""
    return ObsTerm("base_height", "qpos", start=2, stop=3, scale=1.0)


def base_height_above_terrain(t) -> ObsTerm:
    """The base's height above the terrain under it (a one-point scan)."""
    return ObsTerm("base_height", "height_scan", grid=(0.0, 0.0, 1.0), clip=(-1.0, 2.0))


def foot_forces(t) -> ObsTerm:
    return ObsTerm("foot_forces", "sensor", tuple(f"{f}_contact" for f in t.robot.feet),
                   scale=0.02)


def contact_forces(t) -> ObsTerm | None:
    """The penalized bodies' touch forces (none where the robot has no such bodies)."""
    sensors = tuple(x for b in t.robot.penalize_contacts for x in t.contacts()[b])
    return ObsTerm("contact_forces", "sensor", sensors, scale=0.02) if sensors else None


def floor_friction(t) -> ObsTerm:
    """The ground's randomized sliding friction (geom_friction flattened [ngeom * 3])."""
    floor = mujoco.mj_name2id(t.model(), mujoco.mjtObj.mjOBJ_GEOM, t.floor())
    return ObsTerm("floor_friction", "param", field="geom_friction", start=3 * floor,
                   stop=3 * floor + 1, offset=(1.0,), scale=2.0, mirror=(1.0,))


def exact_scan(t) -> ObsTerm:
    return _scan(t, False)
