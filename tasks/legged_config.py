"""The legged velocity task's settings (tasks/legged.py): one frozen dataclass whose field
docstrings are `trot train --help`. Its defaults are the Go1's; a robot's own settings are
overrides in its description (`LeggedRobot.config`), applied by `config_for`."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from trot.tasks.base import TaskConfig
from trot.tasks.legged_robot import LeggedRobot

COMMANDS = ("lin_vel_x", "lin_vel_y", "yaw_rate")


@dataclass(frozen=True)
class LeggedConfig(TaskConfig):
    episode_seconds: float = 20.0
    """time limit (truncation)"""
    substeps: int = 4
    """physics steps per control step: 0.005 s x 4 = 50 Hz control"""

    # -- commands [lin_vel_x (m/s), lin_vel_y (m/s), yaw_rate (rad/s)], base frame
    lin_vel_x: tuple[float, float] = (-1.0, 1.0)
    """forward speed command range, m/s"""
    lin_vel_y: tuple[float, float] = (-0.5, 0.5)
    """lateral speed command range, m/s"""
    yaw_rate: tuple[float, float] = (-1.0, 1.0)
    """yaw rate command range, rad/s"""
    standing_fraction: float = 0.1
    """share of sampled commands that are all zero (stand still)"""
    resample_seconds: float = 10.0
    """each env draws a new command after this long with its current one"""
    heading_command: bool = False
    """steer to a heading instead of drawing a yaw rate: each command draws a target heading
    (the base's yaw + U(-pi, pi)) and the yaw-rate command is heading_stiffness x the heading
    error, clipped to yaw_rate, recomputed every step (legged_gym's and Isaac Lab's rough
    tasks): robots walk straight lines instead of circles, which the terrain curriculum's
    distances need. The policy still sees a yaw rate"""
    heading_stiffness: float = 0.5
    """heading_command: yaw rate (rad/s) per rad of heading error"""

    # -- actions
    action_scale: float = 0.5
    """joint target = home pose + action_scale * action (rad); actions are clipped to [-1, 1],
    so this bounds the targets (MuJoCo Playground's Go1/Go2 joystick value; at 0.25 trained
    policies saturated 85-90% of their actions)"""
    latency_steps: int = 0
    """the motors receive each action this many control steps late (0: none)"""

    # -- initial state
    init_joint_noise: float = 0.1
    """initial joint angles = home + U(-x, x) rad"""
    init_vel_noise: float = 0.1
    """initial base linear (m/s) and angular (rad/s) velocity ~ U(-x, x); heading is random"""

    # -- rewards: weights per second (the task multiplies them by the control dt)
    tracking_std: float = 0.5
    """tracking kernels exp(-err^2 / std^2) (legged_gym's tracking_sigma 0.25 = std^2)"""
    w_lin_vel: float = 1.0
    """planar velocity tracking"""
    w_yaw_rate: float = 0.5
    """yaw rate tracking"""
    w_lin_vel_z: float = -2.0
    """vertical base velocity squared"""
    w_ang_vel_xy: float = -0.05
    """roll and pitch rates squared"""
    w_orientation: float = -1.0
    """projected gravity xy squared (tilt)"""
    w_torques: float = -2e-4
    """joint torques squared"""
    w_joint_acc: float = -2.5e-7
    """joint accelerations squared"""
    w_action_rate: float = -0.01
    """action changes squared"""
    w_feet_air_time: float = 1.0
    """(air time - air_time_target) per touchdown, while commanded to move"""
    w_undesired_contacts: float = -1.0
    """penalized bodies (the description's penalize_contacts) touching the ground, count"""
    air_time_target: float = 0.5
    """air time (s) at which a step neither pays nor costs"""
    contact_threshold: float = 1.0
    """normal force (N) above which a touch sensor counts as contact"""
    only_positive_rewards: bool = True
    """clip the total at 0 per step (legged_gym's default): penalties never make living bad"""
    w_termination: float = -2.0
    """added once, after the clip, on the step an episode ends by a fall (not per second):
    with the clip, a fall would otherwise cost only the rewards it forfeits, near 0 early on"""

    # -- termination
    max_gravity_z: float = -0.5
    """end the episode when projected gravity's z in the base frame exceeds this (-1 is
    level; -0.5 is a 60 degree tilt), or when a terminate_contacts body touches the ground"""

    # -- domain randomization (per env, at each reset)
    randomize: bool = True
    """randomize friction, base mass and CoM, motor strength and PD gains at reset"""
    friction_range: tuple[float, float] = (0.5, 1.25)
    """floor sliding friction (the floor's friction is every contact's: priority 1)"""
    added_mass_range: tuple[float, float] = (-1.0, 2.0)
    """kg added to the base body"""
    com_offset: tuple[float, float, float] = (0.05, 0.03, 0.03)
    """base CoM shift ~ U(-x, x) per axis (m, base frame)"""
    motor_strength_range: tuple[float, float] = (0.9, 1.1)
    """per-motor factor on kp and kv together (torque = strength * PD)"""
    kp_range: tuple[float, float] = (0.9, 1.1)
    """per-motor factor on the position gain"""
    kd_range: tuple[float, float] = (0.9, 1.1)
    """per-motor factor on the velocity gain"""
    push: bool = True
    """kick the base at random intervals"""
    push_interval_seconds: tuple[float, float] = (10.0, 15.0)
    """time between kicks ~ U(lo, hi) s, per env"""
    push_velocity: float = 1.0
    """a kick adds U(-x, x) m/s to each of the base's world x and y velocities"""


def config_for(robot: LeggedRobot, cls: type[LeggedConfig] = LeggedConfig,
               **changes) -> LeggedConfig:
    """The task config (`cls`: LeggedConfig or a subclass, e.g. the rough task's) with the
    robot's own settings (`LeggedRobot.config`), then `changes`."""
    names = {f.name for f in fields(cls)}
    unknown = sorted({k for k, _ in robot.config} - names)
    if unknown:
        raise ValueError(f"robot config names unknown {cls.__name__} fields {unknown}")
    return replace(cls(), **dict(robot.config) | changes)
