"""policy.json as one typed schema: `Contract`, a frozen dataclass of contract_version
CONTRACT_VERSION, with a small frozen dataclass per nested part. The exporter builds one and
writes `Contract.dumps()`; the robot runner, its checks and sim2sim read policy.json once
through `Contract.from_json` and then use attributes, so a key exists in one place: here.

The JSON keys are the field names, the nesting is the dataclasses'; sequences are tuples
here and JSON lists in the file. Four parts stay plain JSON mappings on purpose, as their
own readers interpret them: an observation term's `source` (its kind's fields, read per
kind by trot/core/observation_kinds.py), `task_config` (the task config's from_dict),
`task_source` (tasks/sources.py) and `command_ranges` (a name -> [low, high] per command).

Standard library only: the runner that imports this runs on a robot without torch."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any


class ContractError(ValueError):
    """The exported files are missing, renamed or disagree with each other."""


CONTRACT_VERSION = 4  # policy.json's format, as trot 0.1 writes and reads it (1 to 3: never
# released; they lacked the memory and timing fields, model_files or home_keyframe)

ACTION_TO_CTRL = "ctrl = action_offset + action_scale * clip(action, -1, 1)"


def check_version(v: Any) -> None:
    """Only 0.1's format: an older one read with defaults would run without its memory,
    latency or terrain files."""
    if v in range(1, CONTRACT_VERSION):
        raise ContractError(f"policy.json contract_version {v} was written by a trot before "
                            f"0.1's export format; this runner reads {CONTRACT_VERSION} only. "
                            "Export the run again with this trot: trot export RUN_DIR")
    if v != CONTRACT_VERSION:
        raise ContractError(f"policy.json contract_version {v!r} is not the one this runner "
                            f"reads ({CONTRACT_VERSION}); update trot")


def _at(where: str) -> str:
    return f"policy.json {where}" if where else "policy.json"


def _object(d: Any, cls: type, where: str, partial: bool = False) -> Mapping:
    """`d` as a JSON object with `cls`'s fields as its keys: a ContractError names a missing
    key, or an unknown one (unless `partial`: a larger object holding them), and the keys
    accepted."""
    names = [f.name for f in fields(cls)]
    accepted = (f"{cls.__name__} (contract_version {CONTRACT_VERSION}) has "
                + ", ".join(sorted(names)))
    if not isinstance(d, Mapping):
        raise ContractError(f"{_at(where)} is {d!r}, not a JSON object; {accepted}")
    missing = [n for n in names if n not in d]
    if missing:
        raise ContractError(f"{_at(where)} is missing {', '.join(map(repr, missing))}; "
                            f"{accepted}")
    unknown = sorted(k for k in d if k not in names)
    if unknown and not partial:
        raise ContractError(f"{_at(where)} has unknown {', '.join(map(repr, unknown))}; "
                            f"{accepted}")
    return d


def _tuple(x: Any, where: str, optional: bool = False) -> tuple | None:
    """A JSON list as a tuple (None kept where `optional`)."""
    if x is None and optional:
        return None
    if not isinstance(x, (list, tuple)):
        raise ContractError(f"{_at(where)} is {x!r}; a JSON list is accepted")
    return tuple(x)


def _json(x: Any) -> Any:
    """A schema value as JSON data: dataclasses as objects, tuples as lists."""
    if is_dataclass(x):
        return {f.name: _json(getattr(x, f.name)) for f in fields(x)}
    if isinstance(x, (list, tuple)):
        return [_json(v) for v in x]
    if isinstance(x, dict):
        return {k: _json(v) for k, v in x.items()}
    return x


@dataclass(frozen=True)
class ObservationTerm:
    """One slot of the observation: obs[start:start + size] = (raw - offset) * scale."""

    name: str
    """the task's term name"""
    start: int
    """its first index in one observation frame"""
    size: int
    """how many values it fills"""
    scale: float
    """applied after the offset"""
    offset: tuple[float, ...]
    """one per value, subtracted from the raw values"""
    source: dict[str, Any]
    """where the raw values come from: `kind` and that kind's own fields, a plain mapping
    that trot/core/observation_kinds.py reads per kind (sensors, start/stop, grid, clip...)"""

    @property
    def kind(self) -> str:
        """The source's kind (KINDS's name)."""
        return self.source["kind"]

    @classmethod
    def from_json(cls, d: Any, where: str = "observation term") -> ObservationTerm:
        _object(d, cls, where)
        src = d["source"]
        if not isinstance(src, Mapping) or "kind" not in src:
            raise ContractError(f"{_at(where)}.source is {src!r}; a JSON object with a "
                                "'kind' is accepted")
        return cls(name=d["name"], start=d["start"], size=d["size"], scale=d["scale"],
                   offset=_tuple(d["offset"], f"{where}.offset"), source=dict(src))


@dataclass(frozen=True)
class ObsHistory:
    """The graph's `obs` input: the last `length` frames of obs_dim, in `order`, a new
    episode's history filled by the `fill` rule."""

    length: int
    """frames in the graph's input (1: the observation alone)"""
    order: str
    """the frames' order ("oldest_first")"""
    fill: str
    """a new episode's history ("first_observation": copies of its first frame)"""
    input_dim: int
    """the graph's obs width: length x obs_dim"""


@dataclass(frozen=True)
class RecurrentState:
    """One state of a recurrent actor: a graph input fed back from an output of the
    previous step."""

    input: str
    """the graph input's name ("h", "c")"""
    output: str
    """the graph output that feeds it next step ("h_out", "c_out")"""
    shape: tuple[int, ...]
    """its shape after the batch dimension"""
    reset: str
    """its value at an episode's start ("zeros")"""
    cell: str
    """the actor's recurrent cell ("gru", "lstm")"""


@dataclass(frozen=True)
class Actuator:
    """One actuator of model.xml, in actuator order: the joint it drives and its limits."""

    name: str
    """the actuator's name"""
    joint: str
    """the joint it drives"""
    type: str
    """position (a PD servo) or motor (a torque)"""
    kp: float | None
    """a position servo's stiffness (None for a motor)"""
    kd: float | None
    """a position servo's damping (None for a motor)"""
    gear: float
    """the transmission's gear"""
    ctrl_range: tuple[float, float] | None
    """where MuJoCo clamps its ctrl (None: unlimited)"""
    torque_limit: tuple[float, float] | None
    """its force range (a motor's: ctrl_range x gear; None: unlimited)"""


def _parse(cls: type, d: Any, where: str, lists: tuple[str, ...] = (),
           optional: bool = False) -> Any:
    """A flat part: its keys checked, the `lists` fields as tuples (null kept where
    `optional`)."""
    _object(d, cls, where)
    return cls(**{f.name: _tuple(d[f.name], f"{where}.{f.name}", optional)
                  if f.name in lists else d[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class ObservationSpec:
    """What builds an observation frame: the layout and the widths its kinds read."""

    observation: tuple[ObservationTerm, ...]
    """the terms, back to back from 0"""
    obs_dim: int
    """one frame's width"""
    command_dim: int
    """the command's width"""
    action_dim: int
    """the action's width (the last action term's)"""

    @classmethod
    def of(cls, c: Contract | ObservationSpec | Mapping) -> ObservationSpec:
        """A contract's; or from a mapping that has at least these four keys (a whole
        policy.json object, or a layout under test)."""
        if isinstance(c, ObservationSpec):
            return c
        if isinstance(c, Contract):
            return cls(c.observation, c.obs_dim, c.command_dim, c.action_dim)
        _object(c, cls, "", partial=True)
        return cls(_terms(c["observation"]), c["obs_dim"], c["command_dim"], c["action_dim"])


def _terms(x: Any) -> tuple[ObservationTerm, ...]:
    return tuple(ObservationTerm.from_json(t, f"observation[{k}]")
                 for k, t in enumerate(_tuple(x, "observation")))


@dataclass(frozen=True, kw_only=True)
class Contract:
    """policy.json: everything the robot side needs to build the observation, run the
    graph with its memory and turn actions into actuator commands."""

    contract_version: int = CONTRACT_VERSION
    """this format's version: the runner reads CONTRACT_VERSION only"""
    trot_version: str
    """the trot that exported it"""
    task: str
    """the registered task's name"""
    task_source: dict[str, Any]
    """where the task's code comes from (tasks/sources.py), so sim2sim finds a user task"""
    task_config: dict[str, Any]
    """the task config's fields, as trained"""
    training_env_steps: int
    """env steps the policy was trained for"""
    opset: int
    """policy.onnx's ONNX opset"""
    model_xml: str = "model.xml"
    """the compiled task model's file, beside policy.json"""
    model_xml_sha256: str
    """its sha256"""
    model_files: dict[str, str]
    """the files model.xml reads (a terrain's heightfield), name -> sha256"""
    obs_dim: int
    """one observation frame's width"""
    action_dim: int
    """the action's width: one per actuator"""
    command_dim: int
    """the command's width (0: no command)"""
    command_ranges: dict[str, Any] | None
    """the task's command ranges (None where it has none)"""
    observation: tuple[ObservationTerm, ...]
    """the frame's layout, term by term"""
    obs_history: ObsHistory
    """the frames that the graph's obs input holds"""
    recurrent_state: tuple[RecurrentState, ...]
    """a recurrent actor's states (none for an MLP)"""
    actions: tuple[Actuator, ...]
    """per action, in actuator order: the actuator it drives"""
    action_scale: tuple[float, ...]
    """ctrl = action_offset + action_scale * clip(action, -1, 1)"""
    action_offset: tuple[float, ...]
    """a position servo's: its home position"""
    action_clip: tuple[float, float] = (-1.0, 1.0)
    """the graph's action range"""
    action_to_ctrl: str = ACTION_TO_CTRL
    """the action map, in words"""
    action_latency_steps: int
    """control steps between an action and the motors (the robot adds its own)"""
    home_keyframe: str | None
    """model.xml's keyframe of the standing pose (None: qpos0)"""
    default_joint_pos: tuple[float, ...]
    """actuated joints' positions in that pose, in actuator order"""
    control_dt: float
    """s per policy step: substeps x physics_dt"""
    physics_dt: float
    """model.xml's timestep"""
    substeps: int
    """physics steps per control step"""

    def __post_init__(self) -> None:
        check_version(self.contract_version)

    @classmethod
    def from_json(cls, d: Any) -> Contract:
        """policy.json's object, checked: its version first (an older format lacks keys),
        then each key, missing or unknown ones refused by name."""
        if isinstance(d, Mapping) and "contract_version" in d:
            check_version(d["contract_version"])
        _object(d, cls, "")
        parts = {
            "observation": _terms(d["observation"]),
            "obs_history": _parse(ObsHistory, d["obs_history"], "obs_history"),
            "recurrent_state": tuple(
                _parse(RecurrentState, s, f"recurrent_state[{i}]", ("shape",))
                for i, s in enumerate(_tuple(d["recurrent_state"], "recurrent_state"))),
            "actions": tuple(_parse(Actuator, a, f"actions[{i}]", ("ctrl_range", "torque_limit"),
                                    optional=True)  # null: unlimited
                             for i, a in enumerate(_tuple(d["actions"], "actions"))),
        } | {k: _tuple(d[k], k) for k in ("action_scale", "action_offset", "action_clip",
                                          "default_joint_pos")}
        return cls(**{f.name: parts[f.name] if f.name in parts else d[f.name]
                      for f in fields(cls)})

    def to_json(self) -> dict[str, Any]:
        """The JSON object of policy.json (and of policy.onnx's "trot" metadata)."""
        return _json(self)

    def dumps(self) -> str:
        """policy.json's text: deterministic (sorted keys, no clocks), so two exports of one
        checkpoint are byte-identical."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"
