"""Observations as data: each term names where its numbers come from, so the same layout
builds the observation in torch for training and in numpy on the robot (export/runner.py).

A term is `(raw - offset) * scale`, plus uniform noise of `noise` (in scaled units) while
training. Sources are what a real robot can read: named MJCF sensors, the command, the
last action; `qpos`/`qvel` slices, `data` (a slice of a flattened MjData field the sim
tracks, `Task.data_fields`, optionally clipped first) and `param` (a slice of a flattened
per-env model parameter, e.g. the randomized floor friction) exist for privileged terms;
`height_scan` is the base's height above the terrain at a grid of points around it
(trot/core/heightfield.py), privileged by default (on a robot it comes from perception);
`clock` is a gait clock's [sin, cos] phase, from the time since the episode began.
The robot runner (export/runner.py) refuses `data` and `param` terms: no robot measures them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from trot.core.observation_kinds import KINDS, Sizes
from trot.sim.base import sensor_slices

SOURCE_KINDS: tuple[str, ...] = tuple(KINDS)  # one definition each: trot/core/observation_kinds.py


@dataclass(frozen=True)
class ObsTerm:
    """One named piece of an observation vector."""

    name: str
    kind: str
    """the source: sensor, qpos, qvel, command, last_action, data, param, height_scan or
    clock (SOURCE_KINDS)"""
    sensors: tuple[str, ...] = ()
    """for kind='sensor': MJCF sensor names, concatenated in this order"""
    start: int = 0
    """for kind='qpos'/'qvel'/'data'/'param': first index (data/param: into the flattened
    field)"""
    stop: int = 0
    """for kind='qpos'/'qvel'/'data'/'param': one past the last index"""
    scale: float = 1.0
    offset: tuple[float, ...] = ()
    """subtracted from the raw values before scaling; empty means 0"""
    noise: float = 0.0
    """half-width of uniform training noise, in scaled units"""
    field: str = ""
    """for kind='data': the MjData field, e.g. 'cfrc_ext'; for kind='param': the per-env
    model field, e.g. 'geom_friction' (see sim.RANDOMIZABLE_FIELDS); flattened per env"""
    clip: tuple[float, float] = ()
    """for kind='data'/'param': clamp raw values to [lo, hi] before offset and scale"""
    grid: tuple[float, float, float] = ()
    """for kind='height_scan': (length x, length y, spacing) of the scan grid (m), centred
    on the base in its yaw-aligned frame (trot/core/heightfield.py); (0, 0, 1) is the one point
    under the base. `start` is the base's free-joint qpos address"""
    episode_offset: float = 0.0
    """for kind='height_scan': half-width (m) of a per-episode vertical offset U(-x, x),
    added to the raw scan while training noise is on (a perception bias); the task draws
    it per episode as `scan_bias` [N]"""
    period: float = 0.0
    """for kind='clock': the cycle (s) of its [sin, cos] phase features"""
    mirror: tuple[float, ...] = ()
    """signs of the term's values under the left-right mirror, order kept (symmetry
    augmentation); empty: its kind's rule (trot/core/observation_kinds.py), which data/param
    terms lack"""

    def __post_init__(self) -> None:
        where = f"observation term {self.name!r}"
        check_number(where, "scale", self.scale)
        check_number(where, "noise", self.noise, low=0.0)
        check_numbers(where, "offset", self.offset, "(0.1, 0.2) or (), one per value")
        check_numbers(where, "clip", self.clip, "(low, high) with low <= high, or ()", size=2)
        if self.clip and self.clip[0] > self.clip[1]:
            raise ValueError(f"{where}: clip {self.clip} has low > high; accepted: (low, "
                             "high) with low <= high")
        check_numbers(where, "mirror", self.mirror, "(1, -1, ...) one sign per value, or ()")
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"observation term {self.name!r}: unknown source {self.kind!r}; "
                             f"accepted: {', '.join(SOURCE_KINDS)}")
        if self.kind == "sensor" and not self.sensors:
            raise ValueError(f"observation term {self.name!r}: kind='sensor' needs sensor names")
        kind = KINDS[self.kind]
        if kind.named_field != bool(self.field):
            raise ValueError(f"observation term {self.name!r}: `field` goes with kind='data' "
                             "or 'param' only, and those need a field")
        if self.clip and not kind.clippable:
            raise ValueError(f"observation term {self.name!r}: `clip` goes with kinds "
                             f"{', '.join(k for k, v in KINDS.items() if v.clippable)} only")
        if (self.kind == "height_scan") != bool(self.grid):
            raise ValueError(f"observation term {self.name!r}: kind='height_scan' needs a "
                             "grid (lx, ly, spacing), and only it takes one")
        if self.episode_offset and self.kind != "height_scan":
            raise ValueError(f"observation term {self.name!r}: episode_offset goes with "
                             "kind='height_scan' only")
        if (self.kind == "clock") != (self.period > 0):
            raise ValueError(f"observation term {self.name!r}: kind='clock' needs a period "
                             f"> 0 (s), and only it takes one; got {self.period}")


def check_number(where: str, name: str, value: object, low: float = -math.inf) -> None:
    """A ValueError naming `where` and `name` unless value is a finite real >= low."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not math.isfinite(value) or value < low:
        want = "a finite number" + ("" if low == -math.inf else f" >= {low:g}")
        raise ValueError(f"{where}: {name} must be {want}, got {value!r}")


def check_numbers(where: str, name: str, values: object, form: str, size: int | None = None
            ) -> None:
    """A ValueError naming `where`, `name` and the accepted `form` unless values is a tuple
    (or list) of finite reals (of `size` entries, where given; empty is always accepted)."""
    ok = isinstance(values, (tuple, list)) and (not values or size is None or
                                                 len(values) == size)
    if ok:
        for v in values:
            check_number(where, name, v)
    else:
        raise ValueError(f"{where}: {name} must be a tuple of numbers, e.g. {form}; got "
                         f"{values!r}")


@dataclass(frozen=True)
class ObsSlot:
    """A term placed in the vector: [start, start + size)."""

    term: ObsTerm
    start: int
    size: int


@dataclass(frozen=True)
class ObsLayout:
    """The ordered terms of one observation vector (policy or critic)."""

    slots: tuple[ObsSlot, ...]
    dim: int

    def to_json(self) -> list[dict]:
        return [{"name": s.term.name, "start": s.start, "size": s.size, "scale": s.term.scale,
                 "offset": list(s.term.offset) or [0.0] * s.size,
                 "source": {"kind": s.term.kind} | KINDS[s.term.kind].to_json(s.term)}
                for s in self.slots]


def term_size(term: ObsTerm, sensor_dims: dict[str, int], command_dim: int,
              action_dim: int) -> int:
    return KINDS[term.kind].size(term, Sizes(sensor_dims, command_dim, action_dim))


def make_layout(terms: tuple[ObsTerm, ...], sensor_dims: dict[str, int], command_dim: int,
                action_dim: int) -> ObsLayout:
    slots, start = [], 0
    for t in terms:
        size = term_size(t, sensor_dims, command_dim, action_dim)
        if t.offset and len(t.offset) != size:
            raise ValueError(f"observation term {t.name!r}: offset has {len(t.offset)} values, "
                             f"the term has {size}")
        slots.append(ObsSlot(t, start, size))
        start += size
    return ObsLayout(tuple(slots), start)


@dataclass(frozen=True)
class ObsPlan:
    """A layout compiled to one gather from the source pool (see `pool_columns`):
    obs = (pool[:, index] - offset) * scale, plus uniform noise of half-width `noise`."""

    index: Tensor  # [D] long, columns of the pool
    scale: Tensor  # [D]
    bias: Tensor  # [D] -offset * scale: the affine as one fused multiply-add
    noise: Tensor  # [D]
    noisy: bool
    clip: tuple[Tensor, Tensor] | None = None  # [D] lo, hi (+-inf where unclipped); None: none


def pool_columns(sizes: dict[str, int]) -> dict[str, int]:
    """Where each block starts in the pool: the blocks side by side in `sizes` order. Keys
    are the kinds' pool keys (`Kind.pool`), e.g. 'qpos' or 'data:cfrc_ext'."""
    cols, start = {}, 0
    for key, size in sizes.items():
        cols[key] = start
        start += size
    return cols


def compile_layout(layout: ObsLayout, sensor_ranges: dict[str, tuple[int, int]],
                   columns: dict[str, int], device: torch.device) -> ObsPlan:
    index: list[int] = []
    offset: list[float] = []
    scale: list[float] = []
    noise: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    for slot in layout.slots:
        t = slot.term
        kind = KINDS[t.kind]
        base = columns[kind.pool(t)]
        index += [base + c for c in kind.columns(t, slot.size, sensor_ranges)]
        offset += list(t.offset) or [0.0] * slot.size
        scale += [t.scale] * slot.size
        noise += [t.noise] * slot.size
        lo += [t.clip[0] if t.clip else -math.inf] * slot.size
        hi += [t.clip[1] if t.clip else math.inf] * slot.size
    f = lambda x: torch.tensor(x, dtype=torch.float32, device=device)  # noqa: E731
    clipped = any(s.term.clip for s in layout.slots)
    bias = [-o * s for o, s in zip(offset, scale)]
    return ObsPlan(torch.tensor(index, dtype=torch.long, device=device), f(scale), f(bias),
                   f(noise), any(n > 0 for n in noise), (f(lo), f(hi)) if clipped else None)


def build_obs(plan: ObsPlan, pool: Tensor, u: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """[N, D] from the pool [N, P]; u: uniform [0, 1) draws [N, D] for the noise, or None.
    Non-finite pool values (a diverged env's, or a task's own NaN) read as 0, so
    observations stay finite. Returns (observation [N, D], bad [N, D] bool: where the raw
    value was not finite; offsets and scales are finite, checked when declared)."""
    raw = pool.index_select(1, plan.index)
    bad = ~raw.isfinite()
    raw = raw.nan_to_num_(0.0, 0.0, 0.0)
    if plan.clip is not None:
        raw = torch.clamp(raw, plan.clip[0], plan.clip[1])
    x = torch.addcmul(plan.bias, raw, plan.scale)  # (raw - offset) * scale in one op
    if u is not None and plan.noisy:
        x = torch.addcmul(x, u.mul(2.0).sub_(1.0), plan.noise)
    return x, bad


def compile_terms(env, *term_sets: tuple) -> tuple[list, list, list]:
    """For each set of terms its layout and plan over one pool of the sources they read
    in `env` (tasks/env.py's Env: its sim, task and state): one block per source, in order
    of first use; getters read at every call (backends may replace their tensors).
    Returns (layouts, pool getters, plans)."""
    m = env.sim.model
    slices = sensor_slices(m)
    dims = {k: s.size for k, s in slices.items()}
    ranges = {k: (s.start, s.start + s.size) for k, s in slices.items()}
    layouts = [make_layout(terms, dims, env.task.command_dim, env.action_dim)
               for terms in term_sets]
    sources: dict[str, tuple[int, Callable[[], Tensor]]] = {}
    for t in (t for terms in term_sets for t in terms):
        kind = KINDS[t.kind]
        key = kind.pool(t)
        if key not in sources:
            sources[key] = kind.source(env, t)
        size = sources[key][0]
        if (kind.named_field or kind.extent) and not 0 <= t.start < t.stop <= size:
            raise ValueError(f"observation term {t.name!r}: [start, stop) = "
                             f"[{t.start}, {t.stop}) is not within the {size} values "
                             f"of {t.field if kind.named_field else t.kind!r}")
    cols = pool_columns({k: size for k, (size, _) in sources.items()})
    plans = [compile_layout(lay, ranges, cols, env.device) for lay in layouts]
    return layouts, [get for _, get in sources.values()], plans
