"""The surface MuJoCo collides with, read from a compiled model's heightfields, as a lookup
(no ray casts). Torch-free and array-generic: the same functions run in torch on the
sim's device (the height scan in training) and in numpy on the robot side (sim2sim).

MuJoCo's heightfield is two triangles per cell, split along the diagonal from the cell's
(x0, y0) corner to its (x1, y1) corner, not a bilinear patch (at a saddle cell the two
differ by up to half the cell's height range). Row i of the data lies at
y = -size_y + 2 size_y i / (nrow - 1), column j at x likewise; z = geom z + size_z * data.
tests/test_terrain.py checks the lookup against mj_ray.

A height scan is a grid of points in the yaw-aligned base frame (x forward, y left, z up,
the base's heading only): `scan_offsets(grid)` gives their (x, y), x-major: the point
order is x from -lx/2 to +lx/2, and for each x, y from -ly/2 to +ly/2. A scan value is the
base's height above the surface at the point: base z - surface z.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

OFF_MAP = -1e3
"""surface height (m) where no heightfield covers a point and the model has no plane"""


@dataclass(frozen=True)
class HeightMap:
    """One heightfield geom: heights (m, world z) [nrow, ncol] over a world-aligned grid."""

    heights: Any  # [nrow, ncol] array (numpy or torch)
    x0: float  # world x of column 0
    y0: float  # world y of row 0
    dx: float
    dy: float


def height_maps(model, as_array=np.asarray) -> tuple[tuple[HeightMap, ...], float | None]:
    """Every world hfield geom of `model` (unrotated: trot's terrains) as a HeightMap with
    `as_array` applied to its heights, and the height of the model's ground plane (None:
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
        maps.append(HeightMap(as_array(z), px - sx, py - sy, 2 * sx / (ncol - 1),
                              2 * sy / (nrow - 1)))
    return tuple(maps), plane


def _surface(xp, m: HeightMap, x, y):
    """Surface height of one map at world points x, y (any shape), and where it covers
    them."""
    nrow, ncol = m.heights.shape
    gx, gy = (x - m.x0) / m.dx, (y - m.y0) / m.dy
    inside = (gx >= 0) & (gx <= ncol - 1) & (gy >= 0) & (gy <= nrow - 1)  # False for NaN
    gx, gy = xp.nan_to_num(gx), xp.nan_to_num(gy)  # a diverged env indexes cell 0
    j = xp.clip(xp.floor(gx), 0, ncol - 2)
    i = xp.clip(xp.floor(gy), 0, nrow - 2)
    fx, fy = gx - j, gy - i
    flat = m.heights.reshape(-1)
    k = _as_index(xp, i) * ncol + _as_index(xp, j)
    lower = fx >= fy  # the triangle (x0,y0) (x1,y0) (x1,y1), else (x0,y0) (x0,y1) (x1,y1)
    # three corners: (x0, y0), (x1, y1) and the triangle's third, (x1, y0) or (x0, y1)
    h00, h11 = flat[k], flat[k + ncol + 1]
    hm = flat[k + xp.where(lower, 1, ncol)]
    a, b = xp.where(lower, fx, fy), xp.where(lower, fy, fx)  # along h00->hm, hm->h11
    return h00 + a * (hm - h00) + b * (h11 - hm), inside


def _as_index(xp, a):
    return a.long() if hasattr(a, "long") else a.astype(np.int64)


def surface_height(xp, maps: tuple[HeightMap, ...], plane: float | None, x, y):
    """The surface at world points x, y (any shape; xp: numpy or torch): the heightfield
    that covers a point (the highest where several do, or the last listed with a plane),
    else the ground plane taken as infinite, else OFF_MAP. trot's terrains have no plane
    and heightfields that do not overlap."""
    z = xp.zeros_like(x) + (OFF_MAP if plane is None else plane)
    for m in maps:
        h, inside = _surface(xp, m, x, y)
        z = xp.where(inside, xp.maximum(h, z) if plane is None else h, z)
    return z


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
    c, s = xp.cos(yaw)[:, None], xp.sin(yaw)[:, None]
    ox, oy = offsets[None, :, 0], offsets[None, :, 1]
    px = base_pos[:, 0:1] + c * ox - s * oy  # [N, P]
    py = base_pos[:, 1:2] + s * ox + c * oy
    return base_pos[:, 2:3] - surface_height(xp, maps, plane, px, py)


def mirror_permutation(grid: tuple[float, float, float]) -> list[int]:
    """The scan point at (x, -y) for each point (x, y): the left-right mirror."""
    pts = scan_offsets(grid)
    ny = int(round(grid[1] / grid[2])) + 1
    return [int(k - k % ny + (ny - 1 - k % ny)) for k in range(len(pts))]

