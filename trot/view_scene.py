"""The MuJoCo model as a viser scene, for `trot view` (trot/viewer.py): one mesh per visible
geom, hung under a frame per body that moves with `MjData.xpos` / `xquat`; the world's own
geoms (floor, heightfields) are placed once. Meshes are made here with numpy from the
model's sizes (boxes, spheres, capsules, cylinders, ellipsoids, planes, mesh assets and
heightfields); textures are not drawn, materials give their colour.

viser is imported by the caller (trot/viewer.py), never here at import."""

from __future__ import annotations

import mujoco
import numpy as np

VISIBLE_GROUPS = 3
"""geom groups 0-2 are drawn (MuJoCo's own viewer shows these by default)"""
MAX_HFIELD_SIDE = 400
"""a heightfield is drawn with at most this many samples a side (every k-th sample): a
58 m training terrain at 5 cm would be 1.3 M vertices, too many for a browser"""
PLANE_HALF = 100.0
"""m: half-side of a plane whose MJCF size is 0 (infinite), and of the lines drawn on it"""

G = mujoco.mjtGeom


def _lathe(profile: list[tuple[float, float]], segments: int = 24) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """A surface of revolution about z: `profile` (radius, z) from top to bottom, each point
    a ring of `segments` vertices; consecutive rings joined by quads (two triangles each)."""
    a = np.linspace(0.0, 2 * np.pi, segments, endpoint=False)
    ring = np.stack([np.cos(a), np.sin(a)], 1)
    verts = np.concatenate([np.column_stack([r * ring, np.full(segments, z)])
                            for r, z in profile])
    faces = []
    for i in range(len(profile) - 1):
        for j in range(segments):
            p, q = i * segments + j, i * segments + (j + 1) % segments
            faces += [(p, p + segments, q), (q, p + segments, q + segments)]
    return verts, np.asarray(faces)


def _sphere_profile(radius: float, rings: int = 12, lift: float = 0.0
                    ) -> list[tuple[float, float]]:
    """A sphere's profile, top to bottom; `lift` > 0 pulls the hemispheres apart by 2 x lift
    along z (a capsule), keeping the equator twice."""
    t = np.linspace(0.0, np.pi, rings + 1)
    top = [(radius * np.sin(x), radius * np.cos(x) + lift) for x in t if x <= np.pi / 2]
    bottom = [(radius * np.sin(x), radius * np.cos(x) - lift) for x in t if x >= np.pi / 2]
    return top + bottom


def _box(half: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)],
                       dtype=float) * half
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4),
             (1, 5, 7, 3)]  # -x, +x, -y, +y, -z, +z, counter-clockwise seen from outside
    faces = [t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))]
    return corners, np.asarray(faces)


def _grid(heights: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray,
                                                                        np.ndarray]:
    """A height grid [rows (y), cols (x)] at the coordinates xs [cols] and ys [rows]."""
    rows, cols = heights.shape
    x, y = np.meshgrid(xs, ys)
    verts = np.column_stack([x.ravel(), y.ravel(), heights.ravel()])
    i, j = np.meshgrid(np.arange(rows - 1), np.arange(cols - 1), indexing="ij")
    p = (i * cols + j).ravel()
    faces = np.concatenate([np.stack([p, p + 1, p + cols + 1], 1),
                            np.stack([p, p + cols + 1, p + cols], 1)])
    return verts, faces


def _hfield(model: mujoco.MjModel, h: int) -> tuple[np.ndarray, np.ndarray]:
    """Every k-th sample of heightfield h (and its last row and column), where MuJoCo puts
    them: sample (i, j) at x = -sx + 2 sx j / (ncol - 1), y = -sy + 2 sy i / (nrow - 1)."""
    rows, cols = int(model.hfield_nrow[h]), int(model.hfield_ncol[h])
    adr = int(model.hfield_adr[h])
    data = np.asarray(model.hfield_data[adr:adr + rows * cols]).reshape(rows, cols)
    k = max(1, -(-max(rows, cols) // MAX_HFIELD_SIDE))
    ri, ci = (np.unique(np.r_[np.arange(0, n, k), n - 1]) for n in (rows, cols))
    sx, sy, top, _ = model.hfield_size[h]
    return _grid(data[np.ix_(ri, ci)] * top, -sx + 2 * sx * ci / (cols - 1),
                 -sy + 2 * sy * ri / (rows - 1))


def _mesh(model: mujoco.MjModel, m: int) -> tuple[np.ndarray, np.ndarray]:
    v0, nv = int(model.mesh_vertadr[m]), int(model.mesh_vertnum[m])
    f0, nf = int(model.mesh_faceadr[m]), int(model.mesh_facenum[m])
    return np.asarray(model.mesh_vert[v0:v0 + nv]), np.asarray(model.mesh_face[f0:f0 + nf])


def _plane(size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    hx, hy = (s if s > 0 else PLANE_HALF for s in size[:2])
    return _grid(np.zeros((2, 2)), np.array([-hx, hx]), np.array([-hy, hy]))


SHAPES = {  # geom type -> (model, geom, size) -> (vertices, faces) in the geom's frame
    G.mjGEOM_BOX: lambda m, g, size: _box(size),
    G.mjGEOM_SPHERE: lambda m, g, size: _scaled(_lathe(_sphere_profile(1.0)), size[0]),
    G.mjGEOM_ELLIPSOID: lambda m, g, size: _scaled(_lathe(_sphere_profile(1.0)), size),
    G.mjGEOM_CAPSULE: lambda m, g, size: _lathe(_sphere_profile(size[0], lift=size[1])),
    G.mjGEOM_CYLINDER: lambda m, g, size: _lathe([(0.0, size[1]), (size[0], size[1]),
                                                 (size[0], -size[1]), (0.0, -size[1])]),
    G.mjGEOM_PLANE: lambda m, g, size: _plane(size),
    G.mjGEOM_MESH: lambda m, g, size: _mesh(m, int(m.geom_dataid[g])),
    G.mjGEOM_HFIELD: lambda m, g, size: _hfield(m, int(m.geom_dataid[g])),
}


def _scaled(mesh: tuple[np.ndarray, np.ndarray], scale) -> tuple[np.ndarray, np.ndarray]:
    return mesh[0] * scale, mesh[1]


def geom_mesh(model: mujoco.MjModel, g: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(vertices [V, 3], faces [F, 3]) of geom g in its own frame, or None for a type that
    is not drawn (SDF, lines)."""
    shape = SHAPES.get(int(model.geom_type[g]))
    return None if shape is None else shape(model, g, np.asarray(model.geom_size[g], float))


def geom_color(model: mujoco.MjModel, g: int) -> tuple[tuple[int, int, int], float]:
    """(RGB 0-255, opacity): the material's colour where the geom has one."""
    mat = int(model.geom_matid[g])
    rgba = np.asarray(model.mat_rgba[mat] if mat >= 0 else model.geom_rgba[g])
    rgb = tuple(round(255 * float(c)) for c in np.clip(rgba[:3], 0.0, 1.0))
    return rgb, float(rgba[3])


def drawn_geoms(model: mujoco.MjModel) -> list[int]:
    return [g for g in range(model.ngeom) if model.geom_group[g] < VISIBLE_GROUPS
            and geom_color(model, g)[1] > 0.0]


def root_body(model: mujoco.MjModel) -> int:
    """The robot's root: the first body with a free joint (else the first body)."""
    return next((int(model.jnt_bodyid[j]) for j in range(model.njnt)
                 if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE), min(1, model.nbody - 1))


class SceneView:
    """The model's geoms in a viser scene under `prefix`; `update(data)` moves the bodies.
    `server` is a viser.ViserServer."""

    def __init__(self, server, model: mujoco.MjModel, data: mujoco.MjData,
                 prefix: str = "/mujoco"):
        self.server, self.model, self.prefix = server, model, prefix
        self.world = server.scene.add_frame(prefix, show_axes=False)  # moved by `follow`
        self.frames: dict[int, object] = {}
        self.meshes: list[object] = []
        mujoco.mj_kinematics(model, data)
        for g in drawn_geoms(model):
            self._add(g, data)
        self.update(data)

    def _add(self, g: int, data: mujoco.MjData) -> None:
        m = self.model
        mesh = geom_mesh(m, g)
        if mesh is None:
            return
        verts, faces = mesh
        rgb, alpha = geom_color(m, g)
        b = int(m.geom_bodyid[g])
        if b == 0:  # the world's: placed once where the model puts it
            quat = np.empty(4)
            mujoco.mju_mat2Quat(quat, data.geom_xmat[g])
            name, pos = f"{self.prefix}/world/g{g}", data.geom_xpos[g]
        else:
            if b not in self.frames:
                self.frames[b] = self.server.scene.add_frame(
                    f"{self.prefix}/b{b}", show_axes=False)
            name, pos, quat = f"{self.prefix}/b{b}/g{g}", m.geom_pos[g], m.geom_quat[g]
        if int(m.geom_type[g]) == G.mjGEOM_PLANE:  # lines on a floor show the robot moving
            self.meshes.append(self.server.scene.add_grid(
                f"{name}_grid", plane="xy", width=2 * PLANE_HALF, height=2 * PLANE_HALF,
                cell_size=0.5, fade_distance=30.0,
                section_size=2.0, position=tuple(float(x) for x in pos + 0.002 * (
                    data.geom_xmat[g].reshape(3, 3)[:, 2] if b == 0 else 0.0)),
                wxyz=tuple(float(x) for x in quat)))
        flat = int(m.geom_type[g]) in (G.mjGEOM_BOX, G.mjGEOM_MESH)
        self.meshes.append(self.server.scene.add_mesh_simple(
            name, vertices=np.asarray(verts, np.float32), faces=np.asarray(faces, np.uint32),
            color=rgb, opacity=None if alpha >= 1.0 else alpha, flat_shading=flat,
            side="double" if int(m.geom_type[g]) == G.mjGEOM_PLANE else "front",
            position=tuple(float(x) for x in pos), wxyz=tuple(float(x) for x in quat)))

    def update(self, data: mujoco.MjData) -> None:
        """Move every body's frame to its pose in `data` (after a forward or kinematics)."""
        with self.server.atomic():
            for b, frame in self.frames.items():
                frame.position = np.asarray(data.xpos[b], dtype=float)
                frame.wxyz = np.asarray(data.xquat[b], dtype=float)

    def follow(self, point: np.ndarray | None, to: np.ndarray | None = None) -> None:
        """Shift the whole scene so that the world point [3] sits at `to` [3] (default the
        origin), where the camera looks; None: the world's own place. A camera that
        follows by moving itself would fight the user's orbiting and the page's own
        camera reports."""
        target = np.zeros(3) if to is None else np.asarray(to, dtype=float)
        shift = np.zeros(3) if point is None else target - np.asarray(point, dtype=float)
        self.world.position = tuple(float(x) for x in shift)

    def show_bodies(self, visible: bool) -> None:
        """Show or hide everything but the world's own geoms (the robot)."""
        for frame in self.frames.values():
            frame.visible = visible

    def remove(self) -> None:
        self.world.remove()  # and everything under it
        self.frames, self.meshes = {}, []
