"""The velocity command: what the robot is asked to do, in the base frame. `AXES` is the
one definition of its layout: the observation's columns, the config's range fields, the
mirror's signs and the export's command_ranges all come from it.

Each env draws a command at its reset and every `resample_seconds`: uniform in the ranges,
or all zero for a `standing_fraction` share. With `heading_command`, each command also draws
a target heading (the base's yaw + U(-pi, pi)) and the yaw-rate column steers to it every
step (legged_gym's and Isaac Lab's rough tasks). Rewards score an action against the
command it answered (`seen`), even where a new command arrives with the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from trot.tasks.terms.body import Body
from trot.tasks.terms.state import Term


@dataclass(frozen=True)
class Axis:
    name: str
    """the config field holding its (low, high) range, and its observation column's name"""
    mirror: float
    """its sign under the left-right mirror"""


AXES = (Axis("lin_vel_x", 1.0), Axis("lin_vel_y", -1.0), Axis("yaw_rate", -1.0))
"""forward speed (m/s), lateral speed (m/s), yaw rate (rad/s): forward keeps its sign under
the mirror, lateral speed and yaw rate flip"""
COMMANDS = tuple(a.name for a in AXES)
YAW = COMMANDS.index("yaw_rate")


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


class VelocityCommand(Term):
    """command [N, 3] (what the policy sees), seen [N, 3] (what the current action answers),
    the resampling timer and, with heading_command, each env's target heading."""

    def __init__(self, body: Body):
        c, n, dev = body.config, body.n, body.device
        self.low = torch.tensor([getattr(c, a.name)[0] for a in AXES], device=dev)
        self.high = torch.tensor([getattr(c, a.name)[1] for a in AXES], device=dev)
        self.standing = float(c.standing_fraction)
        self.resample_steps = max(1, round(c.resample_seconds / body.dt))
        self.command = torch.zeros(n, len(AXES), device=dev)
        self.seen = torch.zeros(n, len(AXES), device=dev)
        self.timer = torch.zeros(n, dtype=torch.int64, device=dev)
        self.heading = bool(c.heading_command)
        self.stiffness, self.spread = float(c.heading_stiffness), math.pi
        self.yaw_limits = tuple(float(x) for x in c.yaw_rate)  # the steering's clip
        self.target = torch.zeros(n, device=dev)  # [N] rad, world yaw (heading_command)
        self.moving = torch.zeros(n, dtype=torch.bool, device=dev)  # [N] steering

    def hold(self, forward: float) -> None:
        """Every command is `forward` m/s straight ahead, on the spawn heading (the course)."""
        self.low.copy_(torch.tensor([forward, 0.0, 0.0]))
        self.high.copy_(self.low)
        self.standing, self.spread = 0.0, 0.0

    def _draw(self, n: int, gen: torch.Generator) -> Tensor:
        return sample_commands(n, self.low, self.high, self.standing, gen)

    def _draw_heading(self, yaw: Tensor, new: Tensor, cmd: Tensor, gen: torch.Generator
                      ) -> None:
        """Rows `new` [N], just given commands `cmd` [N, 3], get a target heading from the
        base's yaw [N] now. Draws for every row (a fixed stream)."""
        u = 2 * torch.rand(yaw.shape, generator=gen, device=yaw.device) - 1
        self.target.copy_(torch.where(new, yaw + self.spread * u, self.target))
        self.moving.copy_(torch.where(new, cmd.ne(0).any(-1), self.moving))

    def _steer(self, yaw: Tensor, rows: Tensor | None = None) -> None:
        """The yaw-rate column of moving envs (those among `rows` [N], if given) steers."""
        rate = heading_yaw_rate(self.target, yaw, self.stiffness, *self.yaw_limits)
        moving = self.moving if rows is None else self.moving & rows
        self.command[:, YAW] = torch.where(moving, rate, self.command[:, YAW])

    def reset(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        cmd = self._draw(body.n, gen)
        self.command.copy_(torch.where(mask[:, None], cmd, self.command))
        if self.heading:  # steer from the start yaw (post_step has run for this step)
            yaw = yaw_of(body.sim.qpos[:, 3:7])
            self._draw_heading(yaw, mask, cmd, gen)
            self._steer(yaw, mask)
        self.seen.copy_(torch.where(mask[:, None], self.command, self.seen))
        self.timer.masked_fill_(mask, 0)

    def pre_step(self, body: Body, gen: torch.Generator) -> None:
        # the action about to be applied answered the command in the last observation
        self.seen.copy_(self.command)
        due, self.timer = tick(self.timer, self.resample_steps)
        new = self._draw(body.n, gen)
        self.command.copy_(torch.where(due[:, None], new, self.command))
        if self.heading:  # targets drawn from the yaw before the physics
            self._draw_heading(yaw_of(body.sim.qpos[:, 3:7]), due, new, gen)

    def post_step(self, step) -> None:
        if self.heading:  # every moving env steers from its yaw after the physics
            self._steer(yaw_of(step.body.sim.qpos[:, 3:7]))
