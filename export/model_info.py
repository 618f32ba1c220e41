"""What a compiled model says about its actuators and standing pose, in the contract's
terms. numpy and mujoco only: the exporter writes these entries and the torch-free runner
recomputes them from model.xml to check a contract (checks.check_model)."""

from __future__ import annotations

import mujoco
import numpy as np

from trot.export.schema import Actuator


def _name(model: mujoco.MjModel, kind: mujoco.mjtObj, i: int) -> str:
    return mujoco.mj_id2name(model, kind, i) or f"{kind.name.lower()}_{i}"


def actuators(model: mujoco.MjModel) -> list[Actuator]:
    """Per actuator, in actuator order: its joint, PD gains (position servos) and limits."""
    out = []
    for i in range(model.nu):
        if model.actuator_trntype[i] != mujoco.mjtTrn.mjTRN_JOINT:
            raise ValueError(f"actuator {i} ({_name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i)!r})"
                             f" drives a {mujoco.mjtTrn(model.actuator_trntype[i]).name}: the "
                             "export maps each actuator to the joint it drives, so only joint "
                             "transmissions are accepted")
        jid = int(model.actuator_trnid[i, 0])
        gain, bias = model.actuator_gainprm[i], model.actuator_biasprm[i]
        is_position = (model.actuator_gaintype[i] == mujoco.mjtGain.mjGAIN_FIXED
                       and model.actuator_biastype[i] == mujoco.mjtBias.mjBIAS_AFFINE
                       and np.isclose(bias[1], -gain[0]))
        gear = float(model.actuator_gear[i, 0])
        ctrl = tuple(float(x) for x in model.actuator_ctrlrange[i]) \
            if model.actuator_ctrllimited[i] else None
        force = tuple(float(x) for x in model.actuator_forcerange[i]) \
            if model.actuator_forcelimited[i] else None
        if force is None and ctrl is not None and not is_position:
            force = tuple(c * gear for c in ctrl)  # a motor's torque is bounded by ctrl * gear
        out.append(Actuator(
            name=_name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i),
            joint=_name(model, mujoco.mjtObj.mjOBJ_JOINT, jid),
            type="position" if is_position else "motor",
            kp=float(gain[0]) if is_position else None,
            kd=float(-bias[2]) if is_position else None,
            gear=gear, ctrl_range=ctrl, torque_limit=force))
    return out


def home_keyframe(model: mujoco.MjModel, name: str | None) -> str | None:
    """`name` if the model has that keyframe, else None (the standing pose is qpos0)."""
    if name is None:
        return None
    return name if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, name) >= 0 else None


def default_joint_pos(model: mujoco.MjModel, key: str | None = "home") -> list[float]:
    """Actuated joints' positions (actuator order) in keyframe `key` if the model has it,
    else in the model's qpos0."""
    kid = -1 if key is None else mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, key)
    qpos = model.key_qpos[kid] if kid >= 0 else model.qpos0
    return [float(qpos[model.jnt_qposadr[model.actuator_trnid[i, 0]]])
            for i in range(model.nu)]
