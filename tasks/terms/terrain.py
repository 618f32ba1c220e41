"""Rough ground (tasks/terrain.py generates it) as terms: `Terrain`, the heightfields the
robot stands on, where each env spawns, the map's edge and the fixed evaluation course; and
`TerrainCurriculum`, legged_gym's rule that moves envs between difficulty rows.

The model holds two heightfields: the training terrain (geom `terrain`, centred at the
origin) and the course (geom `course`, beside it along +x; 15 degree slopes and 10 cm
stairs, up and down). `terrain="course"` puts every episode on a random tile of the course
with a fixed forward command `course_speed`, and records per sub-terrain whether the robot
reached its tile's edge before any fall (`trot eval --course`, `trot sim2sim --course`).
docs/terrain.md describes spawning, the curriculum and the scans."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import mujoco
import numpy as np
import torch
from torch import Tensor

from trot.core import heightfield as hf
from trot.tasks import terrain as tr
from trot.tasks.terms.body import Body, Step
from trot.tasks.terms.commands import VelocityCommand
from trot.tasks.terms.state import Term

FOOTPRINT = 0.45
"""m: half-side of the square a standing robot covers; spawns keep it on the platform"""

# 15 degree slopes (rise/run tan 15 = 0.268) and 10 cm stairs, up and down, one column each
COURSE = tr.TerrainConfig(rows=1, cols=4, border=3.0, proportions=(0, 0, 1, 1, 1, 1, 0),
                          slope=(0.268, 0.268), step_height=(0.10, 0.10))
MODES = ("train", "course")


@lru_cache(maxsize=4)
def _maps(tile: float, rows: int, cols: int, resolution: float, border: float,
          proportions: tuple[float, ...], seed: int) -> dict[str, tr.Terrain]:
    train = tr.generate(tr.TerrainConfig(tile_size=tile, rows=rows, cols=cols,
                                         resolution=resolution, border=border,
                                         proportions=proportions, seed=seed))
    course = tr.generate(replace(COURSE, tile_size=tile, resolution=resolution))
    # beside the training map along +x, touching it: the two borders meet
    shift = (train.size[0] + course.size[0]) / 2
    return {"terrain": train, "course": replace(course, origin=(course.origin[0] + shift,
                                                                  course.origin[1]))}


def terrains(c) -> dict[str, tr.Terrain]:
    """The training terrain and the course of config `c`, by geom name."""
    return _maps(c.tile_size, c.terrain_rows, c.terrain_cols, c.terrain_resolution,
                 c.terrain_border, tuple(c.terrain_proportions), c.terrain_seed)


def add_ground(spec: mujoco.MjSpec, c, floor: str) -> str:
    """Replace the floor geom of `spec` with both heightfields (its friction kept); returns
    the geom the robot walks on."""
    if c.terrain not in MODES:
        raise ValueError(f"env.terrain must be 'train' or 'course', got {c.terrain!r}")
    geom = spec.geom(floor)
    friction = tuple(geom.friction)  # the robot's ground contact, kept
    spec.delete(geom)  # the terrain is the ground
    for name, t in terrains(c).items():
        tr.add_terrain(spec, t, name, friction)
    return "course" if c.terrain == "course" else "terrain"


class Terrain(Term):
    """Each env's tile (level: row, col: column), the map's bounds, the per-episode scan
    bias (with scan_offset) and, on the course, whether the env reached its tile's edge."""

    def __init__(self, body: Body):
        c, n, dev = body.config, body.n, body.device
        self.course = c.terrain == "course"
        t = terrains(c)["course" if self.course else "terrain"]
        self.rows, self.cols = t.config.rows, t.config.cols
        self.columns = t.config.column_types()
        self.maps, self.plane = hf.height_maps(body.sim.model, lambda a: torch.tensor(
            a, dtype=torch.float32, device=dev))
        self.centers = torch.tensor(t.tile_centers(), dtype=torch.float32, device=dev)
        lo = np.asarray(t.origin) + 0.05
        self.bounds = torch.tensor([*lo, *(lo + np.asarray(t.size) - 0.1)], device=dev)
        if c.spawn_spread + FOOTPRINT > t.config.platform / 2:
            raise ValueError(f"env.spawn_spread {c.spawn_spread} + the robot's footprint "
                             f"{FOOTPRINT} m must stay on the tiles' flat platform: at most "
                             f"{t.config.platform / 2} m from the centre")
        self.col = torch.arange(n, device=dev) % self.cols  # [N] fixed while training
        self.next_col = self.col.clone()  # the columns `place` spawned on
        self.level = torch.zeros(n, dtype=torch.long, device=dev)  # drawn at the first reset
        self.reached = torch.zeros(n, dtype=torch.bool, device=dev)  # the course's edge
        self.scan_bias = torch.zeros(n, device=dev) if c.scan_offset > 0 else None
        # the curriculum's own stream (seeded from the env's at the first reset), so that
        # the env's draws per step stay those of the flat task
        self.gen = torch.Generator(device=dev)
        self.fresh = True  # the first reset of every env ends no episode
        body.surface = self.surface  # every height above the ground reads the terrain
        if self.course:  # walk straight across at the course's speed
            body.term(VelocityCommand).hold(c.course_speed)

    def surface(self, xy: Tensor) -> Tensor:
        """Terrain height (m) under world points xy [..., 2]."""
        return hf.surface_height(torch, self.maps, self.plane, xy[..., 0], xy[..., 1])

    def tile_centre(self) -> Tensor:  # [N, 2] world xy of each env's tile centre
        return self.centers[self.level, self.col, :2]

    def restart(self) -> None:
        self.fresh = True

    def place(self, body: Body, qpos: Tensor, gen: torch.Generator) -> None:
        """Spawn at the tile's centre + U(-spread, spread) in x and y, raised by the
        centre's height + spawn_clearance (the footprint stays on its flat platform)."""
        c, n, dev = body.config, body.n, body.device
        if self.fresh:  # the first reset: levels, and the curriculum's stream, from gen
            top = min(c.init_level, self.rows - 1)
            self.level.copy_(torch.randint(0, top + 1, (n,), generator=gen, device=dev)
                             if c.start_row < 0 else torch.full_like(self.level, min(
                                 c.start_row, self.rows - 1)))
            self.gen.manual_seed(int(torch.randint(0, 2**62, (), generator=gen,
                                                   device=dev)))  # once, not per step
            self.fresh = False
        if self.course:  # a random tile of the course for each new episode
            self.next_col = torch.randint(0, self.cols, (n,), generator=gen, device=dev)
        centre = self.centers[self.level, self.next_col]  # [N, 3]
        qpos[:, :2] = centre[:, :2] + c.spawn_spread * (
            2 * torch.rand(n, 2, generator=gen, device=dev) - 1)
        qpos[:, 2] += centre[:, 2] + c.spawn_clearance

    def reset(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        self.col.copy_(torch.where(mask, self.next_col, self.col))
        self.reached.masked_fill_(mask, False)
        if self.scan_bias is not None:
            o = body.config.scan_offset
            bias = o * (2 * torch.rand(body.n, generator=gen, device=body.device) - 1)
            self.scan_bias.copy_(torch.where(mask, bias, self.scan_bias))

    def post_step(self, step: Step) -> None:
        """On the course: reaching the tile's edge standing counts (a fall's step, which
        can tumble the base past it, does not)."""
        if self.course:
            b = step.body
            away = (b.sim.qpos[:, :2] - self.tile_centre()).abs().amax(-1)
            self.reached |= (away >= b.config.tile_size / 2) & ~b.failed()

    def truncated(self, body: Body) -> Tensor:
        """Leaving the map (there is no ground beyond it) ends the episode as a time limit
        does: no failure, bootstrapped."""
        xy, b = body.sim.qpos[:, :2], self.bounds
        return (xy < b[:2]).any(-1) | (xy > b[2:]).any(-1)

    def episode_outcomes(self) -> dict[str, Tensor]:
        """On the course: `crossed/TYPE`, 1 where the env reached its tile's edge before
        any fall, 0 where not, NaN for envs on another column."""
        if not self.course:
            return {}
        nan = torch.full(self.reached.shape, torch.nan, device=self.reached.device)
        return {f"crossed/{name}": torch.where(self.col == k, self.reached.float(), nan)
                for k, name in enumerate(self.columns)}

    def iteration_metrics(self) -> dict[str, Tensor]:
        return {"terrain_level": self.level.float().mean()}


class TerrainCurriculum(Term):
    """legged_gym's rule, when an episode ends: an env that walked farther than half a tile
    from its tile's centre moves up a row; one that walked less than half the distance its
    commands asked for (the integral of the commanded planar speed so far, plus the current
    command over the episode's remaining time) moves down; one that passes the top row is
    sent to a random row. Off with curriculum=False and on the course."""

    def __init__(self, body: Body):
        self.terrain, self.body = body.term(Terrain), body
        self.cmd_dist = torch.zeros(body.n, device=body.device)  # commanded distance (m)

    @property
    def elapsed(self) -> Tensor:
        """[N] s of each env's episode so far: the env's clock (`Body.episode.step`) x dt,
        read rather than kept, so that a staggered first episode (whose clock
        `Env.reset(stagger=True)` starts late) has that much less to go."""
        return self.body.episode.step * self.body.dt

    def reset(self, body: Body, mask: Tensor, gen: torch.Generator) -> None:
        self.cmd_dist.masked_fill_(mask, 0.0)

    def post_step(self, step: Step) -> None:
        self.cmd_dist += step.command[:, :2].norm(dim=-1) * step.body.dt

    def episode_end(self, body: Body, mask: Tensor) -> None:
        t, c = self.terrain, body.config
        if t.fresh or t.course or not c.curriculum:
            return
        walked = (body.sim.qpos[:, :2] - t.tile_centre()).norm(dim=-1)
        left = (c.episode_seconds - self.elapsed).clamp(min=0.0)
        asked = self.cmd_dist + body.term(VelocityCommand).command[:, :2].norm(dim=-1) * left
        up = walked > c.tile_size / 2
        down = (walked < 0.5 * asked) & ~up
        level = (t.level + up.long() - down.long()).clamp(min=0)
        spread = torch.randint(0, t.rows, level.shape, device=level.device, generator=t.gen)
        t.level.copy_(torch.where(mask, torch.where(level >= t.rows, spread, level), t.level))
