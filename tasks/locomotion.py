"""The locomotion tasks' standard tables: observation terms, reward terms with their weights,
and the terms with memory those rewards read. A declaration (tasks/go1.py, g1.py, go2.py)
is a `Velocity` built from these tables plus its robot and settings; a variant adds,
drops or reweighs entries (docs/tasks.md)."""

from __future__ import annotations

from trot.tasks.terms import observations as obs
from trot.tasks.terms import rewards as rw
from trot.tasks.terms.clock import GaitClock, feet_phase, gait_contact
from trot.tasks.terms.terminations import base_too_low, fell, tilted
from trot.tasks.terms.terrain import Terrain, TerrainCurriculum
from trot.tasks.velocity import Reward, Velocity, failed

# ---------------------------------------------------------------- observations
POLICY = (obs.projected_gravity, obs.base_ang_vel, obs.joint_pos, obs.joint_vel,
          obs.last_action, obs.command)
"""what the robot measures: IMU, joint encoders, its last action and the command"""
CLOCKED_POLICY = POLICY + (obs.gait_clock,)
ROUGH_POLICY = CLOCKED_POLICY + (obs.perceived_scan,)  # the scan with scan_policy only
CRITIC = (obs.base_lin_vel, obs.base_height, obs.foot_forces, obs.contact_forces,
          obs.floor_friction)
"""privileged simulator state, after the policy's own terms"""
ROUGH_CRITIC = (obs.base_lin_vel, obs.base_height_above_terrain, obs.foot_forces,
                obs.contact_forces, obs.floor_friction, obs.exact_scan)

# ---------------------------------------------------------------- rewards
# legged_gym's terms and weights per second (its Go1 / ANYmal flat settings)
TRACKING = (
    Reward("lin_vel", rw.lin_vel, 1.0),
    Reward("yaw_rate", rw.yaw_rate, 0.5),
    Reward("lin_vel_z", rw.lin_vel_z, -2.0),
    Reward("ang_vel_xy", rw.ang_vel_xy, -0.05),
    Reward("orientation", rw.orientation, -1.0),
    Reward("torques", rw.torques, -2e-4),
    Reward("joint_acc", rw.joint_acc, -2.5e-7),
    Reward("action_rate", rw.action_rate, -0.01),
)
UNDESIRED = Reward("undesired_contacts", rw.undesired_contacts, -1.0)
# added once, after the clip, on the step an episode ends by a fall (not per second): with
# the clip, a fall would otherwise cost only the rewards it forfeits, near 0 early on
TERMINATION = Reward("termination", failed, -2.0, once=True)
AIR_TIME = TRACKING + (Reward("feet_air_time", rw.feet_air_time, 1.0), UNDESIRED,
                       TERMINATION)
"""legged_gym's recipe: feet air time rewards long steps"""
# the clock sets the steps instead (tasks/terms/clock.py); weights as unitree_rl_gym's G1
CLOCKED = TRACKING + (
    UNDESIRED,
    Reward("gait_contact", gait_contact, 0.18),
    Reward("feet_phase", feet_phase, 1.0),
    Reward("feet_slip", rw.feet_slip, -0.2),
    Reward("deviation", rw.Deviation, -1.0),
    Reward("base_height", rw.base_height, -10.0),
    Reward("joint_limits", rw.joint_limits, -5.0),
    Reward("joint_vel", rw.joint_vel, -1e-3),
    Reward("alive", rw.alive, 0.15),
    TERMINATION,
)

MEMORY = (rw.PreviousAction, rw.PreviousJointVel)
AIR_TIME_MEMORY = MEMORY + (rw.FeetAirTime,)
CLOCKED_MEMORY = MEMORY + (GaitClock,)
FALLS = (fell, tilted)
CLOCKED_FALLS = FALLS + (base_too_low,)
ROUGH = (Terrain, TerrainCurriculum)
# the clock's high arch (config changes): a 12 cm swing where the default is 8, scored
# within 10 cm where the default is 5, so that a foot lifting 2 cm already earns a share
# and the gait forms early; the G1 and go1-rough (clearing 10 cm risers) use it
# (docs/journal/g1.md, screen E; rough-terrain.md, "the arch scored within 10 cm")
HIGH_ARCH = (("swing_height", 0.12), ("feet_phase_std", 0.1))


def without(rewards: tuple[Reward, ...], *names: str) -> tuple[Reward, ...]:
    """The table less the named terms (each must be in it)."""
    missing = sorted(set(names) - {r.name for r in rewards})
    if missing:
        raise ValueError(f"reward terms {missing} are not in the table; it has "
                         f"{', '.join(r.name for r in rewards)}")
    return tuple(r for r in rewards if r.name not in names)


def reweighed(rewards: tuple[Reward, ...], **weights: float) -> tuple[Reward, ...]:
    """The table with these terms' weights changed (each must be in it)."""
    missing = sorted(set(weights) - {r.name for r in rewards})
    if missing:
        raise ValueError(f"reward terms {missing} are not in the table; it has "
                         f"{', '.join(r.name for r in rewards)}")
    return tuple(Reward(r.name, r.fn, weights.get(r.name, r.weight), r.once) for r in rewards)


def flat(robot, **changes) -> Velocity:
    """legged_gym's recipe (feet air time) on flat ground for any robot description:
    `register("my-flat", flat(MY_ROBOT), flat(MY_ROBOT).defaults(), "...")`. `changes` are
    its settings over LeggedConfig's (e.g. lin_vel_x=(-0.5, 0.5))."""
    return Velocity(robot=robot, policy=POLICY, critic=CRITIC, rewards=AIR_TIME,
                    memory=AIR_TIME_MEMORY, changes=tuple(changes.items()))
