"""The deployment contract (policy.json): everything the robot side needs to build the
observation and interpret the action. Plain data, deterministic (sorted keys, no clocks),
so two exports of one checkpoint are byte-identical."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from trot import __version__
from trot.export.checks import CONTRACT_VERSION
from trot.export.model_info import actuators, default_joint_pos, home_keyframe
from trot.export.runner import HISTORY_FILL, HISTORY_ORDER, STATE_RESET
from trot.tasks.env import Env
from trot.tasks.registry import get_task

STATE_NAMES = ("h", "c")  # a GRU's state is h; an LSTM's h and c (graph inputs; "_out": outputs)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def memory_fields(env: Env, memory: tuple[str, int] | None) -> dict[str, Any]:
    """What a robot loop keeps between steps. obs_history: the graph's `obs` input is the
    last `length` observations of `obs_dim`, oldest first, a new episode's filled with
    copies of its first. recurrent_state: graph inputs fed back from the outputs of the
    previous step (`NAME_out`), zero at each episode's start. memory: (kind, hidden size)."""
    k = env.history
    names = () if memory is None else STATE_NAMES[:2 if memory[0] == "lstm" else 1]
    return {
        "obs_history": {"length": k, "order": HISTORY_ORDER, "fill": HISTORY_FILL,
                        "input_dim": k * env.frame_dim},
        "recurrent_state": [{"input": n, "output": f"{n}_out", "shape": [memory[1]],
                             "reset": STATE_RESET, "cell": memory[0]} for n in names],
    }


def build_contract(env: Env, task_config: Any, env_steps: int, opset: int,
                   model_xml_sha256: str, model_files: dict[str, bytes],
                   actor_memory: tuple[str, int] | None = None) -> dict[str, Any]:
    """model_files: the files model.xml reads (a terrain's heightfield), by name;
    actor_memory: a recurrent actor's (cell, hidden size), None for an MLP."""
    model, task = env.sim.model, env.task
    scale, offset = task.action_affine(model)
    home = home_keyframe(model, task.home_keyframe)
    return memory_fields(env, actor_memory) | {
        "contract_version": CONTRACT_VERSION,
        "model_files": {k: sha256(v) for k, v in sorted(model_files.items())},
        "action_latency_steps": task.action_latency_steps(),
        "trot_version": __version__,
        "task": env.name,
        "task_source": get_task(env.name).source.to_json(),  # sim2sim finds user tasks
        "task_config": json.loads(json.dumps(dataclasses.asdict(task_config))),
        "training_env_steps": int(env_steps),
        "opset": opset,
        "model_xml": "model.xml",
        "model_xml_sha256": model_xml_sha256,
        "obs_dim": env.frame_dim,
        "action_dim": env.action_dim,
        "observation": env.policy_layout.to_json(),
        "actions": actuators(model),
        "action_scale": [float(x) for x in scale],
        "action_offset": [float(x) for x in offset],
        "action_clip": [-1.0, 1.0],
        "action_to_ctrl": "ctrl = action_offset + action_scale * clip(action, -1, 1)",
        "home_keyframe": home,
        "default_joint_pos": default_joint_pos(model, home),
        "control_dt": env.control_dt,
        "physics_dt": float(model.opt.timestep),
        "substeps": env.sim.substeps,
        "command_dim": task.command_dim,
        "command_ranges": getattr(task, "command_ranges", lambda: None)(),
    }


def dumps(contract: dict[str, Any]) -> str:
    return json.dumps(contract, indent=2, sort_keys=True) + "\n"
