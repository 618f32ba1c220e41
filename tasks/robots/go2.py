"""trot's Go2-class quadruped (tasks/assets/go2.xml): a bare robot, with no sensors or floor;
everything the task reads comes from this description."""

from __future__ import annotations

from pathlib import Path

from trot.tasks.legged_robot import LeggedRobot

LEGS = ("FL", "FR", "RL", "RR")  # the MJCF's (and Unitree's URDF's) leg order

GO2 = LeggedRobot(
    mjcf=Path(__file__).parent.parent / "assets" / "go2.xml",
    joints=tuple(f"{leg}_{j}_joint" for leg in LEGS for j in ("hip", "thigh", "calf")),
    feet=tuple(f"{leg}_foot" for leg in LEGS),
    base="base",
    terminate_contacts=("base",),
    penalize_contacts=tuple(f"{leg}_thigh" for leg in LEGS),
    imu_pos=(-0.02557, 0.0, 0.04232),  # Unitree's go2 URDF imu_joint
    mirror=tuple((f"{a}_{j}_joint", f"{b}_{j}_joint", -1.0 if j == "hip" else 1.0)
                 for a, b in (("FL", "FR"), ("RL", "RR")) for j in ("hip", "thigh", "calf")),
)
