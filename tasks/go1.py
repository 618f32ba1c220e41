"""`go1-flat`: trot's Go1-class quadruped (tasks/assets/go1.xml) as a robot description for
the generic legged velocity task (tasks/legged.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trot.tasks.clocked import ClockedConfig, LeggedClocked
from trot.tasks.legged import LeggedVelocity, config_for
from trot.tasks.legged_robot import LeggedRobot
from trot.tasks.registry import register
from trot.tasks.rough import LeggedRough, RoughConfig

ASSET = Path(__file__).parent / "assets" / "go1.xml"
LEGS = ("FR", "FL", "RR", "RL")
JOINTS = tuple(f"{leg}_{j}" for leg in LEGS for j in ("hip", "thigh", "calf"))

GO1 = LeggedRobot(
    mjcf=ASSET,
    joints=JOINTS,
    feet=tuple(f"{leg}_foot" for leg in LEGS),
    base="trunk",
    terminate_contacts=("trunk",),
    penalize_contacts=tuple(f"{leg}_thigh" for leg in LEGS),
    imu_pos=(-0.01592, -0.06659, -0.00617),  # Unitree's URDF imu_joint
    # left <-> right: hip roll flips sign (its axis is x, along the mirror plane), thigh and
    # calf pitch keep it (axis y, normal to the plane); tests/test_legged.py checks this
    # against the model's joint axes and anchors
    mirror=tuple((f"{a}_{j}", f"{b}_{j}", -1.0 if j == "hip" else 1.0)
                 for a, b in (("FR", "FL"), ("RR", "RL")) for j in ("hip", "thigh", "calf")),
)


class Go1Flat(LeggedClocked):
    robot = GO1


@dataclass(frozen=True)
class Go1FlatConfig(ClockedConfig):
    """go1-flat's settings: the clocked task's with a trot. Diagonal pairs (FR+RL, FL+RR)
    touch down half a 0.5 s cycle apart, each foot down half of it (walk-these-ways' trot
    at 2 Hz). The G1's joint-speed penalty is off (legged_gym's quadrupeds have none)."""

    gait_period: float = 0.5
    stance_share: float = 0.5
    gait_offsets: tuple[float, ...] = (0.0, 0.5, 0.5, 0.0)  # FR, FL, RR, RL
    w_joint_vel: float = 0.0


class Go1AirTime(LeggedVelocity):
    robot = GO1


GO1_AGENT = dict(rollout_steps=24, epochs=5, minibatches=4, learning_rate=1e-3, gamma=0.99,
                 lam=0.95, entropy_coef=0.0025, desired_kl=0.01, init_log_std=-0.5,
                 actor_hidden=(256, 128, 64), critic_hidden=(256, 128, 64), activation="elu")

# legged_gym's flat-terrain network size: with the clock it walks within go1-flat's goals
# at 0.62-0.74 of the env loop's speed, where 256-128-64 trained at 0.51-0.59 (docs/benchmarks.md,
# "Smaller networks with the clock")
GO1_FLAT_AGENT = GO1_AGENT | dict(actor_hidden=(128, 64, 32), critic_hidden=(128, 64, 32))

# the policy sees its last 4 observation frames and a trotting clock: docs/benchmarks.md
# ("Go1 walking in minutes") measured each walking in fewer env steps than without
register(
    "go1-flat", Go1Flat, config_for(GO1, Go1FlatConfig, obs_history=4),
    "Unitree Go1 (trot's MJCF) trots to planar velocity and yaw rate commands on flat "
    "ground; joint position targets at 50 Hz, a gait clock, a 4-frame observation history, "
    "domain randomization and pushes", agent=GO1_FLAT_AGENT,
    budget=15_000_000)

# go1-flat before the clock: legged_gym's recipe, where feet air time rewards stepping
register(
    "go1-flat-airtime", Go1AirTime, config_for(GO1, obs_history=4),
    "go1-flat without the gait clock: feet air time rewards long steps (legged_gym's "
    "terms); the Go1 of the earlier benchmarks", agent=GO1_AGENT, budget=30_000_000)


class Go1Rough(LeggedRough, LeggedClocked):
    """The rough task with go1-flat's trotting clock; its heights are above the terrain."""

    robot = GO1


# Go1FlatConfig first: a dataclass takes each field's default from the first base in
# the MRO that has it, and RoughConfig carries LeggedConfig's (w_feet_air_time 1, ...)
@dataclass(frozen=True)
class Go1RoughConfig(Go1FlatConfig, RoughConfig):
    """go1-rough's settings: the terrain's and go1-flat's trot, with slopes that tilt the
    base. The policy is go1-flat's, blind (the critic sees the scan; `scan_policy` gives
    it to the policy too), so the robot needs no perception (docs/terrain.md). Commands
    steer to a heading, so that robots walk out of their tiles (legged_gym's rough tasks)."""

    w_orientation: float = -0.2
    heading_command: bool = True


# go1-rough before the clock (legged_gym's feet air time) stood still for 75 minutes of
# training; with the clock and the stiffer terrain contact it trots (docs/benchmarks.md).
# It keeps 256-128-64: 128-64-32 trained 1.19x faster here but held the course's stairs
# less steadily (docs/benchmarks.md, "Smaller networks on rough terrain")
register(
    "go1-rough", Go1Rough, config_for(GO1, Go1RoughConfig, obs_history=4),
    "the Go1 trots on generated rough terrain (slopes, stairs, rough ground, obstacles) "
    "with a terrain curriculum, a gait clock and a 4-frame history; the critic sees a "
    "height scan",
    agent=GO1_AGENT, budget=60_000_000)
