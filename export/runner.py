"""The robot side: load policy.onnx + policy.json and run them with numpy, onnxruntime and
mujoco only (never torch); the contract's checks against model.xml are in checks.py.
`ObservationBuilder` builds the observation from a plain
`mujoco.MjData` using the json layout alone; on hardware, fill the same slots from the
robot's sensors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from trot.core.heightfield import height_maps
from trot.export.checks import ContractError, check_model, robot_kind
from trot.export.schema import Contract, ObservationSpec, ObservationTerm, RecurrentState

__all__ = ["ContractError", "JointMap", "ObservationBuilder", "OnnxPolicy"]


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


HISTORY_ORDER, HISTORY_FILL, STATE_RESET = "oldest_first", "first_observation", "zeros"
"""the memory rules this runner implements (contract.memory_fields writes them)"""


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
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise ContractError(f"{json_path} is not valid JSON: {e}") from e
        try:
            self.session = ort.InferenceSession(str(onnx_path),
                                                providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own types for corrupt files
            raise ContractError(f"{onnx_path} is not a loadable ONNX model: {e}") from e
        meta = self.session.get_modelmeta().custom_metadata_map.get("trot")
        if meta is None or json.loads(meta) != raw:
            raise ContractError(f"{json_path.name} does not match the contract stored inside "
                                f"{onnx_path.name}; re-export both together")
        self.contract = c = Contract.from_json(raw)  # its version and keys checked
        self.obs_dim, self.action_dim = int(c.obs_dim), int(c.action_dim)
        _check_memory_rules(c)
        self.history = int(c.obs_history.length)
        self.state_spec = c.recurrent_state
        _check_graph(self.session, self.history * self.obs_dim, self.action_dim,
                     self.state_spec)
        extra = c.model_files
        bad = [n for n in extra if Path(n).name != n or n in (".", "..")]
        if bad:
            raise ContractError(f"policy.json model_files {bad}: plain file names beside "
                                "model.xml only")
        files = {xml_path.name: c.model_xml_sha256} | extra
        for name, want in files.items():  # model.xml and the files it reads (terrains)
            f = self.dir / name
            if not f.is_file():
                raise ContractError(f"{self.dir}: missing {name}, which model.xml reads; an "
                                    "export keeps the files of policy.json's model_files "
                                    "beside model.xml")
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            if digest != want:
                raise ContractError(f"{name} hash {digest[:12]}... does not match the "
                                    f"contract's {want[:12]}...")
        self.model_xml = xml_path
        import mujoco

        self.model = mujoco.MjModel.from_xml_path(str(xml_path))  # the robot, as trained
        check_model(c, self.model)
        self.scale = np.asarray(c.action_scale, dtype=np.float64)
        self.offset = np.asarray(c.action_offset, dtype=np.float64)
        ranges = [a.ctrl_range or (-np.inf, np.inf) for a in c.actions]
        self.ctrl_low, self.ctrl_high = np.asarray(ranges, dtype=np.float64).T  # [nu] each
        self.policy_joints = [a.joint for a in c.actions]
        self.joints = JointMap(self.policy_joints, robot_joints or self.policy_joints)

        self.reset()

    @property
    def has_memory(self) -> bool:
        return self.history > 1 or bool(self.state_spec)

    def reset(self, rows: np.ndarray | None = None) -> None:
        """Start new episodes: every robot's (rows None), or those of a batch's rows (a bool
        mask or indices). Their next `act` refills the history with its observation and
        feeds the zero recurrent state, the contract's reset rules."""
        if rows is None or self._frames is None:
            self._frames, self._state, self._fresh = None, {}, None
            return
        r = np.asarray(rows)
        if r.size == 0:  # nothing ended (np.asarray([]) is a float array: no index)
            return
        if r.dtype != bool and not np.issubdtype(r.dtype, np.integer):
            raise TypeError(f"reset rows must be a bool mask or integer indices, got {r.dtype}")
        self._fresh[r] = True

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The action for this control step's observation [obs_dim] (one robot) or
        [batch, obs_dim]; a policy with memory keeps its history and state between calls,
        one row per robot, until `reset`."""
        x = np.asarray(obs)
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(f"observation dtype must be float32 or float64, got {x.dtype}")
        if x.ndim not in (1, 2) or x.shape[-1] != self.obs_dim:
            raise ValueError(f"observation must have shape [{self.obs_dim}] or "
                             f"[batch, {self.obs_dim}], got {list(x.shape)}")
        batch = np.ascontiguousarray(x.reshape(-1, self.obs_dim), dtype=np.float32)
        if not np.isfinite(batch).all():  # refused before it reaches the memory
            bad = np.argwhere(~np.isfinite(batch))[:, -1]
            raise ValueError(f"observation has NaN or Inf values at {sorted(set(bad.tolist()))}"
                             "; ObservationBuilder.build reads them as 0, as training does")
        if not self.has_memory:
            action = self.session.run(["action"], {"obs": batch})[0]
            return action[0] if x.ndim == 1 else action
        feeds = self._remember(batch)
        outs = self.session.run(["action", *(s.output for s in self.state_spec)], feeds)
        self._state = {s.input: v for s, v in zip(self.state_spec, outs[1:])}
        return outs[0][0] if x.ndim == 1 else outs[0]

    def _remember(self, frame: np.ndarray) -> dict[str, np.ndarray]:
        """The graph's inputs for this step: the history with `frame` [B, P] newest, and
        the state, both restarted where an episode starts."""
        b = len(frame)
        if self._frames is None:  # every robot starts an episode
            self._fresh = np.ones(b, dtype=bool)
            self._frames = np.zeros((b, self.history * self.obs_dim), np.float32)
            self._state = {s.input: np.zeros((b, *s.shape), np.float32)
                           for s in self.state_spec}
        if b != len(self._frames):
            raise ValueError(f"a batch of {b} observations, but this policy's memory holds "
                             f"{len(self._frames)} robots; call reset() to start over")
        fresh = self._fresh[:, None]
        shifted = np.concatenate([self._frames[:, self.obs_dim:], frame], 1)
        self._frames = np.where(fresh, np.tile(frame, self.history), shifted)
        state = {k: np.where(fresh, 0.0, v).astype(np.float32) for k, v in self._state.items()}
        self._fresh[:] = False
        return {"obs": self._frames} | state

    def ctrl(self, action: np.ndarray) -> np.ndarray:
        """Actuator commands from actions, exactly as in training (policy order): within
        each actuator's ctrl_range, where MuJoCo clamped them."""
        return np.clip(self.offset + self.scale * np.clip(action, -1.0, 1.0),
                       self.ctrl_low, self.ctrl_high)

    def robot_ctrl(self, action: np.ndarray) -> np.ndarray:
        """The joint targets of `ctrl`, in the robot's joint order."""
        return self.joints.to_robot(self.ctrl(action))


def _check_memory_rules(c: Contract) -> None:
    """A history or state rule other than those this runner implements would be misread
    without a word: refused, naming the field."""
    h = c.obs_history
    for key, got, want in (("order", h.order, HISTORY_ORDER), ("fill", h.fill, HISTORY_FILL)):
        if got != want:
            raise ContractError(f"policy.json obs_history.{key} is {got!r}; this "
                                f"runner implements {want!r}")
    if h.input_dim != h.length * c.obs_dim:
        raise ContractError(f"policy.json obs_history.input_dim {h.input_dim} is "
                            f"not length {h.length} x obs_dim {c.obs_dim}")
    for i, s in enumerate(c.recurrent_state):
        if s.reset != STATE_RESET:
            raise ContractError(f"policy.json recurrent_state[{i}].reset is "
                                f"{s.reset!r}; this runner implements {STATE_RESET!r}")


def _check_graph(session, input_dim: int, action_dim: int,
                 state: tuple[RecurrentState, ...]) -> None:
    """The graph's inputs and outputs are the contract's: obs [B, history * obs_dim] and the
    recurrent state's inputs, action [B, action_dim] and the state's outputs, each state
    [B, *shape]."""
    ins = {i.name: i.shape for i in session.get_inputs()}
    outs = {o.name: o.shape for o in session.get_outputs()}
    want_in = {"obs": [input_dim]} | {s.input: list(s.shape) for s in state}
    want_out = {"action": [action_dim]} | {s.output: list(s.shape) for s in state}
    for kind, got, want in (("inputs", ins, want_in), ("outputs", outs, want_out)):
        if sorted(got) != sorted(want):
            raise ContractError(f"the onnx graph's {kind} are {sorted(got)} but policy.json "
                                f"(obs_history, recurrent_state) says {sorted(want)}")
        for name, shape in want.items():
            if list(got[name][1:]) != shape:
                raise ContractError(f"the onnx graph's {name} has shape {got[name]} but "
                                    f"policy.json says [batch, {', '.join(map(str, shape))}] "
                                    "(obs_dim x obs_history, action_dim, recurrent_state)")


class ObservationBuilder:
    """Builds the policy observation from a MjData following the json layout. `contract`:
    a Contract (OnnxPolicy.contract), or a mapping with its observation, obs_dim,
    command_dim and action_dim (ObservationSpec.of)."""

    def __init__(self, contract: Contract | ObservationSpec | dict, model) -> None:
        import mujoco

        spec = ObservationSpec.of(contract)
        self.layout = spec.observation
        self.dim = int(spec.obs_dim)
        self.command = np.zeros(int(spec.command_dim))
        self.last_action = np.zeros(int(spec.action_dim))
        self.time = 0.0  # s since this episode began: the gait clock terms read it
        self._model, self._maps = model, None
        self._sensor = {}
        for i in range(model.nsensor):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, i)
            adr, dim = int(model.sensor_adr[i]), int(model.sensor_dim[i])
            self._sensor[name] = slice(adr, adr + dim)

    def height_maps(self):
        """The model's heightfields and ground plane, for a height scan (sim2sim)."""
        if self._maps is None:

            self._maps = height_maps(self._model)
        return self._maps

    def sensor_slice(self, name: str) -> slice:
        try:
            return self._sensor[name]
        except KeyError:
            raise ContractError(f"the model has no sensor {name!r} that the observation "
                                "reads") from None

    def raw(self, term: ObservationTerm | dict, data) -> np.ndarray:
        """The term's raw values from `data` (its kind's robot-side read, KINDS); a term
        of the layout, or its json object."""
        if not isinstance(term, ObservationTerm):
            term = ObservationTerm.from_json(term)
        kind = robot_kind(term.kind, f"observation term {term.name!r}")
        return kind.robot(self, term.source, data)

    def build(self, data) -> np.ndarray:
        """The observation from `data`; a non-finite raw value (a sensor fault) reads as 0,
        as a diverged env's does in training (tasks/observation.py build_obs)."""
        obs = np.empty(self.dim, dtype=np.float64)
        for term in self.layout:
            raw = np.nan_to_num(np.asarray(self.raw(term, data), dtype=np.float64),
                                nan=0.0, posinf=0.0, neginf=0.0)
            if "clip" in term.source:  # the source's own field (observation_kinds.py)
                raw = np.clip(raw, *term.source["clip"])
            x = (raw - np.asarray(term.offset)) * term.scale
            obs[term.start:term.start + term.size] = x
        return obs.astype(np.float32)
