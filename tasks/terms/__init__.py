"""The pieces a locomotion task is composed of (tasks/velocity.py declares the tasks):

- body.py: what terms read from the robot in the sim (`Body`), and one step's view (`Step`);
- state.py: `Term`, a piece with per-env memory, whose checkpoint state is its tensors;
- commands.py: the velocity command (its axes, ranges, mirror signs, heading steering);
- observations.py: the observation terms (`ObsTerm`s) of the policy and the critic;
- rewards.py: reward functions of a step, and the reward terms that need memory;
- terminations.py: failures that end an episode;
- events.py: domain randomization at resets, pushes, action latency;
- clock.py: the gait clock and the reward terms that follow it;
- terrain.py: rough ground (heightfields, spawning, the course) and its curriculum.
"""
