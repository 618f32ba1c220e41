"""Legged-locomotion pieces shared by tasks: velocity commands and reward terms.

Reward terms are small pure functions of [N, ...] tensors returning [N] (unweighted); a task
weights them and multiplies by the control dt, so that weights are per second as in
legged_gym (Rudin et al. 2022, "Learning to Walk in Minutes Using Massively Parallel Deep
RL"). Stateful terms (feet air time) take their state and return the new state.
Nothing here reads the host: no `.item()`, no Python branches on tensor values.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trot.tasks.rewards import tracking_exp

# ---------------------------------------------------------------------------- commands


def sample_commands(n: int, low: Tensor, high: Tensor, standing_fraction: float,
                    gen: torch.Generator) -> Tensor:
    """[n, k] commands uniform in [low, high] per column; a `standing_fraction` share of the
    rows (each row independently) is all zeros: stand still."""
    u = torch.rand(n, low.numel(), generator=gen, device=low.device)
    cmd = low + (high - low) * u
    stand = torch.rand(n, 1, generator=gen, device=low.device) < standing_fraction
    return torch.where(stand, 0.0, cmd)


def tick(timer: Tensor, period: int) -> tuple[Tensor, Tensor]:
    """Advance per-env step counters [N] by one; returns (due [N] bool, new timer). A counter
    is due on its `period`-th tick since it was last zeroed, then restarts from 0."""
    timer = timer + 1
    due = timer >= period
    return due, torch.where(due, 0, timer)


# ---------------------------------------------------------------------------- rewards


def track_lin_vel_xy(command_xy: Tensor, vel_xy: Tensor, std: float) -> Tensor:
    """exp(-|v_cmd - v|^2 / std^2) over the base's planar velocity (base frame) [N, 2]."""
    return tracking_exp((command_xy - vel_xy).square().sum(-1), std)


def track_yaw_rate(command_yaw: Tensor, yaw_rate: Tensor, std: float) -> Tensor:
    """exp(-(w_cmd - w_z)^2 / std^2), [N]."""
    return tracking_exp((command_yaw - yaw_rate).square(), std)


def lin_vel_z(vel_z: Tensor) -> Tensor:
    """Vertical base velocity squared (base frame), [N] -> [N]."""
    return vel_z.square()


def ang_vel_xy(ang_vel: Tensor) -> Tensor:
    """Roll and pitch rates squared, summed: [N, 3] (base frame) -> [N]."""
    return ang_vel[:, :2].square().sum(-1)


def flat_orientation(gravity: Tensor) -> Tensor:
    """Projected gravity's xy squared, summed: 0 when level. [N, 3] -> [N]."""
    return gravity[:, :2].square().sum(-1)


def torques(tau: Tensor) -> Tensor:
    """Sum of squared joint torques, [N, J] -> [N]."""
    return tau.square().sum(-1)


def joint_acc(joint_vel: Tensor, prev_joint_vel: Tensor, dt: float) -> Tensor:
    """Sum of squared finite-difference joint accelerations over one control step."""
    return ((joint_vel - prev_joint_vel) / dt).square().sum(-1)


def action_rate(action: Tensor, prev_action: Tensor) -> Tensor:
    """Sum of squared action changes between consecutive control steps."""
    return (action - prev_action).square().sum(-1)


def undesired_contacts(forces: Tensor, threshold: float) -> Tensor:
    """Number of watched bodies (thighs, ...) pressed harder than `threshold` N. [N, k]."""
    return (forces > threshold).float().sum(-1)


def feet_air_time(contact: Tensor, last_contact: Tensor, air_time: Tensor, dt: float,
                  command_xy: Tensor, target: float = 0.5, min_command: float = 0.1,
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """Feet air time, following legged_gym's definition (`_reward_feet_air_time`).

    contact [N, F] bool this step; last_contact [N, F] bool last step (a contact is counted
    if either step saw it: touch forces flicker on first impact); air_time [N, F] s since
    each foot left the ground. On touchdown a foot scores (air time - target): long steps
    pay, shuffling costs. Zero when the commanded planar speed is below `min_command`.
    Returns (reward [N], new air_time, new last_contact).
    """
    filt = contact | last_contact
    first = (air_time > 0) & filt  # touchdown after at least one step in the air
    air_time = air_time + dt
    moving = command_xy.norm(dim=-1) > min_command
    reward = ((air_time - target) * first).sum(-1) * moving
    return reward, torch.where(filt, 0.0, air_time), contact
