"""The deployment contract (policy.json): everything the robot side needs to build the
observation and interpret the action, built as a `Contract` (export/schema.py) from the env
being exported. Plain data, deterministic (sorted keys, no clocks), so two exports of one
checkpoint are byte-identical."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from trot import __version__
from trot.export.model_info import actuators, default_joint_pos, home_keyframe
from trot.export.runner import HISTORY_FILL, HISTORY_ORDER, STATE_RESET
from trot.export.schema import Contract, ObservationTerm, ObsHistory, RecurrentState
from trot.tasks.env import Env
from trot.tasks.registry import get_task

STATE_NAMES = ("h", "c")  # a GRU's state is h; an LSTM's h and c (graph inputs; "_out": outputs)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _plain(x: Any) -> Any:
    """x as policy.json reads it back (tuples as lists), so a written Contract equals its
    parse."""
    return json.loads(json.dumps(x))


def memory_fields(env: Env, memory: tuple[str, int] | None
                  ) -> tuple[ObsHistory, tuple[RecurrentState, ...]]:
    """What a robot loop keeps between steps (the contract's obs_history, recurrent_state).
    obs_history: the graph's `obs` input is the last `length` observations of `obs_dim`,
    oldest first, a new episode's filled with copies of its first. recurrent_state: graph
    inputs fed back from the outputs of the previous step (`NAME_out`), zero at each
    episode's start. memory: (kind, hidden size)."""
    k = env.history
    names = () if memory is None else STATE_NAMES[:2 if memory[0] == "lstm" else 1]
    history = ObsHistory(length=k, order=HISTORY_ORDER, fill=HISTORY_FILL,
                         input_dim=k * env.frame_dim)
    return history, tuple(RecurrentState(input=n, output=f"{n}_out", shape=(memory[1],),
                                         reset=STATE_RESET, cell=memory[0]) for n in names)


def build_contract(env: Env, task_config: Any, env_steps: int, opset: int,
                   model_xml_sha256: str, model_files: dict[str, bytes],
                   actor_memory: tuple[str, int] | None = None) -> Contract:
    """model_files: the files model.xml reads (a terrain's heightfield), by name;
    actor_memory: a recurrent actor's (cell, hidden size), None for an MLP."""
    model, task = env.sim.model, env.task
    scale, offset = task.action_affine(model)
    home = home_keyframe(model, task.home_keyframe)
    history, state = memory_fields(env, actor_memory)
    return Contract(
        obs_history=history,
        recurrent_state=state,
        model_files={k: sha256(v) for k, v in sorted(model_files.items())},
        action_latency_steps=task.action_latency_steps(),
        trot_version=__version__,
        task=env.name,
        task_source=_plain(get_task(env.name).source.to_json()),  # sim2sim finds user tasks
        task_config=_plain(dataclasses.asdict(task_config)),
        training_env_steps=int(env_steps),
        opset=opset,
        model_xml_sha256=model_xml_sha256,
        obs_dim=env.frame_dim,
        action_dim=env.action_dim,
        observation=tuple(ObservationTerm.from_json(t)
                          for t in _plain(env.policy_layout.to_json())),
        actions=tuple(actuators(model)),
        action_scale=tuple(float(x) for x in scale),
        action_offset=tuple(float(x) for x in offset),
        home_keyframe=home,
        default_joint_pos=tuple(default_joint_pos(model, home)),
        control_dt=env.control_dt,
        physics_dt=float(model.opt.timestep),
        substeps=env.sim.substeps,
        command_dim=task.command_dim,
        command_ranges=_plain(getattr(task, "command_ranges", lambda: None)()),
    )
