"""`go1-flat`: trot's Go1-class quadruped (tasks/assets/go1.xml) as a robot description for
the generic legged velocity task (tasks/legged.py)."""

from __future__ import annotations

from pathlib import Path

from trot.tasks.biped import BipedConfig, LeggedBiped
from trot.tasks.legged import LeggedConfig, LeggedVelocity, config_for
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


class Go1Flat(LeggedVelocity):
    robot = GO1


Go1FlatConfig = LeggedConfig  # the Go1's settings are LeggedConfig's defaults

GO1_AGENT = dict(rollout_steps=24, epochs=5, minibatches=4, learning_rate=1e-3, gamma=0.99,
                 lam=0.95, entropy_coef=0.0025, desired_kl=0.01, init_log_std=-0.5,
                 actor_hidden=(256, 128, 64), critic_hidden=(256, 128, 64), activation="elu")

# the policy sees its last 4 observation frames: docs/benchmarks.md ("Go1 walking in
# minutes") measured it walking in fewer env steps than with one frame
register(
    "go1-flat", Go1Flat, config_for(GO1, obs_history=4),
    "Unitree Go1 (trot's MJCF) tracks planar velocity and yaw rate commands on flat ground; "
    "joint position targets at 50 Hz, a 4-frame observation history, domain randomization "
    "and pushes", agent=GO1_AGENT,
    budget=30_000_000)


class Go1Trot(LeggedBiped):
    robot = GO1


# The Go1 with a trotting clock: diagonal pairs (FR+RL, FL+RR) half a 0.5 s cycle apart, each
# foot down half of it (walk-these-ways' trot at 2 Hz); the clock's feet_phase and
# gait_contact replace feet air time. The biped's joint-speed penalty is off (legged_gym's
# quadrupeds have none) and nothing ends an episode by base height.
register(
    "go1-flat-trot", Go1Trot,
    config_for(GO1, BipedConfig, obs_history=4, gait_period=0.5, stance_share=0.5,
               gait_offsets=(0.0, 0.5, 0.5, 0.0), swing_height=0.08, w_joint_vel=0.0),
    "go1-flat with a trotting gait clock: the policy sees the clock's phase and is paid for "
    "feet that follow it", agent=GO1_AGENT, budget=30_000_000)


class Go1Rough(LeggedRough):
    robot = GO1


register(
    "go1-rough", Go1Rough,
    config_for(GO1, RoughConfig, w_orientation=-0.2),  # slopes tilt the base
    "the Go1 on generated rough terrain (slopes, stairs, rough ground, obstacles) with a "
    "terrain curriculum; the critic sees a height scan", agent=GO1_AGENT, budget=60_000_000)
