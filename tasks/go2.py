"""`go2-flat`: a second quadruped through the generic legged task. trot's Go2-class MJCF
(tasks/assets/go2.xml) is a bare robot, with no sensors or floor: everything the task reads
comes from this description."""

from __future__ import annotations

from pathlib import Path

from trot.tasks.go1 import GO1_AGENT
from trot.tasks.legged import LeggedVelocity, config_for
from trot.tasks.legged_robot import LeggedRobot
from trot.tasks.registry import register

LEGS = ("FL", "FR", "RL", "RR")  # the MJCF's (and Unitree's URDF's) leg order

GO2 = LeggedRobot(
    mjcf=Path(__file__).parent / "assets" / "go2.xml",
    joints=tuple(f"{leg}_{j}_joint" for leg in LEGS for j in ("hip", "thigh", "calf")),
    feet=tuple(f"{leg}_foot" for leg in LEGS),
    base="base",
    terminate_contacts=("base",),
    penalize_contacts=tuple(f"{leg}_thigh" for leg in LEGS),
    imu_pos=(-0.02557, 0.0, 0.04232),  # Unitree's go2 URDF imu_joint
    mirror=tuple((f"{a}_{j}_joint", f"{b}_{j}_joint", -1.0 if j == "hip" else 1.0)
                 for a, b in (("FL", "FR"), ("RL", "RR")) for j in ("hip", "thigh", "calf")),
    # commands up to 0.5 m/s; the rest are the Go1's settings
    config=(("lin_vel_x", (-0.5, 0.5)), ("lin_vel_y", (-0.5, 0.5)), ("yaw_rate", (-1.0, 1.0))),
)


class Go2Flat(LeggedVelocity):
    robot = GO2


register("go2-flat", Go2Flat, config_for(GO2),
         "a Go2-class quadruped (trot's MJCF, no sensors of its own) tracks velocity commands "
         "up to 0.5 m/s on flat ground through the generic legged task",
         # bf16 update products where the CPU or GPU has them: 20% more env-steps/s, and
         # the 20-minute goal met with it (docs/benchmarks.md)
         agent=GO1_AGENT | dict(update_dtype="auto"), budget=20_000_000)
