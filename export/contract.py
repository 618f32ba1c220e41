"""The deployment contract (policy.json): everything the robot side needs to build the
observation and interpret the action. Plain data, deterministic (sorted keys, no clocks),
so two exports of one checkpoint are byte-identical."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import mujoco
import numpy as np

from trot import __version__
from trot.tasks.env import Env
from trot.tasks.registry import get_task

CONTRACT_VERSION = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _name(model: mujoco.MjModel, kind: mujoco.mjtObj, i: int) -> str:
    return mujoco.mj_id2name(model, kind, i) or f"{kind.name.lower()}_{i}"


def actuators(model: mujoco.MjModel) -> list[dict[str, Any]]:
    """Per actuator, in actuator order: its joint, PD gains (position servos) and limits."""
    out = []
    for i in range(model.nu):
        jid = int(model.actuator_trnid[i, 0])
        gain, bias = model.actuator_gainprm[i], model.actuator_biasprm[i]
        is_position = (model.actuator_gaintype[i] == mujoco.mjtGain.mjGAIN_FIXED
                       and model.actuator_biastype[i] == mujoco.mjtBias.mjBIAS_AFFINE
                       and np.isclose(bias[1], -gain[0]))
        gear = float(model.actuator_gear[i, 0])
        ctrl = [float(x) for x in model.actuator_ctrlrange[i]] \
            if model.actuator_ctrllimited[i] else None
        force = [float(x) for x in model.actuator_forcerange[i]] \
            if model.actuator_forcelimited[i] else None
        if force is None and ctrl is not None and not is_position:
            force = [c * gear for c in ctrl]  # a motor's torque is bounded by ctrl * gear
        out.append({
            "name": _name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i),
            "joint": _name(model, mujoco.mjtObj.mjOBJ_JOINT, jid),
            "type": "position" if is_position else "motor",
            "kp": float(gain[0]) if is_position else None,
            "kd": float(-bias[2]) if is_position else None,
            "gear": gear, "ctrl_range": ctrl, "torque_limit": force,
        })
    return out


def default_joint_pos(model: mujoco.MjModel) -> list[float]:
    """Actuated joints' positions in the 'home' keyframe, else the model's qpos0."""
    kid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home")
    qpos = model.key_qpos[kid] if kid >= 0 else model.qpos0
    return [float(qpos[model.jnt_qposadr[model.actuator_trnid[i, 0]]])
            for i in range(model.nu)]


def build_contract(env: Env, task_config: Any, env_steps: int, opset: int,
                   model_xml_sha256: str) -> dict[str, Any]:
    model, task = env.sim.model, env.task
    scale, offset = task.action_affine(model)
    return {
        "contract_version": CONTRACT_VERSION,
        "trot_version": __version__,
        "task": env.name,
        "task_source": get_task(env.name).source.to_json(),  # sim2sim finds user tasks
        "task_config": json.loads(json.dumps(dataclasses.asdict(task_config))),
        "training_env_steps": int(env_steps),
        "opset": opset,
        "model_xml": "model.xml",
        "model_xml_sha256": model_xml_sha256,
        "obs_dim": env.obs_dim,
        "action_dim": env.action_dim,
        "observation": env.policy_layout.to_json(),
        "actions": actuators(model),
        "action_scale": [float(x) for x in scale],
        "action_offset": [float(x) for x in offset],
        "action_clip": [-1.0, 1.0],
        "action_to_ctrl": "ctrl = action_offset + action_scale * clip(action, -1, 1)",
        "default_joint_pos": default_joint_pos(model),
        "control_dt": env.control_dt,
        "physics_dt": float(model.opt.timestep),
        "substeps": env.sim.substeps,
        "command_dim": task.command_dim,
        "command_ranges": getattr(task, "command_ranges", lambda: None)(),
    }


def dumps(contract: dict[str, Any]) -> str:
    return json.dumps(contract, indent=2, sort_keys=True) + "\n"
