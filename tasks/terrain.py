"""Generated rough terrain: one MuJoCo heightfield built from a grid of tiles, rows of
increasing difficulty (along +x) by columns of sub-terrain types (along +y), inside a flat
border, as in legged_gym's terrain curriculum (Rudin et al. 2022).

Heights are numpy arrays built by vectorized code; the same config and seed give the same
terrain bit for bit (each tile draws from its own generator, seeded by (seed, row, col)).

Resolution: 0.05 m by default. MuJoCo's heightfield is two triangles per cell, so a step
between two points becomes a ramp one cell wide: at 0.05 m a 10 cm stair is a 63 degree
riser 5 cm deep, a step to a foot of 2 cm radius, not a slope. Finer costs memory
(points grow with 1/res^2) and gains little.

In the model: `add_terrain` writes the heights into the MjSpec as an hfield asset whose
data is a binary file (`<name>.bin`, MuJoCo's format: int32 rows, int32 cols, float32
heights) held in `spec.assets`: model.xml names the file and stays small, and the export
writes the file beside it (hashed in the contract). MuJoCo rescales file data to [0, 1]
(times the hfield's z size), so the data is stored already normalized and the geom sits at
the lowest height: the surface is exactly `heights` up to float32.

Sub-terrains are named from the robot's point of view at the tile centre, where it starts:
`slope_up` / `stairs_up` are pits it climbs out of, `slope_down` / `stairs_down` are
raised pyramids it descends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass(frozen=True)
class TerrainConfig:
    """A tiled terrain. Difficulty d runs from 0 (row 0) to 1 (the last row)."""

    tile_size: float = 6.0
    """side of a square tile (m)"""
    rows: int = 8
    """difficulty levels, along +x"""
    cols: int = 8
    """columns, along +y; each column is one sub-terrain type, by `proportions`"""
    resolution: float = 0.05
    """horizontal spacing of the height points (m); <= 0.05 keeps stairs steps"""
    border: float = 3.0
    """flat margin around the tiles (m), so robots near the edge stay on the ground"""
    proportions: tuple[float, ...] = (0.1, 0.1, 0.15, 0.15, 0.2, 0.2, 0.1)
    """share of columns per type, in SUBTERRAINS order (flat, rough, slope_up, slope_down,
    stairs_up, stairs_down, obstacles)"""
    seed: int = 0
    """the terrain's own seed (not the training seed: the map is part of the model)"""
    platform: float = 2.0
    """side of the flat square at each tile's centre, where robots start (m)"""
    slope: tuple[float, float] = (0.0, 0.4)
    """pyramid slope rise/run at difficulty 0 and 1 (0.4: 22 degrees)"""
    step_height: tuple[float, float] = (0.05, 0.20)
    """stair rise at difficulty 0 and 1 (m)"""
    step_width: float = 0.30
    """stair run (m)"""
    roughness: tuple[float, float] = (0.02, 0.08)
    """random rough: height noise half-range at difficulty 0 and 1 (m)"""
    obstacle_height: tuple[float, float] = (0.05, 0.18)
    """discrete obstacles: block height at difficulty 0 and 1 (m), up or down"""
    obstacles: int = 20
    """discrete obstacles: blocks per tile"""

    def validate(self) -> None:
        checks = [
            (self.tile_size > 0 and self.border >= 0, "tile_size > 0 and border >= 0"),
            (self.rows >= 1 and self.cols >= 1, "rows and cols >= 1"),
            (0 < self.resolution <= self.step_width / 2,
             "0 < resolution <= step_width / 2 (a stair needs two points per run)"),
            (len(self.proportions) == len(SUBTERRAINS) and min(self.proportions) >= 0
             and sum(self.proportions) > 0,
             f"proportions: {len(SUBTERRAINS)} shares >= 0 ({', '.join(SUBTERRAINS)})"),
            (0 < self.platform < self.tile_size, "0 < platform < tile_size"),
        ]
        for ok, accepted in checks:
            if not ok:
                raise ValueError(f"terrain config {self}: needs {accepted}")

    def column_types(self) -> tuple[str, ...]:
        """The sub-terrain type of each column: column c takes the type whose cumulative
        share first exceeds (c + 0.5) / cols."""
        edges = np.cumsum(self.proportions) / sum(self.proportions)
        names = tuple(SUBTERRAINS)
        return tuple(names[int(np.searchsorted(edges, (c + 0.5) / self.cols, side="right"))]
                     for c in range(self.cols))


def _lerp(rng: tuple[float, float], d: float) -> float:
    return rng[0] + (rng[1] - rng[0]) * d


def _edge_distance(x: np.ndarray, y: np.ndarray, c: TerrainConfig) -> np.ndarray:
    """Distance from the tile's edge inward (0 at the edge), capped at the platform."""
    return np.minimum(c.tile_size / 2 - np.maximum(np.abs(x), np.abs(y)),
                      (c.tile_size - c.platform) / 2)


def _flat(x, y, d, rng, c):
    return np.zeros_like(x)


def _rough(x, y, d, rng, c):
    """Uniform noise on a 0.1 m lattice, bilinearly interpolated, with the platform flat."""
    a, step = _lerp(c.roughness, d), 0.1
    n = int(np.ceil(c.tile_size / step)) + 2
    lattice = rng.uniform(-a, a, size=(n, n))
    gx, gy = (x + c.tile_size / 2) / step, (y + c.tile_size / 2) / step
    ix, iy = np.floor(gx).astype(int), np.floor(gy).astype(int)
    fx, fy = gx - ix, gy - iy
    h = (lattice[iy, ix] * (1 - fx) * (1 - fy) + lattice[iy, ix + 1] * fx * (1 - fy)
         + lattice[iy + 1, ix] * (1 - fx) * fy + lattice[iy + 1, ix + 1] * fx * fy)
    return np.where(np.maximum(np.abs(x), np.abs(y)) <= c.platform / 2, 0.0, h)


def _slope(sign):
    def f(x, y, d, rng, c):
        return sign * _lerp(c.slope, d) * _edge_distance(x, y, c)
    return f


def _stairs(sign):
    def f(x, y, d, rng, c):
        steps = np.floor(_edge_distance(x, y, c) / c.step_width + 1e-9)
        return sign * _lerp(c.step_height, d) * steps
    return f


def _obstacles(x, y, d, rng, c):
    """Rectangular blocks, up or down, of 0.4-1.0 m sides; none on the platform."""
    h, half = _lerp(c.obstacle_height, d), c.tile_size / 2
    k = c.obstacles
    centre = rng.uniform(-half, half, size=(k, 2))
    size = rng.uniform(0.4, 1.0, size=(k, 2))
    value = h * rng.choice([-1.0, 1.0], size=k)
    inside = ((np.abs(x[None] - centre[:, 0, None, None]) <= size[:, 0, None, None] / 2)
              & (np.abs(y[None] - centre[:, 1, None, None]) <= size[:, 1, None, None] / 2))
    top = (inside * np.arange(1, k + 1)[:, None, None]).max(0)  # [ny, nx] last block, 0: none
    out = np.where(top > 0, value[np.maximum(top - 1, 0)], 0.0)
    return np.where(np.maximum(np.abs(x), np.abs(y)) <= c.platform / 2, 0.0, out)


Subterrain = Callable[[np.ndarray, np.ndarray, float, np.random.Generator, TerrainConfig],
                      np.ndarray]
SUBTERRAINS: dict[str, Subterrain] = {
    "flat": _flat,
    "rough": _rough,
    "slope_up": _slope(-1.0),
    "slope_down": _slope(1.0),
    "stairs_up": _stairs(-1.0),
    "stairs_down": _stairs(1.0),
    "obstacles": _obstacles,
}
"""(x, y [ny, nx] tile-centred coordinates, difficulty, generator, config) -> heights (m)"""


@dataclass(frozen=True)
class Terrain:
    """Generated heights and where the tiles are. World x, y of point [iy, ix]:
    origin + resolution * (ix, iy), once the hfield is placed by `add_terrain`."""

    config: TerrainConfig
    heights: np.ndarray  # [ny, nx] float32, m
    origin: tuple[float, float]  # world (x, y) of heights[0, 0]

    @property
    def size(self) -> tuple[float, float]:
        """The map's extent (m) in x and y."""
        ny, nx = self.heights.shape
        r = self.config.resolution
        return (nx - 1) * r, (ny - 1) * r

    def tile_centers(self) -> np.ndarray:
        """[rows, cols, 3] world x, y and the surface height at each tile's centre."""
        c = self.config
        r, k = np.meshgrid(np.arange(c.rows), np.arange(c.cols), indexing="ij")
        x = self.origin[0] + c.border + (r + 0.5) * c.tile_size
        y = self.origin[1] + c.border + (k + 0.5) * c.tile_size
        ix = np.rint((x - self.origin[0]) / c.resolution).astype(int)
        iy = np.rint((y - self.origin[1]) / c.resolution).astype(int)
        return np.stack([x, y, self.heights[iy, ix]], -1)


def generate(c: TerrainConfig, center: tuple[float, float] = (0.0, 0.0)) -> Terrain:
    """The terrain of `c`, its map centred at world `center`."""
    c.validate()
    res = c.resolution
    n_tile = int(round(c.tile_size / res))
    n_border = int(round(c.border / res))
    nx, ny = 2 * n_border + c.rows * n_tile + 1, 2 * n_border + c.cols * n_tile + 1
    heights = np.zeros((ny, nx))
    local = (np.arange(n_tile + 1) - n_tile / 2) * res  # a tile's points, both edges
    x, y = np.meshgrid(local, local)  # [ny_t, nx_t]
    types = c.column_types()
    for row in range(c.rows):
        d = row / (c.rows - 1) if c.rows > 1 else 1.0
        for col in range(c.cols):
            rng = np.random.default_rng([c.seed, row, col])
            h = SUBTERRAINS[types[col]](x, y, d, rng, c)
            x0, y0 = n_border + row * n_tile, n_border + col * n_tile
            heights[y0:y0 + n_tile + 1, x0:x0 + n_tile + 1] = h
    heights = heights.astype(np.float32)
    origin = (center[0] - (nx - 1) * res / 2, center[1] - (ny - 1) * res / 2)
    return Terrain(c, heights, origin)


HFIELD_BASE = 0.5
"""depth (m) of the heightfield's solid base below its lowest point"""


def hfield_file(heights: np.ndarray) -> tuple[bytes, float, float]:
    """MuJoCo's binary heightfield file for `heights`, normalized to [0, 1]; and the
    (lowest height, range) that map it back: z = low + range * data."""
    low, high = float(heights.min()), float(heights.max())
    span = max(high - low, 1e-6)  # a flat map still needs a positive z size
    data = ((heights.astype(np.float64) - low) / span).astype(np.float32)
    ny, nx = heights.shape
    return np.array([ny, nx], dtype=np.int32).tobytes() + data.tobytes(), low, span


CONTACT_TIMECONST = 0.01
"""s: the terrain contact's solref time constant, 2 x the Go1's 5 ms timestep (add_terrain)"""


def add_terrain(spec: mujoco.MjSpec, terrain: Terrain, name: str,
                friction: tuple[float, float, float] = (1.0, 0.005, 1e-4)) -> str:
    """Add the terrain as hfield asset `name` (file `<name>.bin`) and a world geom `name`
    colliding like trot's floor (contype 1, priority 1: its friction and solref are every
    contact's). Returns the file name.

    Stiffer than the floor, on purpose: MuJoCo collides a geom with each triangle prism
    of the heightfield, and once a 2 cm foot sphere sinks more than about a cell's
    inradius (1.5 cm at 0.05 m), the nearest prism face can be a side, so the contact
    pushes sideways and the foot keeps sinking. With the floor's soft default contact,
    random actions on an all-flat terrain left 37% of Go1 foot samples more than 2 cm
    below their standing height (a plane: 1.5%). The stiffest stable time constant (2
    timesteps) brings that to 0.8% (docs/terrain.md). A contact margin would help more
    (0.2% with 3 mm) but MJX does not implement margins on heightfields."""
    blob, low, span = hfield_file(terrain.heights)
    file = f"{name}.bin"
    spec.assets = {**spec.assets, file: blob}
    sx, sy = terrain.size
    spec.add_hfield(name=name, file=file, size=[sx / 2, sy / 2, span, HFIELD_BASE])
    ox, oy = terrain.origin
    spec.worldbody.add_geom(name=name, type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname=name,
                            pos=[ox + sx / 2, oy + sy / 2, low], contype=1, conaffinity=0,
                            priority=1, friction=list(friction), rgba=[0.45, 0.42, 0.38, 1],
                            solref=[CONTACT_TIMECONST, 1.0])
    return file
