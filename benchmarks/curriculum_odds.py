"""How often a perfect velocity tracker would be promoted or demoted by the terrain
curriculum (tasks/terms/terrain.py, legged_gym's rule), with drawn yaw-rate commands against
heading commands (LeggedConfig.heading_command).

    python benchmarks/curriculum_odds.py -- go1-rough --num-envs 20000

It takes no flags of its own; after `--` come `trot train`'s (default `go1-rough
--num-envs 20000`): a terrain task, the trackers per mode (`--num-envs`), `--seed` and
`--env.FIELD V` (the commands' settings, e.g. `--env.heading-stiffness 1.0`).

A kinematic robot on flat ground follows the task's commands exactly (trot's own command
sampling and heading law, its ranges, resampling and episode length), from a spawn at its
tile's centre plus U(-0.5, 0.5) m. At the episode's end it is promoted if it is farther
than half a tile from the centre, demoted if it walked less than half the commanded
distance. No policy and no terrain: the share a robot that walks perfectly gets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

import trot.tasks.go1  # noqa: F401  (registers go1-rough)
from trot.agents.train_config import TrainConfig
from trot.benchmark import main
from trot.tasks.registry import get_task
from trot.tasks.terms import commands as loco


@dataclass(frozen=True)
class Settings:
    """The odds have no settings of their own: the task, the trackers (--num-envs) and the
    seed are the train arguments' (after --)."""


def track(cmd_at, yaw: Tensor, xy: Tensor, steps: int, dt: float) -> tuple[Tensor, Tensor]:
    """Integrate a perfect tracker: `cmd_at(t, yaw)` gives the [N, 3] base-frame command
    (vx, vy, yaw rate) at step t. Returns the final xy [N, 2] and the commanded planar
    distance [N]. Forward Euler at the control step, as the curriculum's own integral."""
    asked = torch.zeros(len(yaw), dtype=xy.dtype)
    for t in range(steps):
        cmd = cmd_at(t, yaw)
        c, s = torch.cos(yaw), torch.sin(yaw)
        vel = torch.stack([c * cmd[:, 0] - s * cmd[:, 1], s * cmd[:, 0] + c * cmd[:, 1]], 1)
        xy = xy + dt * vel
        yaw = yaw + dt * cmd[:, 2]
        asked += dt * cmd[:, :2].norm(dim=-1)
    return xy, asked


def odds(heading: bool, n: int, seed: int = 0, task: str = "go1-rough",
         config=None) -> tuple[float, float]:
    """(promoted, demoted) shares of n perfect trackers over one episode of `task` with
    `config` (default: its registered settings)."""
    entry = get_task(task)
    c = config or entry.config
    dt = c.substeps * entry.task_cls(c).model().opt.timestep  # the control step
    gen = torch.Generator().manual_seed(seed)
    low = torch.tensor([c.lin_vel_x[0], c.lin_vel_y[0], c.yaw_rate[0]], dtype=torch.float64)
    high = torch.tensor([c.lin_vel_x[1], c.lin_vel_y[1], c.yaw_rate[1]], dtype=torch.float64)
    every = round(c.resample_seconds / dt)
    state = {}

    def cmd_at(t: int, yaw: Tensor) -> Tensor:
        if t % every == 0:  # a new command and, as the task draws it, a target heading
            state["cmd"] = loco.sample_commands(n, low, high, c.standing_fraction, gen)
            u = 2 * torch.rand(yaw.shape, generator=gen) - 1
            state["target"] = yaw + math.pi * u
        cmd = state["cmd"].clone()
        if heading:  # moving envs steer to their heading (tasks/terms/commands.py)
            rate = loco.heading_yaw_rate(state["target"], yaw, c.heading_stiffness,
                                         *c.yaw_rate)
            cmd[:, 2] = torch.where(cmd.ne(0).any(-1), rate, cmd[:, 2])
        return cmd

    yaw = math.pi * (2 * torch.rand(n, generator=gen, dtype=torch.float64) - 1)
    xy0 = c.spawn_spread * (2 * torch.rand(n, 2, generator=gen, dtype=torch.float64) - 1)
    xy, asked = track(cmd_at, yaw, xy0, round(c.episode_seconds / dt), dt)
    walked = xy.norm(dim=-1)
    up = walked > c.tile_size / 2
    down = (walked < 0.5 * asked) & ~up
    return up.double().mean().item(), down.double().mean().item()


def run(s: Settings, cfg: TrainConfig) -> None:
    if not hasattr(cfg.env, "tile_size"):
        raise SystemExit(f"{cfg.task} has no terrain curriculum; give a terrain task")
    for heading in (False, True):
        up, down = odds(heading, cfg.num_envs, cfg.seed, cfg.task, cfg.env)
        name = "heading commands" if heading else "yaw-rate commands"
        print(f"{name:18s} promoted {up:.3f}  demoted {down:.3f}  (n={cfg.num_envs})")


if __name__ == "__main__":
    main(Settings, run, ("go1-rough", "--num-envs", "20000"))
