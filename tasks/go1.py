"""The Go1's tasks: `go1-flat` (a trot set by a gait clock), `go1-flat-airtime` (legged_gym's
feet air time instead of the clock) and `go1-rough` (go1-flat's trot on generated terrain
with a curriculum). Each is a declaration over the robot's facts (tasks/robots/go1.py)."""

from __future__ import annotations

from dataclasses import replace

from trot.tasks import locomotion as loco
from trot.tasks.legged_config import ClockedConfig, ClockedRoughConfig
from trot.tasks.registry import register
from trot.tasks.robots.go1 import GO1, JOINTS, LEGS
from trot.tasks.velocity import Velocity

__all__ = ["GO1", "GO1_AGENT", "GO1_FLAT", "GO1_FLAT_AIRTIME", "GO1_ROUGH", "JOINTS", "LEGS"]

# walk-these-ways' trot at 2 Hz: diagonal pairs (FR+RL, FL+RR) touch down half a 0.5 s
# cycle apart, each foot down half of it
TROT = (("gait_period", 0.5), ("stance_share", 0.5), ("gait_offsets", (0.0, 0.5, 0.5, 0.0)))

GO1_FLAT = Velocity(
    robot=GO1, policy=loco.CLOCKED_POLICY, critic=loco.CRITIC,
    # the G1's clocked terms less its joint-speed penalty (legged_gym's quadrupeds have
    # none) and the hip deviation (a quadruped's hips swing to step)
    rewards=loco.without(loco.CLOCKED, "joint_vel", "deviation"),
    memory=loco.CLOCKED_MEMORY, terminations=loco.CLOCKED_FALLS, config=ClockedConfig,
    changes=TROT + (("obs_history", 4),))

GO1_FLAT_AIRTIME = Velocity(robot=GO1, policy=loco.POLICY, critic=loco.CRITIC,
                            rewards=loco.AIR_TIME, memory=loco.AIR_TIME_MEMORY,
                            changes=(("obs_history", 4),))

# the terrain's, with go1-flat's trot: slopes tilt the base (a softer orientation term);
# commands steer to a heading so that robots walk out of their tiles (legged_gym's rough
# tasks). The policy is go1-flat's, blind (the critic sees the scan; `scan_policy` gives it
# to the policy too), so the robot needs no perception (docs/terrain.md)
GO1_ROUGH = replace(GO1_FLAT, policy=loco.ROUGH_POLICY, critic=loco.ROUGH_CRITIC,
                    rewards=loco.reweighed(GO1_FLAT.rewards, orientation=-0.2),
                    ground=loco.ROUGH, config=ClockedRoughConfig,
                    # the high arch, so the feet clear the 10 cm risers: the gait
                    # forms in the first 10 minutes (docs/journal/rough-terrain.md)
                    changes=GO1_FLAT.changes + (("heading_command", True),)
                    + loco.HIGH_ARCH)

GO1_AGENT = dict(rollout_steps=24, epochs=5, minibatches=4, learning_rate=1e-3, gamma=0.99,
                 lam=0.95, entropy_coef=0.0025, desired_kl=0.01, init_log_std=-0.5,
                 actor_hidden=(256, 128, 64), critic_hidden=(256, 128, 64), activation="elu")

# legged_gym's flat-terrain network size: with the clock it walks within go1-flat's goals
# at 0.62-0.74 of the env loop's speed, where 256-128-64 trained at 0.51-0.59
# (docs/journal/learning-go1.md, "Smaller networks with the clock")
GO1_FLAT_AGENT = GO1_AGENT | dict(actor_hidden=(128, 64, 32), critic_hidden=(128, 64, 32))

# the policy sees its last 4 observation frames and a trotting clock: each walked in fewer
# env steps than without (docs/journal/go1-before-clock.md, the history, and
# docs/journal/learning-go1.md, "Go1 walking in minutes", the clock)
register(
    "go1-flat", GO1_FLAT, GO1_FLAT.defaults(),
    "Unitree Go1 (trot's MJCF) trots to planar velocity and yaw rate commands on flat "
    "ground; joint position targets at 50 Hz, a gait clock, a 4-frame observation history, "
    "domain randomization and pushes", agent=GO1_FLAT_AGENT,
    budget=15_000_000)

# go1-flat before the clock: legged_gym's recipe, where feet air time rewards stepping
register(
    "go1-flat-airtime", GO1_FLAT_AIRTIME, GO1_FLAT_AIRTIME.defaults(),
    "go1-flat without the gait clock: feet air time rewards long steps (legged_gym's "
    "terms); the Go1 of the earlier benchmarks", agent=GO1_AGENT, budget=30_000_000)

# go1-rough before the clock (legged_gym's feet air time) stood still for 75 minutes of
# training; with the clock and the stiffer terrain contact it trots (docs/journal/rough-terrain.md).
# It keeps 256-128-64: 128-64-32 trained 1.19x faster here but held the course's stairs
# less steadily (docs/journal/rough-terrain.md, "Smaller networks on rough terrain"), and
# the bf16 update where the CPU multiplies bf16 natively (its 3-seed run ran with it)
register(
    "go1-rough", GO1_ROUGH, GO1_ROUGH.defaults(),
    "the Go1 trots on generated rough terrain (slopes, stairs, rough ground, obstacles) "
    "with a terrain curriculum, a gait clock and a 4-frame history; the critic sees a "
    "height scan",
    agent=GO1_AGENT | dict(update_dtype="auto"), budget=25_000_000)
