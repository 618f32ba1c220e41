"""The observation source kinds, one definition each: what a term of the kind reads on the
env side (a column block of the batched source pool) and on the robot side (a plain
MjData and the runner's command / last action), its size and its json. A new kind is one
`Kind` in `KINDS`.

Torch-free on purpose: the robot runner (export/runner.py) imports this module without
torch; the env side only calls the getters it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


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
    named_field: bool = False
    """the term names an MjData field or a per-env model parameter (ObsTerm.field)"""


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


def _qslice(name: str) -> Kind:
    """qpos / qvel: a slice of the generalized coordinates or velocities."""
    return Kind(name, size=lambda t, s: t.stop - t.start, pool=lambda t: name,
                source=lambda env, t: (getattr(env.sim.model, "nq" if name == "qpos" else "nv"),
                                       lambda: getattr(env.sim, name)),
                columns=_sliced, to_json=lambda t: {"start": t.start, "stop": t.stop},
                robot=lambda b, src, data: getattr(data, name)[src["start"]:src["stop"]])


def _vector(name: str, width: Callable[[Sizes], int], env_read: Callable[[Any], Any],
            robot_attr: str) -> Kind:
    """command / last_action: the whole vector the task or the env holds."""
    return Kind(name, size=lambda t, s: width(s), pool=lambda t: name,
                source=lambda env, t: (width(Sizes({}, env.task.command_dim, env.action_dim)),
                                       lambda: env_read(env)),
                columns=_whole, to_json=lambda t: {},
                robot=lambda b, src, data: getattr(b, robot_attr))


def _named(name: str) -> Kind:
    """data / param: a slice of a flattened, per-env MjData field or model parameter."""
    def source(env, t):
        read = (env.sim.data if name == "data" else env.sim.params)
        return read(t.field)[0].numel(), lambda: read(t.field).flatten(1)

    def to_json(t) -> dict:
        return {"start": t.start, "stop": t.stop, "field": t.field} | \
            ({"clip": list(t.clip)} if t.clip else {})

    return Kind(name, size=lambda t, s: t.stop - t.start, pool=lambda t: f"{name}:{t.field}",
                source=source, columns=_sliced, to_json=to_json, robot=None, named_field=True)


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("sensor", size=_sensor_size, pool=lambda t: "sensor",
         source=lambda env, t: (env.sim.model.nsensordata, lambda: env.sim.sensordata),
         columns=lambda t, size, ranges: [c for n in t.sensors for c in range(*ranges[n])],
         to_json=lambda t: {"sensors": list(t.sensors)}, robot=_robot_sensor),
    _qslice("qpos"),
    _qslice("qvel"),
    _vector("command", lambda s: s.command_dim, lambda env: env.task.command, "command"),
    _vector("last_action", lambda s: s.action_dim, lambda env: env.last_action,
            "last_action"),
    _named("data"),
    _named("param"),
)}
