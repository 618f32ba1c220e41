"""`g1-flat`: trot's Unitree G1-class humanoid (tasks/assets/g1.xml) walks to velocity
commands on flat ground through the gait-clock variant of the legged task (tasks/clocked.py)."""

from __future__ import annotations

from pathlib import Path

from trot.tasks.clocked import ClockedConfig, LeggedClocked
from trot.tasks.go1 import GO1_AGENT
from trot.tasks.legged import config_for
from trot.tasks.legged_robot import LeggedRobot
from trot.tasks.registry import register

SIDES = ("left", "right")
LEG = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
JOINTS = tuple(f"{s}_{j}_joint" for s in SIDES for j in LEG)
# left <-> right: rotations about x (roll) and z (yaw) reverse, pitches (about y) keep
_FLIPS = ("hip_roll", "hip_yaw", "ankle_roll")

G1 = LeggedRobot(
    mjcf=Path(__file__).parent / "assets" / "g1.xml",
    joints=JOINTS,
    feet=("left_foot", "right_foot"),
    base="pelvis",
    terminate_contacts=("pelvis", "torso_link"),
    penalize_contacts=tuple(f"{s}_{b}" for s in SIDES for b in ("hip_yaw_link", "knee_link")),
    imu_pos=(0.04525, 0.0, -0.08339),  # Unitree's g1_29dof URDF imu_in_pelvis
    mirror=tuple((f"left_{j}_joint", f"right_{j}_joint", -1.0 if j in _FLIPS else 1.0)
                 for j in LEG),
    config=(
        # the command ranges; a 10% share stands still (LeggedConfig's default)
        ("lin_vel_x", (-0.5, 1.0)), ("lin_vel_y", (-0.3, 0.3)), ("yaw_rate", (-0.8, 0.8)),
        ("action_scale", 0.25),  # unitree_rl_gym's G1, with its kp 100-150 (g1.xml)
        ("init_joint_noise", 0.05),
        ("deviation_joints", tuple(f"{s}_hip_{j}_joint" for s in SIDES
                                   for j in ("roll", "yaw"))),
        ("min_base_height", 0.4),  # the pelvis stands at 0.728 m
        # randomization for a 32 kg robot: +-3 kg on the pelvis as unitree_rl_gym's G1;
        # Isaac Lab's and mjlab's 0.5 m/s kicks (a 1 m/s kick throws a biped, not a Go1)
        ("added_mass_range", (-1.0, 3.0)), ("push_velocity", 0.5),
        ("w_torques", -1e-5),  # its torques are ~5x the Go1's
    ),
)


class G1Flat(LeggedClocked):
    robot = G1


# The Go1's learner. unitree_rl_gym's G1 entropy 0.01 and initial std 0.8 (tried first,
# docs/benchmarks.md) let the std grow to ~200 behind the action clip: a bang-bang policy
# whose means reached 1,700 (entropy is free where every action is clipped anyway).
# With symmetry augmentation it met every goal of its benchmark in 120 minutes (64.8 M env
# steps; falls 3.9%), where without it the falls stayed at 5.5% (docs/benchmarks.md).
G1_AGENT = dict(GO1_AGENT, symmetry="augment")

register(
    "g1-flat", G1Flat, config_for(G1, ClockedConfig),
    "a Unitree G1-class humanoid (trot's MJCF, 12 leg joints) walks to velocity commands on "
    "flat ground with a clocked gait; domain randomization and pushes", agent=G1_AGENT,
    budget=65_000_000)
