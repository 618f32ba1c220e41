"""Legged-locomotion pieces shared by tasks: velocity commands and reward terms.

Reward terms are small pure functions of [N, ...] tensors returning [N] (unweighted); a task
weights them and multiplies by the control dt, so that weights are per second as in
legged_gym (Rudin et al. 2022, "Learning to Walk in Minutes Using Massively Parallel Deep
RL"). Stateful terms (feet air time) take their state and return the new state.
Nothing here reads the host: no `.item()`, no Python branches on tensor values.
"""

from __future__ import annotations

import math

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


def yaw_of(quat: Tensor) -> Tensor:
    """[N] yaw (rad, in (-pi, pi]) of unit quaternions [N, 4] (w, x, y, z): the direction of
    the body's x axis projected on the world's xy plane."""
    w, x, y, z = quat.unbind(-1)
    return torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def heading_yaw_rate(target: Tensor, yaw: Tensor, stiffness: float, low: float,
                     high: float) -> Tensor:
    """[N] yaw-rate command (rad/s) that turns heading `yaw` [N] to `target` [N] (rad) the
    short way round: stiffness x the error wrapped to [-pi, pi), clipped to [low, high]."""
    error = torch.remainder(target - yaw + math.pi, 2 * math.pi) - math.pi
    return (stiffness * error).clamp(low, high)


class HeadingSteer:
    """Heading commands (LeggedConfig.heading_command): each env holds a target heading,
    drawn with each new command as the base's yaw + U(-spread, spread); the yaw-rate command
    of every moving env steers to it. Standing commands (all zero) stay zero."""

    def __init__(self, n: int, stiffness: float, limits: tuple[float, float], spread: float,
                 device: torch.device | str):
        self.stiffness, self.limits, self.spread = stiffness, limits, spread
        self.target = torch.zeros(n, device=device)  # [N] rad, world yaw
        self.moving = torch.zeros(n, dtype=torch.bool, device=device)  # [N]

    def draw(self, yaw: Tensor, new: Tensor, cmd: Tensor, gen: torch.Generator) -> None:
        """Rows `new` [N] bool, just given commands `cmd` [N, 3], get a target heading; `yaw`
        [N] is the base's now. Draws from `gen` for every row (fixed stream)."""
        u = 2 * torch.rand(yaw.shape, generator=gen, device=yaw.device) - 1
        self.target.copy_(torch.where(new, yaw + self.spread * u, self.target))
        self.moving.copy_(torch.where(new, cmd.ne(0).any(-1), self.moving))

    def steer(self, yaw: Tensor, command: Tensor, rows: Tensor | None = None) -> None:
        """Set the yaw-rate column of `command` [N, 3] in place for moving envs (those among
        `rows` [N] bool, if given)."""
        rate = heading_yaw_rate(self.target, yaw, self.stiffness, *self.limits)
        moving = self.moving if rows is None else self.moving & rows
        command[:, 2] = torch.where(moving, rate, command[:, 2])

    def state_dict(self) -> dict[str, Tensor]:
        return {"heading_target": self.target.clone(), "heading_moving": self.moving.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.target.copy_(state["heading_target"])
        self.moving.copy_(state["heading_moving"])


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
