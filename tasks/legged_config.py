"""The legged velocity tasks' settings (tasks/velocity.py): frozen dataclasses whose field
docstrings are `trot train --help`. `LeggedConfig` holds what every legged task reads; the
gait clock's settings (`ClockSettings`) and the terrain's (`TerrainSettings`) are parts a
task's config adds (`ClockedConfig`, `RoughConfig`, `ClockedRoughConfig`): disjoint sets of
fields, so no field's default depends on the order of the bases. Defaults are the Go1's;
a task's own values are its declaration's `changes` (tasks/go1.py, g1.py, go2.py)."""

from __future__ import annotations

from dataclasses import dataclass

from trot.tasks import terrain as tr
from trot.tasks.base import TaskConfig


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

    # -- rewards (their weights, per second, are the task declaration's)
    weights: tuple[tuple[str, float], ...] = ()
    """reward weights over the declaration's, per second, e.g. --env.weights lin_vel 2.0
    alive 0.1 (the termination penalty is per fall); names must be the task's terms"""
    tracking_std: float = 0.5
    """tracking kernels exp(-err^2 / std^2) (legged_gym's tracking_sigma 0.25 = std^2)"""
    air_time_target: float = 0.5
    """air time (s) at which a step neither pays nor costs"""
    contact_threshold: float = 1.0
    """normal force (N) above which a touch sensor counts as contact"""
    only_positive_rewards: bool = True
    """clip the total at 0 per step (legged_gym's default): penalties never make living bad"""

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


@dataclass(frozen=True)
class ClockSettings:
    """The gait clock's settings (tasks/terms/clock.py) and the terms a clocked walker
    needs; the clock's defaults are the G1's walk (tasks/g1.py sets a higher arch)."""

    gait_period: float = 0.8
    """s per gait cycle (every foot one step)"""
    stance_share: float = 0.55
    """share of the cycle each foot should be on the ground"""
    gait_offsets: tuple[float, ...] = ()
    """each foot's touchdown in the cycle, as a share of it, in the description's feet order
    (a trot: diagonal pairs half a cycle apart); empty: foot i at i / F (a biped alternates)"""
    standing_speed: float = 0.1
    """below this command size (planar m/s and yaw rad/s, norm) every foot stays down"""
    swing_height: float = 0.08
    """m above its home height a swinging foot should reach"""
    feet_phase_std: float = 0.05
    """m: the feet_phase kernel's width"""
    deviation_joints: tuple[str, ...] = ()
    """joints held near their home angle by the deviation term (e.g. hip roll and yaw)"""
    base_height_target: float = 0.0
    """base height (m) of the base_height term; 0: the home keyframe's"""
    min_base_height: float = 0.0
    """end the episode when the base is lower than this (m); 0: never"""
    soft_joint_limit: float = 0.9
    """share of each joint's range, about its middle, that joint_limits leaves free"""


@dataclass(frozen=True)
class TerrainSettings:
    """Rough terrain (tasks/terms/terrain.py, tasks/terrain.py) and its curriculum."""

    terrain: str = "train"
    """"train": the generated terrain with its curriculum; "course": the fixed evaluation
    course (trot eval/sim2sim --course)"""
    tile_size: float = 6.0
    """side of a terrain tile (m)"""
    terrain_rows: int = 8
    """difficulty levels"""
    terrain_cols: int = 8
    """sub-terrain columns"""
    terrain_resolution: float = 0.05
    """heightfield spacing (m); <= 0.05 keeps 10 cm stairs steps (tasks/terrain.py)"""
    terrain_border: float = 5.0
    """flat margin around the tiles (m)"""
    terrain_proportions: tuple[float, ...] = tr.TerrainConfig.proportions
    """column shares: flat, rough, slope_up, slope_down, stairs_up, stairs_down, obstacles"""
    terrain_seed: int = 0
    """the map's own seed (part of the model, not of the training seed)"""
    curriculum: bool = True
    """move envs between rows by how far they walked (else levels stay where they start)"""
    init_level: int = 3
    """levels start uniform in [0, init_level]"""
    start_row: int = -1
    """>= 0: every env starts on this row instead (with curriculum off: stays there, e.g.
    to evaluate one difficulty)"""
    spawn_spread: float = 0.5
    """start position = tile centre + U(-x, x) m in x and y (within the 2 m platform)"""
    spawn_clearance: float = 0.03
    """m added to the start height: the home pose with init_joint_noise reaches up to
    2.2 cm below its flat-ground height (2000 draws of the Go1)"""
    scan_grid: tuple[float, float, float] = (1.6, 1.0, 0.1)
    """height scan (length x, length y, spacing) in m around the base: 17 x 11 points"""
    scan_policy: bool = False
    """give the height scan to the policy too (False: the critic only)"""
    scan_noise: float = 0.05
    """policy scan: uniform noise half-width (m) per point and step"""
    scan_offset: float = 0.0
    """policy scan: a per-episode vertical offset U(-x, x) m (a perception bias)"""
    course_speed: float = 0.6
    """the forward command on the course (m/s)"""


@dataclass(frozen=True)
class ClockedConfig(LeggedConfig, ClockSettings):
    """A legged task with a gait clock (go1-flat, g1-flat)."""


@dataclass(frozen=True)
class RoughConfig(LeggedConfig, TerrainSettings):
    """A legged task on rough terrain."""


@dataclass(frozen=True)
class ClockedRoughConfig(LeggedConfig, ClockSettings, TerrainSettings):
    """A legged task with a gait clock on rough terrain (go1-rough)."""
