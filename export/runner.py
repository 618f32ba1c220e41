"""The robot side: load policy.onnx + policy.json and run them with numpy, onnxruntime and
mujoco only (never torch). `ObservationBuilder` builds the observation from a plain
`mujoco.MjData` using the json layout alone; on hardware, fill the same slots from the
robot's sensors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from trot.observation_kinds import KINDS


class ContractError(ValueError):
    """The exported files are missing, renamed or disagree with each other."""


def _files(path: str | Path) -> tuple[Path, Path, Path]:
    p = Path(path)
    if not p.exists():
        raise ContractError(f"{p}: no such file or directory (missing policy.onnx, "
                            "policy.json, model.xml); give an export directory")
    d = p if p.is_dir() else p.parent
    files = (d / "policy.onnx", d / "policy.json", d / "model.xml")
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ContractError(f"{d}: missing {', '.join(missing)}; an export holds "
                            "policy.onnx, policy.json and model.xml side by side")
    return files


class JointMap:
    """Between the robot's own joint order (hardware often orders its motors differently)
    and the policy's (policy.json's `actions`, one joint each). Per-joint arrays [..., J]."""

    def __init__(self, policy_joints: list[str], robot_joints: list[str]):
        if sorted(policy_joints) != sorted(robot_joints) or \
                len(set(robot_joints)) != len(robot_joints):
            raise ContractError(f"the robot's joints {list(robot_joints)} are not the policy's "
                                f"{list(policy_joints)} in another order")
        where = {j: i for i, j in enumerate(robot_joints)}
        self.policy_joints, self.robot_joints = list(policy_joints), list(robot_joints)
        self.from_robot = np.array([where[j] for j in policy_joints])  # policy[i] = robot[k]
        self.from_policy = np.argsort(self.from_robot)

    def to_policy(self, x_robot: np.ndarray) -> np.ndarray:
        """A per-joint array in the robot's order, in the policy's."""
        return np.asarray(x_robot)[..., self.from_robot]

    def to_robot(self, x_policy: np.ndarray) -> np.ndarray:
        """A per-joint array in the policy's order (actions, targets), in the robot's."""
        return np.asarray(x_policy)[..., self.from_policy]


class OnnxPolicy:
    """action = policy(obs) for one observation [P] or a batch [B, P] (float32/float64).
    `robot_joints`: the robot's joint names in its own order; `joints` then maps per-joint
    arrays both ways (`robot_ctrl` gives the targets in the robot's order)."""

    def __init__(self, path: str | Path, robot_joints: list[str] | None = None):
        import onnxruntime as ort

        onnx_path, json_path, xml_path = _files(path)
        self.dir = onnx_path.parent
        text = json_path.read_text()
        try:
            self.contract = json.loads(text)
        except json.JSONDecodeError as e:
            raise ContractError(f"{json_path} is not valid JSON: {e}") from e
        try:
            self.session = ort.InferenceSession(str(onnx_path),
                                                providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own types for corrupt files
            raise ContractError(f"{onnx_path} is not a loadable ONNX model: {e}") from e
        meta = self.session.get_modelmeta().custom_metadata_map.get("trot")
        if meta is None or json.loads(meta) != self.contract:
            raise ContractError(f"{json_path.name} does not match the contract stored inside "
                                f"{onnx_path.name}; re-export both together")
        c = self.contract
        self.obs_dim, self.action_dim = int(c["obs_dim"]), int(c["action_dim"])
        inp, out = self.session.get_inputs()[0], self.session.get_outputs()[0]
        if inp.shape[-1] != self.obs_dim or out.shape[-1] != self.action_dim:
            raise ContractError(f"onnx graph maps {inp.shape[-1]} -> {out.shape[-1]} but the "
                                f"json says obs_dim {self.obs_dim} -> action_dim "
                                f"{self.action_dim}")
        digest = hashlib.sha256(xml_path.read_bytes()).hexdigest()
        if digest != c["model_xml_sha256"]:
            raise ContractError(f"{xml_path.name} hash {digest[:12]}... does not match the "
                                f"contract's {c['model_xml_sha256'][:12]}...")
        self.model_xml = xml_path
        self.scale = np.asarray(c["action_scale"], dtype=np.float64)
        self.offset = np.asarray(c["action_offset"], dtype=np.float64)
        self.policy_joints = [a["joint"] for a in c["actions"]]
        self.joints = JointMap(self.policy_joints, robot_joints or self.policy_joints)

    def act(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs)
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(f"observation dtype must be float32 or float64, got {x.dtype}")
        if x.ndim not in (1, 2) or x.shape[-1] != self.obs_dim:
            raise ValueError(f"observation must have shape [{self.obs_dim}] or "
                             f"[batch, {self.obs_dim}], got {list(x.shape)}")
        batch = np.ascontiguousarray(x.reshape(-1, self.obs_dim), dtype=np.float32)
        action = self.session.run(["action"], {"obs": batch})[0]
        return action[0] if x.ndim == 1 else action

    def ctrl(self, action: np.ndarray) -> np.ndarray:
        """Actuator commands from actions, exactly as in training (policy order)."""
        return self.offset + self.scale * np.clip(action, -1.0, 1.0)

    def robot_ctrl(self, action: np.ndarray) -> np.ndarray:
        """The joint targets of `ctrl`, in the robot's joint order."""
        return self.joints.to_robot(self.ctrl(action))


class ObservationBuilder:
    """Builds the policy observation from a MjData following the json layout."""

    def __init__(self, contract: dict, model) -> None:
        import mujoco

        self.layout = contract["observation"]
        self.dim = int(contract["obs_dim"])
        self.command = np.zeros(int(contract["command_dim"]))
        self.last_action = np.zeros(int(contract["action_dim"]))
        self._sensor = {}
        for i in range(model.nsensor):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, i)
            adr, dim = int(model.sensor_adr[i]), int(model.sensor_dim[i])
            self._sensor[name] = slice(adr, adr + dim)

    def sensor_slice(self, name: str) -> slice:
        try:
            return self._sensor[name]
        except KeyError:
            raise ContractError(f"the model has no sensor {name!r} that the observation "
                                "reads") from None

    def raw(self, term: dict, data) -> np.ndarray:
        """The term's raw values from `data` (its kind's robot-side read, KINDS)."""
        kind = KINDS.get(term["source"]["kind"])
        if kind is None or kind.robot is None:
            raise ContractError(f"observation term {term['name']!r} reads "
                                f"{term['source']['kind']!r}, which no robot measures; "
                                "accepted: " + ", ".join(k for k, v in KINDS.items() if v.robot))
        return kind.robot(self, term["source"], data)

    def build(self, data) -> np.ndarray:
        obs = np.empty(self.dim, dtype=np.float64)
        for term in self.layout:
            x = (self.raw(term, data) - np.asarray(term["offset"])) * term["scale"]
            obs[term["start"]:term["start"] + term["size"]] = x
        return obs.astype(np.float32)
