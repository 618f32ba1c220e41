"""policy.json checked against model.xml: what the robot runner (runner.py) refuses at load,
each refusal naming the field. numpy and mujoco only, never torch."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import numpy as np

from trot.core.observation_kinds import KINDS, Sizes
from trot.export.schema import CONTRACT_VERSION, Contract, ContractError, ObservationSpec

__all__ = ["CONTRACT_VERSION", "ContractError", "check_layout", "check_model", "robot_kind",
           "same_values"]  # the first two live in schema.py (torch- and numpy-free)

_REL = 2e-5
"""how far a contract number may be from model.xml's: MuJoCo's XML writer keeps 6
significant digits (a relative rounding of at most 5e-6), and the contract holds the
training model's own numbers"""


def same_values(a, b) -> bool:
    """Equal json values, numbers up to _REL: numbers, strings, None, lists and dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    numbers = (int, float, np.number)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        return bool(np.isclose(a, b, rtol=_REL, atol=1e-12))
    return a == b


def check_model(c: Contract, model) -> None:
    """Refuse a contract that its model.xml contradicts, with a ContractError naming the
    field: the version, the timing, the action map (each actuator's name, joint, type,
    gains, gear and ranges, in actuator order), the sizes of the action affine,
    default_joint_pos against the home keyframe, position servos' action_offset (a zero
    action holds the home pose) and the observation layout (contiguous slots; sensors that
    exist, with those sizes)."""
    from trot.export.model_info import actuators  # mujoco: deferred, a robot that only acts

    _check_timing(c, model)  # the version: a Contract holds only the one read
    want = actuators(model)
    for name, values in (("actions", c.actions), ("action_scale", c.action_scale),
                         ("action_offset", c.action_offset),
                         ("default_joint_pos", c.default_joint_pos)):
        if len(values) != model.nu:
            raise ContractError(f"policy.json {name} has {len(values)} entries but "
                                f"model.xml has {model.nu} actuators")
    for i, (got, exp) in enumerate(zip(c.actions, want)):
        for f in fields(exp):
            mine, value = getattr(got, f.name), getattr(exp, f.name)
            if not same_values(mine, value):
                raise ContractError(
                    f"policy.json actions[{i}].{f.name} is {mine!r} but model.xml's "
                    f"actuator {i} ({exp.name!r}, joint {exp.joint!r}) has {value!r}; "
                    "the contract and the model must come from one export")
    _check_home(c, model, want)
    check_layout(c, model)


def _check_timing(c: Contract, model) -> None:
    """physics_dt is model.xml's timestep; control_dt is substeps of it."""
    if not same_values(c.physics_dt, float(model.opt.timestep)):
        raise ContractError(f"policy.json physics_dt is {c.physics_dt} but model.xml's "
                            f"timestep is {model.opt.timestep}")
    if not same_values(c.control_dt, c.physics_dt * c.substeps):
        raise ContractError(f"policy.json control_dt {c.control_dt} is not substeps "
                            f"{c.substeps} x physics_dt {c.physics_dt}")


def _check_home(c: Contract, model, actions: list) -> None:
    """default_joint_pos is the home keyframe (qpos0 without one); position servos' offsets
    are it too."""
    import mujoco

    from trot.export.model_info import default_joint_pos  # mujoco: deferred, as above

    key = c.home_keyframe
    if key is not None and mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, key) < 0:
        raise ContractError(f"policy.json home_keyframe {key!r} is not a keyframe of "
                            "model.xml")
    home = default_joint_pos(model, key)
    for i, (got, exp) in enumerate(zip(c.default_joint_pos, home)):
        if not same_values(got, exp):
            raise ContractError(f"policy.json default_joint_pos[{i}] ({actions[i].joint}) "
                                f"is {got} but model.xml's keyframe {key!r} has {exp}")
    for i, (off, exp) in enumerate(zip(c.action_offset, home)):
        if actions[i].type == "position" and not same_values(off, exp):
            raise ContractError(
                f"policy.json action_offset[{i}] ({actions[i].joint}) is {off} but a "
                f"position servo's offset is its home position {exp} (model.xml keyframe "
                f"{key!r}): a zero action holds the home pose")


def robot_kind(name: str, where: str):
    """The KINDS entry of a source a robot measures; a ContractError for any other."""
    kind = KINDS.get(name)
    if kind is None or kind.robot is None:
        raise ContractError(f"{where} reads {name!r}, which no robot measures; accepted: "
                            + ", ".join(n for n, v in KINDS.items() if v.robot))
    return kind


def check_layout(c: Contract | ObservationSpec | dict, model) -> None:
    """Slots back to back from 0 to obs_dim, an offset per value, kinds a robot measures,
    and each term as wide as its source (its kind's size in KINDS, from the json source).
    `c`: a contract, or what ObservationSpec.of takes."""
    import mujoco

    spec = ObservationSpec.of(c)
    dims = {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, i): int(model.sensor_dim[i])
            for i in range(model.nsensor)}
    sizes = Sizes(dims, int(spec.command_dim), int(spec.action_dim))
    start = 0
    for k, term in enumerate(spec.observation):
        where = f"policy.json observation[{k}] ({term.name!r})"
        if term.start != start or len(term.offset) != term.size:
            raise ContractError(f"{where}: start {term.start}, size {term.size} and "
                                f"{len(term.offset)} offsets; expected start {start} and "
                                "one offset per value")
        _check_source(term, where, sizes, model)
        start += term.size
    if start != spec.obs_dim:
        raise ContractError(f"policy.json observation slots end at {start}, obs_dim is "
                            f"{spec.obs_dim}")


def _check_source(term, where: str, sizes: Sizes, model) -> None:
    """The term's source (its kind's own fields, read here as its KINDS entry reads an
    ObsTerm) gives `size` values within the model's."""
    src = term.source
    kind = robot_kind(term.kind, where)
    as_term = SimpleNamespace(name=term.name, sensors=tuple(src.get("sensors", ())),
                              start=src.get("start", 0), stop=src.get("stop", 0),
                              grid=tuple(src.get("grid", ())), clip=tuple(src.get("clip", ())))
    try:
        size = kind.size(as_term, sizes)
    except (KeyError, ValueError) as e:  # a sensor model.xml lacks, a bad scan grid
        raise ContractError(f"{where}: {e.args[0]}") from None
    if size != term.size:
        raise ContractError(f"{where} has size {term.size} but its source gives "
                            f"{size} values (model.xml, command_dim, action_dim)")
    if kind.extent and not 0 <= as_term.start < as_term.stop <= kind.extent(model):
        raise ContractError(f"{where}: {term.kind}[{as_term.start}:{as_term.stop}] is "
                            f"not within model.xml's {kind.extent(model)} values")
    if "points" in src and not np.allclose(src["points"], kind.to_json(as_term)["points"]):
        raise ContractError(f"{where}: its scan points are not those of its grid "
                            f"{src['grid']} (trot/core/heightfield.py scan_offsets)")
