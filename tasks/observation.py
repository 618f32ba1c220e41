"""Observations as data: each term names where its numbers come from, so the same layout
builds the observation in torch for training and in numpy on the robot (export/runner.py).

A term is `(raw - offset) * scale`, plus uniform noise of `noise` (in scaled units) while
training. Sources are what a real robot can read: named MJCF sensors, the command, the
last action; `qpos`/`qvel` slices exist for privileged (critic-only) terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

SourceKind = Literal["sensor", "qpos", "qvel", "command", "last_action"]
SOURCE_KINDS: tuple[str, ...] = ("sensor", "qpos", "qvel", "command", "last_action")


@dataclass(frozen=True)
class ObsTerm:
    """One named piece of an observation vector."""

    name: str
    kind: SourceKind
    sensors: tuple[str, ...] = ()
    """for kind='sensor': MJCF sensor names, concatenated in this order"""
    start: int = 0
    """for kind='qpos'/'qvel': first index"""
    stop: int = 0
    """for kind='qpos'/'qvel': one past the last index"""
    scale: float = 1.0
    offset: tuple[float, ...] = ()
    """subtracted from the raw values before scaling; empty means 0"""
    noise: float = 0.0
    """half-width of uniform training noise, in scaled units"""

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"observation term {self.name!r}: unknown source {self.kind!r}; "
                             f"accepted: {', '.join(SOURCE_KINDS)}")
        if self.kind == "sensor" and not self.sensors:
            raise ValueError(f"observation term {self.name!r}: kind='sensor' needs sensor names")


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
        out = []
        for s in self.slots:
            t = s.term
            src: dict = {"kind": t.kind}
            if t.kind == "sensor":
                src["sensors"] = list(t.sensors)
            elif t.kind in ("qpos", "qvel"):
                src["start"], src["stop"] = t.start, t.stop
            out.append({"name": t.name, "start": s.start, "size": s.size, "scale": t.scale,
                        "offset": list(t.offset) or [0.0] * s.size, "source": src})
        return out


def term_size(term: ObsTerm, sensor_dims: dict[str, int], command_dim: int,
              action_dim: int) -> int:
    if term.kind == "sensor":
        missing = [n for n in term.sensors if n not in sensor_dims]
        if missing:
            raise KeyError(f"observation term {term.name!r} names unknown sensors {missing}; "
                           f"the model has: {', '.join(sensor_dims)}")
        return sum(sensor_dims[n] for n in term.sensors)
    if term.kind in ("qpos", "qvel"):
        return term.stop - term.start
    return command_dim if term.kind == "command" else action_dim


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


@dataclass
class ObsSources:
    """The tensors observation terms read, all [N, ...] on the sim's device."""

    sensor: dict[str, Tensor]
    qpos: Tensor
    qvel: Tensor
    command: Tensor
    last_action: Tensor
    offsets: dict[str, Tensor] = field(default_factory=dict)


def raw_term(t: ObsTerm, src: ObsSources) -> Tensor:
    if t.kind == "sensor":
        parts = [src.sensor[n] for n in t.sensors]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
    if t.kind == "qpos":
        return src.qpos[:, t.start : t.stop]
    if t.kind == "qvel":
        return src.qvel[:, t.start : t.stop]
    return src.command if t.kind == "command" else src.last_action


def build_obs(layout: ObsLayout, src: ObsSources, gen: torch.Generator | None) -> Tensor:
    """[N, layout.dim]; noise is added only when a generator is given."""
    cols = []
    for slot in layout.slots:
        t = slot.term
        x = raw_term(t, src)
        if t.offset:
            x = x - src.offsets[t.name]
        x = x * t.scale
        if gen is not None and t.noise > 0:
            u = torch.rand(x.shape, generator=gen, device=x.device, dtype=x.dtype)
            x = x + (2.0 * u - 1.0) * t.noise
        cols.append(x)
    return torch.cat(cols, dim=-1)
