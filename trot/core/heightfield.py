"""The surface MuJoCo collides with, read from a compiled model's heightfields, as a lookup
(no ray casts). Torch-free and array-generic: the same functions run in torch on the
sim's device (the height scan in training) and in numpy on the robot side (sim2sim).

MuJoCo's heightfield is two triangles per cell, split along the diagonal from the cell's
(x0, y0) corner to its (x1, y1) corner, not a bilinear patch (at a saddle cell the two
differ by up to half the cell's height range). Row i of the data lies at
y = -size_y + 2 size_y i / (nrow - 1), column j at x likewise; z = geom z + size_z * data.
tests/test_terrain.py checks the lookup against mj_ray.

Cost (go1-rough's 187-point scan of 1024 envs: 190k points): each triangle is stored as
its plane over the cell's fractions, so a point costs one row gather and two multiply-adds
(about 3 ms on 2 CPU cores, half the corner-gathering lookup's); on the host, a map whose
bounding box the points miss is skipped (go1-rough's course, beside the terrain).

A height scan is a grid of points in the yaw-aligned base frame (x forward, y left, z up,
the base's heading only): `scan_offsets(grid)` gives their (x, y), x-major: the point
order is x from -lx/2 to +lx/2, and for each x, y from -ly/2 to +ly/2. A scan value is the
base's height above the surface at the point: base z - surface z.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

FLOAT32_EXACT = 2 ** 24
"""float32 holds every integer below this: triangle rows are counted in floats below it"""
OFF_MAP = -1e3
"""surface height (m) where no heightfield covers a point and the model has no plane"""


@dataclass(frozen=True)
class HeightMap:
    """One heightfield geom: heights (m, world z) [nrow, ncol] over a world-aligned grid.
    Build it with `height_map`, which also derives `planes`."""

    heights: Any  # [nrow, ncol] array (numpy or torch)
    x0: float  # world x of column 0
    y0: float  # world y of row 0
    dx: float
    dy: float
    planes: Any  # [(nrow - 1) * (ncol - 1) * 2, 3] each triangle's z = c0 + c1 fx + c2 fy


def height_map(heights: np.ndarray, x0: float, y0: float, dx: float, dy: float,
               as_array=np.asarray) -> HeightMap:
    """A HeightMap of heights [nrow, ncol] (float64 numpy), `as_array` applied to its
    arrays. Each cell's two triangles become planes over the cell's fractions (fx, fy) in
    [0, 1]: the lookup is then one row gather and two multiply-adds per point."""
    h = np.asarray(heights, dtype=np.float64)
    h00, h10, h01, h11 = h[:-1, :-1], h[:-1, 1:], h[1:, :-1], h[1:, 1:]
    lower = np.stack([h00, h10 - h00, h11 - h10], -1)  # fx >= fy: (x0,y0) (x1,y0) (x1,y1)
    upper = np.stack([h00, h11 - h01, h01 - h00], -1)  # fx < fy: (x0,y0) (x0,y1) (x1,y1)
    planes = np.stack([lower, upper], 2).reshape(-1, 3)  # row (cell * 2 + upper)
    return HeightMap(as_array(h), x0, y0, dx, dy, as_array(planes))


def height_maps(model, as_array=np.asarray) -> tuple[tuple[HeightMap, ...], float | None]:
    """Every world hfield geom of `model` (unrotated: trot's terrains) as a HeightMap with
    `as_array` applied to its arrays, and the height of the model's ground plane (None:
    no plane). A rotated hfield geom is refused."""
    import mujoco

    maps, plane = [], None
    for g in range(model.ngeom):
        if model.geom_bodyid[g] != 0:
            continue
        if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE and plane is None:
            plane = float(model.geom_pos[g, 2])
        if model.geom_type[g] != mujoco.mjtGeom.mjGEOM_HFIELD:
            continue
        if not np.allclose(model.geom_quat[g], [1, 0, 0, 0]):
            raise ValueError("height lookup: heightfield geoms must be unrotated")
        h = int(model.geom_dataid[g])
        nrow, ncol = int(model.hfield_nrow[h]), int(model.hfield_ncol[h])
        sx, sy, sz, _ = (float(v) for v in model.hfield_size[h])
        adr = int(model.hfield_adr[h])
        data = np.asarray(model.hfield_data[adr:adr + nrow * ncol], dtype=np.float64)
        z = model.geom_pos[g, 2] + sz * data.reshape(nrow, ncol)
        px, py = (float(v) for v in model.geom_pos[g, :2])
        maps.append(height_map(z, px - sx, py - sy, 2 * sx / (ncol - 1),
                               2 * sy / (nrow - 1), as_array))
    return tuple(maps), plane


def _surface(xp, m: HeightMap, x, y):
    """Surface height of one map at world points x, y (any shape), and where it covers
    them."""
    nrow, ncol = m.heights.shape
    gx, gy = (x - m.x0) / m.dx, (y - m.y0) / m.dy
    cx = xp.clip(xp.nan_to_num(gx), 0, ncol - 1)  # a diverged env indexes cell 0
    cy = xp.clip(xp.nan_to_num(gy), 0, nrow - 1)
    inside = (cx == gx) & (cy == gy)  # False outside, and for NaN
    j = xp.clip(xp.floor(cx), 0, ncol - 2)
    i = xp.clip(xp.floor(cy), 0, nrow - 2)
    fx, fy = cx - j, cy - i
    upper = fx < fy
    if len(m.planes) < FLOAT32_EXACT:  # one conversion of an exact float
        row = _as_index(xp, (i * (ncol - 1) + j) * 2 + upper)
    else:
        row = (_as_index(xp, i) * (ncol - 1) + _as_index(xp, j)) * 2 + _as_index(xp, upper)
    c = _rows(m.planes, row)  # [..., 3]
    return c[..., 0] + c[..., 1] * fx + c[..., 2] * fy, inside


def _as_index(xp, a):
    return a.long() if hasattr(a, "long") else a.astype(np.int64)


def _rows(table, index):
    """table[index] for a 2-D table: torch's index_select is several times faster than
    its advanced indexing on the CPU."""
    if hasattr(table, "index_select"):
        return table.index_select(0, index.reshape(-1)).reshape(*index.shape, -1)
    return table[index]


def surface_height(xp, maps: tuple[HeightMap, ...], plane: float | None, x, y):
    """The surface at world points x, y (any shape; xp: numpy or torch): the heightfield
    that covers a point (the highest where several do, or the last listed with a plane),
    else the ground plane taken as infinite, else OFF_MAP. trot's terrains have no plane
    and heightfields that do not overlap."""
    z = xp.full_like(x, OFF_MAP if plane is None else plane)
    for m in maps:
        if _misses(m, x, y):
            continue
        h, inside = _surface(xp, m, x, y)
        z = xp.where(inside, xp.maximum(h, z) if plane is None else h, z)
    return z


def _misses(m: HeightMap, x, y) -> bool:
    """Whether the points' bounding box misses map m, where that check is free: numpy or
    torch on the CPU. On an accelerator it would sync the host, so every map is computed
    there. (go1-rough's model holds the course beside the training terrain: training
    skips it.)"""
    if getattr(getattr(x, "device", None), "type", "cpu") != "cpu":
        return False
    nrow, ncol = m.heights.shape
    return bool(x.min() > m.x0 + (ncol - 1) * m.dx or x.max() < m.x0
                or y.min() > m.y0 + (nrow - 1) * m.dy or y.max() < m.y0)


def scan_offsets(grid: tuple[float, float, float]) -> np.ndarray:
    """[P, 2] base-frame (x, y) of a scan grid (lx, ly, spacing): x-major, see the module
    docstring. lx = ly = 0 is one point under the base."""
    if len(grid) != 3 or not (grid[0] >= 0 and grid[1] >= 0 and grid[2] > 0):
        raise ValueError(f"scan grid (lx, ly, spacing) needs lx, ly >= 0 and spacing > 0, "
                         f"got {tuple(grid)}")
    lx, ly, step = grid
    xs = np.linspace(-lx / 2, lx / 2, int(round(lx / step)) + 1)
    ys = np.linspace(-ly / 2, ly / 2, int(round(ly / step)) + 1)
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    return np.stack([gx.ravel(), gy.ravel()], -1)


def scan(xp, maps, plane, base_pos, base_quat, offsets):
    """Base height above the surface at each scan point: [N, P] from base_pos [N, 3],
    base_quat [N, 4] (w, x, y, z) and offsets [P, 2] (yaw-aligned base frame)."""
    w, qx, qy, qz = (base_quat[:, k] for k in range(4))
    yaw = xp.arctan2(2 * (w * qz + qx * qy), 1 - 2 * (qy * qy + qz * qz))
    c, s = xp.cos(yaw), xp.sin(yaw)
    # the yaw rotation as two [N, 2] x [2, P] products: one op each, not four
    px = base_pos[:, 0:1] + xp.stack([c, -s], -1) @ offsets.T  # [N, P]
    py = base_pos[:, 1:2] + xp.stack([s, c], -1) @ offsets.T
    return base_pos[:, 2:3] - surface_height(xp, maps, plane, px, py)


def mirror_permutation(grid: tuple[float, float, float]) -> list[int]:
    """The scan point at (x, -y) for each point (x, y): the left-right mirror."""
    pts = scan_offsets(grid)
    ny = int(round(grid[1] / grid[2])) + 1
    return [int(k - k % ny + (ny - 1 - k % ny)) for k in range(len(pts))]

