"""trot's Go1-class quadruped (tasks/assets/go1.xml), described for the legged tasks."""

from __future__ import annotations

from pathlib import Path

from trot.tasks.legged_robot import LeggedRobot

LEGS = ("FR", "FL", "RR", "RL")
JOINTS = tuple(f"{leg}_{j}" for leg in LEGS for j in ("hip", "thigh", "calf"))

GO1 = LeggedRobot(
    mjcf=Path(__file__).parent.parent / "assets" / "go1.xml",
    joints=JOINTS,
    feet=tuple(f"{leg}_foot" for leg in LEGS),
    base="trunk",
    terminate_contacts=("trunk",),
    penalize_contacts=tuple(f"{leg}_thigh" for leg in LEGS),
    imu_pos=(-0.01592, -0.06659, -0.00617),  # Unitree's URDF imu_joint
    # left <-> right: hip roll flips sign (its axis is x, along the mirror plane), thigh and
    # calf pitch keep it (axis y, normal to the plane); the build checks this against the
    # model's joint axes and anchors (tasks/legged_robot.py's check_mirror)
    mirror=tuple((f"{a}_{j}", f"{b}_{j}", -1.0 if j == "hip" else 1.0)
                 for a, b in (("FR", "FL"), ("RR", "RL")) for j in ("hip", "thigh", "calf")),
)
