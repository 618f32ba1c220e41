"""Velocity tracking on generated rough terrain (tasks/terrain.py), with legged_gym's
terrain curriculum: the generic legged task (tasks/legged.py) on a heightfield instead of
a plane, for any robot description. `go1-rough` is the Go1's (tasks/go1.py).

The model holds two heightfields: the training terrain (geom `terrain`, centred at the
origin) and the fixed evaluation course (geom `course`, beside it along +x; 15 degree
slopes and 10 cm stairs, up and down). Both go into the export with their hashes.

- Spawning: each env starts at its tile's centre plus U(-spread, spread) in x and y, its
  home pose raised by the centre's height plus `spawn_clearance`: every sub-terrain keeps
  a flat platform there, wide enough for the spread and the robot's footprint (checked),
  so that nothing starts inside the terrain.
- Curriculum (legged_gym's rule), when an episode ends: an env that walked farther than
  half a tile from where it started moves up a row; one that walked less than half the
  distance its commands asked for (the integral of the commanded planar speed, the
  current command held over the episode's remaining time) moves down; one that passes
  the top row is sent to a random row. Distances are from the tile's centre. Levels start
  random in [0, init_level], drawn from the env's generator at its first reset. The mean level is logged every iteration (`task/terrain_level`) and
  is part of the checkpoint.
- Base height (the critic's) is the height above the terrain under the base, and the
  critic sees a height scan (the policy too with `scan_policy`): trot/heightfield.py.
- Leaving the map (its border included) ends the episode as a truncation (bootstrapped,
  not a fall): there is no ground beyond it.
- `terrain="course"`: each episode starts on a random tile of the course, with a fixed
  forward command `course_speed`; `trot eval --course` and `trot sim2sim --course` report
  per sub-terrain the share of episodes that reached the tile's edge (crossed the slope or
  stairs) before any fall.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import mujoco
import numpy as np
import torch
from torch import Tensor

from trot import heightfield as hf
from trot.sim.base import BatchedSim
from trot.tasks import terrain as tr
from trot.tasks.legged import LeggedConfig, LeggedVelocity
from trot.tasks.observation import ObsTerm

FOOTPRINT = 0.45
"""m: half-side of the square a standing robot covers; spawns keep it on the platform"""


@dataclass(frozen=True)
class RoughConfig(LeggedConfig):
    terrain: str = "train"
    """"train": the generated terrain with its curriculum; "course": the fixed evaluation
    course (trot eval/sim2sim --course)"""
    tile_size: float = 6.0
    """side of a terrain tile (m)"""
    terrain_rows: int = 8
    """difficulty levels"""
    terrain_cols: int = 8
    """sub-terrain columns"""
    terrain_resolution: float = 0.05
    """heightfield spacing (m); <= 0.05 keeps 10 cm stairs steps (tasks/terrain.py)"""
    terrain_border: float = 5.0
    """flat margin around the tiles (m)"""
    terrain_proportions: tuple[float, ...] = tr.TerrainConfig.proportions
    """column shares: flat, rough, slope_up, slope_down, stairs_up, stairs_down, obstacles"""
    terrain_seed: int = 0
    """the map's own seed (part of the model, not of the training seed)"""
    curriculum: bool = True
    """move envs between rows by how far they walked (else levels stay where they start)"""
    init_level: int = 3
    """levels start uniform in [0, init_level]"""
    start_row: int = -1
    """>= 0: every env starts on this row instead (with curriculum off: stays there, e.g.
    to evaluate one difficulty)"""
    spawn_spread: float = 0.5
    """start position = tile centre + U(-x, x) m in x and y (within the 2 m platform)"""
    spawn_clearance: float = 0.03
    """m added to the start height: the home pose with init_joint_noise reaches up to
    2.2 cm below its flat-ground height (2000 draws of the Go1)"""
    scan_grid: tuple[float, float, float] = (1.6, 1.0, 0.1)
    """height scan (length x, length y, spacing) in m around the base: 17 x 11 points"""
    scan_policy: bool = False
    """give the height scan to the policy too (False: the critic only)"""
    scan_noise: float = 0.05
    """policy scan: uniform noise half-width (m) per point and step"""
    scan_offset: float = 0.0
    """policy scan: a per-episode vertical offset U(-x, x) m (a perception bias)"""
    course_speed: float = 0.6
    """the forward command on the course (m/s)"""


# 15 degree slopes (rise/run tan 15 = 0.268) and 10 cm stairs, up and down, one column each
COURSE = tr.TerrainConfig(rows=1, cols=4, border=3.0, proportions=(0, 0, 1, 1, 1, 1, 0),
                          slope=(0.268, 0.268), step_height=(0.10, 0.10))


class LeggedRough(LeggedVelocity):
    """The legged task on rough terrain. A robot's: `class Go1Rough(LeggedRough): robot =
    GO1` (tasks/go1.py)."""

    config: RoughConfig

    # ---------------------------------------------------------------- terrain
    @cached_property
    def terrains(self) -> dict[str, tr.Terrain]:
        """The training terrain and the course, by geom name."""
        c = self.config
        train = tr.generate(tr.TerrainConfig(
            tile_size=c.tile_size, rows=c.terrain_rows, cols=c.terrain_cols,
            resolution=c.terrain_resolution, border=c.terrain_border,
            proportions=c.terrain_proportions, seed=c.terrain_seed))
        course = tr.generate(replace(COURSE, tile_size=c.tile_size,
                                     resolution=c.terrain_resolution))
        # beside the training map along +x, touching it: the two borders meet
        shift = (train.size[0] + course.size[0]) / 2
        course = replace(course, origin=(course.origin[0] + shift, course.origin[1]))
        return {"terrain": train, "course": course}

    @property
    def active(self) -> tr.Terrain:
        return self.terrains["course" if self.config.terrain == "course" else "terrain"]

    def build(self) -> mujoco.MjSpec:
        if self.config.terrain not in ("train", "course"):
            raise ValueError(f"env.terrain must be 'train' or 'course', got "
                             f"{self.config.terrain!r}")
        spec = super().build()
        floor = spec.geom(self._floor_name)
        friction = tuple(floor.friction)  # the robot's ground contact, kept
        spec.delete(floor)  # the terrain is the ground
        for name, t in self.terrains.items():
            tr.add_terrain(spec, t, name, friction)
        self._floor_name = "course" if self.config.terrain == "course" else "terrain"
        return spec

    # ---------------------------------------------------------------- observations
    def _scan_term(self, perceived: bool) -> ObsTerm:
        """The policy's scan is perceived (noise and a per-episode offset); the critic's
        is exact."""
        c = self.config
        p = len(hf.scan_offsets(c.scan_grid))
        # base height above each point, clipped as legged_gym's, around the home height
        return ObsTerm("height_scan", "height_scan", grid=c.scan_grid,
                       offset=(self._home_height(),) * p, clip=(-0.5, 1.5),
                       noise=c.scan_noise * perceived,
                       episode_offset=c.scan_offset * perceived)

    def _home_height(self) -> float:
        m = self._model()
        kid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, self.robot.home)
        return float(m.key_qpos[kid, 2])

    def policy_terms(self) -> tuple[ObsTerm, ...]:
        terms = super().policy_terms()
        return terms + (self._scan_term(True),) if self.config.scan_policy \
            else terms

    def critic_terms(self) -> tuple[ObsTerm, ...]:
        terms = tuple(ObsTerm("base_height", "height_scan", grid=(0.0, 0.0, 1.0),
                              clip=(-1.0, 2.0))
                      if t.name == "base_height" else replace(t, noise=0.0)
                      for t in super().critic_terms() if t.name != "height_scan")
        return terms + (self._scan_term(False),)

    # ---------------------------------------------------------------- setup
    def bind(self, sim: BatchedSim) -> None:
        super().bind(sim)
        c, n, dev = self.config, sim.num_envs, sim.device
        t = self.active
        self._maps, self._plane = hf.height_maps(sim.model, lambda a: torch.tensor(
            a, dtype=torch.float32, device=dev))
        self._centers = torch.tensor(t.tile_centers(), dtype=torch.float32, device=dev)
        cols = t.config.cols
        lo = np.asarray(t.origin) + 0.05
        self._bounds = torch.tensor([*lo, *(lo + np.asarray(t.size) - 0.1)], device=dev)
        if c.spawn_spread + FOOTPRINT > t.config.platform / 2:
            raise ValueError(f"env.spawn_spread {c.spawn_spread} + the robot's footprint "
                             f"{FOOTPRINT} m must stay on the tiles' flat platform: at most "
                             f"{t.config.platform / 2} m from the centre")
        self._col = torch.arange(n, device=dev) % cols  # [N] fixed while training
        self._next_col = self._col.clone()  # the columns initial_state spawned on
        self._level = torch.zeros(n, dtype=torch.long, device=dev)  # drawn at the first reset
        self._cmd_dist = torch.zeros(n, device=dev)  # commanded distance so far (m)
        self._elapsed = torch.zeros(n, device=dev)  # episode time so far (s)
        self._reached = torch.zeros(n, dtype=torch.bool, device=dev)
        self.scan_bias = torch.zeros(n, device=dev) if c.scan_offset > 0 else None
        # the curriculum's own stream (seeded from the env's at the first reset), so that
        # the env's draws per step stay those of the flat task
        self._gen = torch.Generator(device=dev)
        self._fresh = True  # the first reset of every env ends no episode
        if c.terrain == "course":
            v = c.course_speed
            self._cmd_low = torch.tensor([v, 0.0, 0.0], device=dev)
            self._cmd_high = self._cmd_low.clone()
            self._standing = 0.0
            if self._heading is not None:  # hold the spawn heading: walk straight across
                self._heading.spread = 0.0

    def surface(self, xy: Tensor) -> Tensor:
        """Terrain height (m) under world points xy [..., 2]."""
        return hf.surface_height(torch, self._maps, self._plane, xy[..., 0], xy[..., 1])

    # ---------------------------------------------------------------- episodes
    def restart(self) -> None:
        super().restart()
        self._fresh = True

    def _tile_centre(self) -> Tensor:  # [N, 2] world xy of each env's tile centre
        return self._centers[self._level, self._col, :2]

    def episode_end(self, sim: BatchedSim, mask: Tensor) -> None:
        if self._fresh or self.config.terrain == "course" or not self.config.curriculum:
            return
        rows = self.active.config.rows
        # legged_gym's rule, distances from the tile centre; the commanded distance is the
        # integral so far plus the current command over the episode's remaining time, so
        # an early fall counts against the whole episode's ask
        walked = (sim.qpos[:, :2] - self._tile_centre()).norm(dim=-1)
        left = (self.config.episode_seconds - self._elapsed).clamp(min=0.0)
        asked = self._cmd_dist + self.command[:, :2].norm(dim=-1) * left
        up = walked > self.config.tile_size / 2
        down = (walked < 0.5 * asked) & ~up
        level = (self._level + up.long() - down.long()).clamp(min=0)
        spread = torch.randint(0, rows, level.shape, device=level.device, generator=self._gen)
        level = torch.where(level >= rows, spread, level)
        self._level.copy_(torch.where(mask, level, self._level))

    def initial_state(self, sim: BatchedSim, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        qpos, qvel = super().initial_state(sim, gen)
        c, n, dev = self.config, sim.num_envs, sim.device
        t = self.active.config
        if self._fresh:  # the first reset: levels, and the curriculum's stream, from gen
            top = min(c.init_level, t.rows - 1)
            self._level.copy_(torch.randint(0, top + 1, (n,), generator=gen, device=dev)
                              if c.start_row < 0 else torch.full_like(self._level, min(
                                  c.start_row, t.rows - 1)))
            self._gen.manual_seed(int(torch.randint(0, 2**62, (), generator=gen,
                                                    device=dev)))  # once, not per step
            self._fresh = False
        if c.terrain == "course":  # a random tile of the course for each new episode
            self._next_col = torch.randint(0, t.cols, (n,), generator=gen, device=dev)
        centre = self._centers[self._level, self._next_col]  # [N, 3]
        qpos[:, :2] = centre[:, :2] + self.config.spawn_spread * (
            2 * torch.rand(n, 2, generator=gen, device=dev) - 1)
        # the footprint stays on the centre's flat platform (checked in bind)
        qpos[:, 2] += centre[:, 2] + self.config.spawn_clearance
        return qpos, qvel

    def staggered(self, sim: BatchedSim, elapsed: Tensor) -> None:
        self._elapsed.copy_(elapsed)  # a staggered first episode has that much less to go

    def on_reset(self, sim: BatchedSim, mask: Tensor, gen: torch.Generator) -> None:
        super().on_reset(sim, mask, gen)
        self._col.copy_(torch.where(mask, self._next_col, self._col))
        self._cmd_dist.masked_fill_(mask, 0.0)
        self._elapsed.masked_fill_(mask, 0.0)
        self._reached.masked_fill_(mask, False)
        if self.scan_bias is not None:
            o = self.config.scan_offset
            bias = o * (2 * torch.rand(sim.num_envs, generator=gen, device=sim.device) - 1)
            self.scan_bias.copy_(torch.where(mask, bias, self.scan_bias))

    # ---------------------------------------------------------------- stepping
    def reward_terms(self, sim: BatchedSim, action: Tensor) -> dict[str, tuple[float, Tensor]]:
        """As the flat task's; also advances the curriculum's clocks (the commanded distance
        and the episode time) and, on the course, whether the env has reached its tile's
        edge standing (a fall's step, which can tumble the base past it, does not count)."""
        self._cmd_dist += self._cmd_seen[:, :2].norm(dim=-1) * self.dt
        self._elapsed += self.dt
        if self.config.terrain == "course":
            away = (sim.qpos[:, :2] - self._tile_centre()).abs().amax(-1)
            self._reached |= (away >= self.config.tile_size / 2) & ~self.terminated(sim)
        return super().reward_terms(sim, action)

    def truncated(self, sim: BatchedSim) -> Tensor:
        """Leaving the map (there is no ground beyond it) ends the episode as a time limit
        does: no failure, bootstrapped."""
        xy, b = sim.qpos[:, :2], self._bounds
        return (xy < b[:2]).any(-1) | (xy > b[2:]).any(-1)

    def episode_outcomes(self, sim: BatchedSim) -> dict[str, Tensor]:
        """On the course: `crossed/TYPE`, 1 where the env reached its tile's edge before
        any fall, 0 where not, NaN for envs on another column."""
        if self.config.terrain != "course":
            return {}
        nan = torch.full_like(self._cmd_dist, torch.nan)
        return {f"crossed/{name}": torch.where(self._col == k, self._reached.float(), nan)
                for k, name in enumerate(self.active.config.column_types())}

    def iteration_metrics(self) -> dict[str, Tensor]:
        return {"terrain_level": self._level.float().mean()}

    # ---------------------------------------------------------------- checkpoints
    _ROUGH = ("_level", "_col", "_next_col", "_cmd_dist", "_elapsed", "_reached")

    def state_dict(self) -> dict[str, Tensor]:
        out = super().state_dict() | {f"terrain{k}": getattr(self, k).clone()
                                      for k in self._ROUGH}
        if self.scan_bias is not None:
            out["scan_bias"] = self.scan_bias.clone()
        return out | {"terrain_gen": self._gen.get_state()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        super().load_state_dict(state)
        for k in self._ROUGH:
            getattr(self, k).copy_(state[f"terrain{k}"])
        if self.scan_bias is not None:
            self.scan_bias.copy_(state["scan_bias"])
        self._gen.set_state(state["terrain_gen"])
        self._fresh = False
