"""trot's Unitree G1-class humanoid (tasks/assets/g1.xml): its 12 leg joints."""

from __future__ import annotations

from pathlib import Path

from trot.tasks.legged_robot import LeggedRobot

SIDES = ("left", "right")
LEG = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
JOINTS = tuple(f"{s}_{j}_joint" for s in SIDES for j in LEG)
# left <-> right: rotations about x (roll) and z (yaw) reverse, pitches (about y) keep
_FLIPS = ("hip_roll", "hip_yaw", "ankle_roll")

G1 = LeggedRobot(
    mjcf=Path(__file__).parent.parent / "assets" / "g1.xml",
    joints=JOINTS,
    feet=("left_foot", "right_foot"),
    base="pelvis",
    terminate_contacts=("pelvis", "torso_link"),
    penalize_contacts=tuple(f"{s}_{b}" for s in SIDES for b in ("hip_yaw_link", "knee_link")),
    imu_pos=(0.04525, 0.0, -0.08339),  # Unitree's g1_29dof URDF imu_in_pelvis
    mirror=tuple((f"left_{j}_joint", f"right_{j}_joint", -1.0 if j in _FLIPS else 1.0)
                 for j in LEG),
)
