"""`go2-flat`: a second quadruped (tasks/robots/go2.py) through legged_gym's recipe, with
commands up to 0.5 m/s."""

from __future__ import annotations

from dataclasses import replace

from trot.tasks import locomotion as loco
from trot.tasks.go1 import GO1_AGENT, GO1_FLAT, GO1_FLAT_AGENT
from trot.tasks.registry import register
from trot.tasks.robots.go2 import GO2, LEGS
from trot.tasks.velocity import Velocity

__all__ = ["GO2", "GO2_FLAT", "GO2_FLAT_CLOCKED", "LEGS"]

GO2_FLAT = Velocity(robot=GO2, policy=loco.POLICY, critic=loco.CRITIC, rewards=loco.AIR_TIME,
                    memory=loco.AIR_TIME_MEMORY,
                    changes=(("lin_vel_x", (-0.5, 0.5)), ("lin_vel_y", (-0.5, 0.5)),
                             ("yaw_rate", (-1.0, 1.0))))

register("go2-flat", GO2_FLAT, GO2_FLAT.defaults(),
         "a Go2-class quadruped (trot's MJCF, no sensors of its own) tracks velocity commands "
         "up to 0.5 m/s on flat ground through the generic legged task",
         # bf16 update products where the CPU or GPU has them: 20% more env-steps/s, and
         # the 20-minute goal met with it (docs/benchmarks.md, "Learning")
         agent=GO1_AGENT | dict(update_dtype="auto"), budget=20_000_000)

# go1-flat's observation (gait clock, 4-frame history), rewards and trot on the Go2, at
# go2-flat's commands: the layouts agree, so one policy trains on both robots
# (`trot train go1-flat go2-flat-clocked`, agents/multitask.py). The Go2's legs are in the
# order FL, FR, RL, RR, so the diagonal pairs FR+RL and FL+RR get go1-flat's phases thus
GO2_FLAT_CLOCKED = replace(GO1_FLAT, robot=GO2, changes=(
    ("gait_period", 0.5), ("stance_share", 0.5), ("gait_offsets", (0.5, 0.0, 0.0, 0.5)),
    ("obs_history", 4)) + GO2_FLAT.changes)

register("go2-flat-clocked", GO2_FLAT_CLOCKED, GO2_FLAT_CLOCKED.defaults(),
         "go2-flat with go1-flat's gait clock, 4-frame history and rewards: its observation "
         "layout is go1-flat's, so one policy can train on both robots",
         agent=GO1_FLAT_AGENT, budget=20_000_000)
