"""The observation source kinds, one definition each: what a term of the kind reads on the
env side (a column block of the batched source pool) and on the robot side (a plain
MjData and the runner's command / last action), its size, its json and its left-right
mirror (symmetry augmentation). A new kind is one `Kind` in `KINDS`.

Torch-free on purpose: the robot runner (export/runner.py) imports this module without
torch; the env side only calls the getters it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trot.core import heightfield as hf


@dataclass(frozen=True)
class Sizes:
    """What a term's size can depend on."""

    sensor_dims: dict[str, int]  # MJCF sensor name -> its dimension
    command_dim: int
    action_dim: int


@dataclass(frozen=True)
class Kind:
    """One source kind. `term` arguments are ObsTerm (tasks/observation.py); `src` is the
    term's json `source` dict (what the robot side reads)."""

    name: str
    size: Callable[[Any, Sizes], int]
    """the term's width"""
    pool: Callable[[Any], str]
    """the key of the pool block the term reads (terms of one key share the block)"""
    source: Callable[[Any, Any], tuple[int, Callable[[], Any]]]
    """(env, term) -> the block's width and a getter of the block [N, width]"""
    columns: Callable[[Any, int, dict[str, tuple[int, int]]], list[int]]
    """(term, size, sensor ranges) -> the term's columns within its block"""
    to_json: Callable[[Any], dict]
    """the term's json `source`, beside "kind\""""
    robot: Callable[[Any, dict, Any], np.ndarray] | None
    """(ObservationBuilder, src, MjData) -> the raw values on a robot; None: privileged,
    no robot measures it (the runner refuses the term)"""
    mirror: Callable[[Any, int, "MirrorContext"], tuple[list[int], list[float]]] | None
    """(term, size, context) -> (perm, signs) over the term's values: the mirrored
    state's values are signs * values[perm]. None: the term must declare ObsTerm.mirror"""
    named_field: bool = False
    """the term names an MjData field or a per-env model parameter (ObsTerm.field)"""
    clippable: bool = False
    """the term may clamp its raw values (ObsTerm.clip)"""
    extent: Callable[[Any], int] | None = None
    """a [start, stop) slice of the state: the state's width on a model (nq, nv), which the
    slice must lie within"""


Perm = tuple[list[int], list[float]]


@dataclass(frozen=True)
class MirrorContext:
    """The left-right mirror (the reflection y -> -y of the base frame) on a model."""

    model: Any  # mujoco.MjModel
    joint: dict[int, tuple[int, float]]
    """joint id -> (its mirror joint's id, sign); joints of the symmetry plane map to
    themselves, the free joint is mirrored by its own rule"""
    command: Perm

    @property
    def action(self) -> Perm:
        """Over actions (one per actuator): each to its joint's twin's actuator."""
        import mujoco

        twins = [_mirror_index(self, mujoco.mjtObj.mjOBJ_ACTUATOR, i)
                 for i in range(self.model.nu)]
        return [t for t, _ in twins], [s for _, s in twins]

    def body(self, b: int) -> int:
        """A body's mirror: its joint's mirror joint's body; a body without a mirrored
        joint (the base, a welded foot) is its parent's mirror's child at its place."""
        m = self.model
        for j in range(m.body_jntadr[b], m.body_jntadr[b] + m.body_jntnum[b]):
            if j in self.joint:
                return int(m.jnt_bodyid[self.joint[j][0]])
        parent = int(m.body_parentid[b])
        if b == 0 or self.body(parent) == parent:
            return b
        mine = [c for c in range(m.nbody) if m.body_parentid[c] == parent and c != parent]
        theirs = [c for c in range(m.nbody) if m.body_parentid[c] == self.body(parent)]
        return theirs[mine.index(b)]


def _whole(term, size: int, ranges) -> list[int]:
    return list(range(size))


def _sliced(term, size: int, ranges) -> list[int]:
    return list(range(term.start, term.stop))


def _sensor_size(term, s: Sizes) -> int:
    missing = [n for n in term.sensors if n not in s.sensor_dims]
    if missing:
        raise KeyError(f"observation term {term.name!r} names unknown sensors {missing}; "
                       f"the model has: {', '.join(s.sensor_dims)}")
    return sum(s.sensor_dims[n] for n in term.sensors)


def _robot_sensor(builder, src: dict, data) -> np.ndarray:
    return np.concatenate([data.sensordata[builder.sensor_slice(n)] for n in src["sensors"]])


_POLAR, _AXIAL, _QUAT = [1.0, -1.0, 1.0], [-1.0, 1.0, -1.0], [1.0, -1.0, 1.0, -1.0]


def _mirror_index(ctx: MirrorContext, objtype: int, obj: int) -> tuple[int, float]:
    """The mirror of a sensor's object (same type) and the sign of a scalar on it."""
    import mujoco

    m, t = ctx.model, mujoco.mjtObj
    objtype, obj = t(int(objtype)), int(obj)  # the model's arrays hold plain ints
    if objtype == t.mjOBJ_JOINT:
        return ctx.joint.get(obj, (obj, 1.0))
    if objtype == t.mjOBJ_ACTUATOR:
        j = int(m.actuator_trnid[obj, 0])
        twin, sign = ctx.joint.get(j, (j, 1.0))  # a joint of the plane is its own twin
        return int(np.flatnonzero(m.actuator_trnid[:, 0] == twin)[0]), sign
    if objtype == t.mjOBJ_SITE:  # the mirror body's site at the same place in its list
        b, mb = int(m.site_bodyid[obj]), ctx.body(int(m.site_bodyid[obj]))
        mine, theirs = (list(np.flatnonzero(m.site_bodyid == x)) for x in (b, mb))
        if len(theirs) != len(mine):
            name = mujoco.mj_id2name
            raise ValueError(
                f"site {name(m, t.mjOBJ_SITE, obj)!r} has no mirror: its body "
                f"{name(m, t.mjOBJ_BODY, b)!r} has {len(mine)} sites and the mirror body "
                f"{name(m, t.mjOBJ_BODY, mb)!r} {len(theirs)}; mirrored bodies need the "
                "same sites in the same order (a foot's touch site: both feet listed)")
        return int(theirs[mine.index(obj)]), 1.0
    if objtype in (t.mjOBJ_BODY, t.mjOBJ_XBODY):
        return ctx.body(obj), 1.0
    raise ValueError(f"no mirror rule for sensor objects of type {objtype.name}")


def _sensor_signs(ctx: MirrorContext, i: int, sign: float) -> list[float]:
    import mujoco

    m, S = ctx.model, mujoco.mjtSensor
    kind = S(int(m.sensor_type[i]))
    if m.sensor_refid[i] >= 0 and _mirror_index(ctx, m.sensor_reftype[i],
                                                 m.sensor_refid[i])[0] != m.sensor_refid[i]:
        raise ValueError(f"sensor {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_SENSOR, i)!r}: "
                         "its reference frame is not on the symmetry plane")
    if kind in (S.mjSENS_ACCELEROMETER, S.mjSENS_VELOCIMETER, S.mjSENS_FORCE,
                S.mjSENS_FRAMELINVEL, S.mjSENS_FRAMELINACC, S.mjSENS_FRAMEXAXIS,
                S.mjSENS_FRAMEZAXIS):
        return _POLAR  # vectors in a frame of the plane: y flips
    if kind in (S.mjSENS_GYRO, S.mjSENS_FRAMEANGVEL, S.mjSENS_FRAMEANGACC, S.mjSENS_TORQUE):
        return _AXIAL  # rotations about x and z reverse
    if kind == S.mjSENS_FRAMEQUAT:
        return _QUAT
    if kind in (S.mjSENS_JOINTPOS, S.mjSENS_JOINTVEL, S.mjSENS_JOINTACTFRC,
                S.mjSENS_ACTUATORPOS, S.mjSENS_ACTUATORVEL, S.mjSENS_ACTUATORFRC,
                S.mjSENS_TOUCH):
        return [sign]
    raise ValueError(f"no mirror rule for sensor type {kind.name}; give the observation "
                     "term a mirror (ObsTerm.mirror)")


def _mirror_sensor(term, size: int, ctx: MirrorContext) -> Perm:
    import mujoco

    m = ctx.model
    ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, n) for n in term.sensors]
    start = np.cumsum([0] + [int(m.sensor_dim[i]) for i in ids])  # each sensor's columns
    perm, signs = [], []
    for k, i in enumerate(ids):
        obj, sign = _mirror_index(ctx, m.sensor_objtype[i], m.sensor_objid[i])
        twin = [x for x in ids if m.sensor_type[x] == m.sensor_type[i]
                and m.sensor_objid[x] == obj and m.sensor_objtype[x] == m.sensor_objtype[i]]
        if not twin:
            raise ValueError(f"observation term {term.name!r}: the mirror of sensor "
                             f"{term.sensors[k]!r} is not among its sensors")
        at = start[ids.index(twin[0])]
        perm += [int(at) + c for c in range(int(m.sensor_dim[i]))]
        signs += _sensor_signs(ctx, i, sign)
    return perm, signs


def _mirror_q(name: str) -> Callable[[Any, int, MirrorContext], Perm]:
    """qpos / qvel slices: joints by their mirror, the free joint by the reflection."""
    def mirror(term, size: int, ctx: MirrorContext) -> Perm:
        import mujoco

        m = ctx.model
        adr = m.jnt_qposadr if name == "qpos" else m.jnt_dofadr
        free = _POLAR + (_QUAT if name == "qpos" else _AXIAL)
        perm, signs = [], []
        for q in range(term.start, term.stop):
            j = int(np.flatnonzero(adr <= q)[-1])  # the joint of coordinate q
            if int(m.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_FREE):
                perm.append(q - term.start)
                signs.append(free[q - adr[j]])
                continue
            twin, sign = ctx.joint.get(j, (j, 1.0))
            perm.append(int(adr[twin]) + q - int(adr[j]) - term.start)
            signs.append(sign)
        if not all(0 <= p < size for p in perm):
            raise ValueError(f"observation term {term.name!r}: the mirror of its {name} "
                             "slice reaches outside it")
        return perm, signs
    return mirror


def _qslice(name: str) -> Kind:
    """qpos / qvel: a slice of the generalized coordinates or velocities."""
    def extent(m) -> int:
        return int(m.nq if name == "qpos" else m.nv)

    return Kind(name, size=lambda t, s: t.stop - t.start, pool=lambda t: name,
                source=lambda env, t: (extent(env.sim.model), lambda: getattr(env.sim, name)),
                columns=_sliced, to_json=lambda t: {"start": t.start, "stop": t.stop},
                robot=lambda b, src, data: getattr(data, name)[src["start"]:src["stop"]],
                mirror=_mirror_q(name), extent=extent)


def _vector(name: str, width: Callable[[Sizes], int], env_read: Callable[[Any], Any],
            robot_attr: str) -> Kind:
    """command / last_action: the whole vector the task or the env holds (mirrored by the
    task's command mirror, and by the joints' for actions)."""
    return Kind(name, size=lambda t, s: width(s), pool=lambda t: name,
                source=lambda env, t: (width(Sizes({}, env.task.command_dim, env.action_dim)),
                                       lambda: env_read(env)),
                columns=_whole, to_json=lambda t: {},
                robot=lambda b, src, data: getattr(b, robot_attr),
                mirror=lambda t, size, ctx: getattr(ctx, robot_attr.removeprefix("last_")))


def _named(name: str) -> Kind:
    """data / param: a slice of a flattened, per-env MjData field or model parameter."""
    def source(env, t):
        read = (env.sim.data if name == "data" else env.sim.params)
        return read(t.field)[0].numel(), lambda: read(t.field).flatten(1)

    def to_json(t) -> dict:
        return {"start": t.start, "stop": t.stop, "field": t.field} | \
            ({"clip": list(t.clip)} if t.clip else {})

    return Kind(name, size=lambda t, s: t.stop - t.start, pool=lambda t: f"{name}:{t.field}",
                source=source, columns=_sliced, to_json=to_json, robot=None, mirror=None,
                named_field=True, clippable=True)


def _scan_points(grid) -> np.ndarray:
    return hf.scan_offsets(grid)


def _scan_source(env, t):
    """The scan from the sim's base pose and the model's heightfields, in torch on the
    sim's device. A term with an `episode_offset` (a perceived scan) also gets the task's
    per-episode `scan_bias` [N] while noise is on; terms without one share one scan."""
    import torch

    qpos = env.sim.qpos
    maps, plane = hf.height_maps(env.sim.model, qpos.new_tensor)
    offsets = qpos.new_tensor(hf.scan_offsets(t.grid))
    s = t.start

    def compute(pose):  # [M, 7] base position and quaternion -> [M, P]
        return hf.scan(torch, maps, plane, pose[:, :3], pose[:, 3:], offsets)
    scan = _ChangedRows(compute) if qpos.device.type == "cpu" else compute

    def read():
        x = scan(env.sim.qpos[:, s:s + 7])
        return x + env.task.scan_bias[:, None] if biased and env.noise else x
    biased = t.episode_offset > 0
    if biased and getattr(env.task, "scan_bias", None) is None:
        raise ValueError(f"observation term {t.name!r}: episode_offset needs a task that "
                         f"draws a per-episode `scan_bias` [N]; {type(env.task).__name__} "
                         "has none")
    return len(offsets), read


class _ChangedRows:
    """compute(pose) [N, 7] -> [N, P], recomputing only the rows whose pose changed since
    the last call; a row depends on its own pose alone, so the others keep the values a
    full call computes. The env observes twice a step, the second time after the envs
    that ended were reset: the scan's second pass then costs a few rows. CPU only: on an
    accelerator, finding the rows would sync the host."""

    def __init__(self, compute: Callable[[Any], Any]):
        self.compute, self.pose, self.out = compute, None, None

    def __call__(self, pose):
        if self.pose is not None and self.pose.shape == pose.shape:
            rows = (pose != self.pose).any(1).nonzero().squeeze(1)  # NaN rows included
            if 2 * len(rows) < len(pose):
                out = self.out.clone()  # a fresh tensor: the one returned before stays
                if len(rows):
                    out[rows] = self.compute(pose[rows])
                    self.pose[rows] = pose[rows]
                self.out = out
                return out
        self.pose, self.out = pose.clone(), self.compute(pose)
        return self.out


def _robot_scan(builder, src: dict, data) -> np.ndarray:
    """sim2sim: the scan from the exported terrain; on a robot, its own perception's."""
    maps, plane = builder.height_maps()
    s = src["start"]
    q = np.asarray(data.qpos)[None]
    return hf.scan(np, maps, plane, q[:, s:s + 3], q[:, s + 3:s + 7],
                   np.asarray(src["points"]))[0]


def _scan_json(t) -> dict:
    return {"grid": list(t.grid), "start": t.start, "frame": "yaw-aligned base",
            "points": hf.scan_offsets(t.grid).tolist(), "order": "x-major",
            "value": "base z - surface z (m)"} | ({"clip": list(t.clip)} if t.clip else {})


def _mirror_scan(t, size: int, ctx: MirrorContext) -> Perm:
    return hf.mirror_permutation(t.grid), [1.0] * size


def _clock_source(env, t):
    """[sin, cos] of 2 pi t / period, t the task's time since each env's episode began
    (`Task.clock_seconds`, [N] s)."""
    import torch

    read = getattr(env.task, "clock_seconds", None)
    if read is None:
        raise ValueError(f"observation term {t.name!r}: kind='clock' needs a task with a "
                         f"clock (clock_seconds); {type(env.task).__name__} has none")

    def features():
        angle = read() * (2 * np.pi / t.period)  # [N]
        return torch.stack([torch.sin(angle), torch.cos(angle)], 1)
    return 2, features


def _robot_clock(builder, src: dict, data) -> np.ndarray:
    """The runner's `time` (s since the robot started this episode, set by its loop)."""
    angle = 2 * np.pi * builder.time / src["period"]
    return np.array([np.sin(angle), np.cos(angle)])


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("sensor", size=_sensor_size, pool=lambda t: "sensor",
         source=lambda env, t: (env.sim.model.nsensordata, lambda: env.sim.sensordata),
         columns=lambda t, size, ranges: [c for n in t.sensors for c in range(*ranges[n])],
         to_json=lambda t: {"sensors": list(t.sensors)}, robot=_robot_sensor,
         mirror=_mirror_sensor),
    _qslice("qpos"),
    _qslice("qvel"),
    _vector("command", lambda s: s.command_dim, lambda env: env.task.command, "command"),
    _vector("last_action", lambda s: s.action_dim, lambda env: env.last_action,
            "last_action"),
    _named("data"),
    _named("param"),
    # base height above the terrain at a grid of points around the base (trot/core/heightfield.py)
    Kind("height_scan", size=lambda t, s: len(_scan_points(t.grid)),
         pool=lambda t: f"height_scan:{t.start}:{t.grid}:{t.episode_offset > 0}", source=_scan_source,
         columns=_whole, to_json=_scan_json, robot=_robot_scan, mirror=_mirror_scan,
         clippable=True),
    # a gait clock: [sin, cos] of the cycle's phase. Its mirror image is the same two-beat
    # gait half a cycle later (left and right feet swap), which negates both
    Kind("clock", size=lambda t, s: 2, pool=lambda t: f"clock:{t.period}",
         source=_clock_source, columns=_whole,
         to_json=lambda t: {"period": t.period, "value": "[sin, cos](2 pi time / period)",
                            "time": "s since the episode began"},
         robot=_robot_clock, mirror=lambda t, size, ctx: ([0, 1], [-1.0, -1.0])),
)}
