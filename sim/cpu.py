"""The `cpu` backend: MuJoCo C stepping the whole batch on all cores with the GIL released.

One persistent `mujoco.rollout.Rollout` thread pool steps every env `substeps` physics steps
per call. MuJoCo's float64 state lives in preallocated numpy arrays; torch views them
without copying, and the only copies are the float64 -> float32 ones into the tensors
that tasks read (and float32 -> float64 for the control).

Domain randomization uses per-env MjModel objects, created copy-on-write: envs share the
base model until a field of theirs is set, then get their own copy (see docs/architecture.md
for the memory cost).
"""

from __future__ import annotations

import copy
import os

import mujoco
import numpy as np
import torch
from mujoco import rollout
from torch import Tensor

from trot.sim.base import check_field, diverged, sensor_slices, sensor_view

_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS.value


def _state_offset(model: mujoco.MjModel, bit: int) -> int:
    """Offset of one state component inside a FULLPHYSICS state vector."""
    return mujoco.mj_stateSize(model, _FULL & (bit - 1))


class CpuSim:
    """Batched MuJoCo C. See `trot.sim.base.BatchedSim` for the contract."""

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        substeps: int = 1,
        nthread: int | None = None,
    ):
        if num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs}")
        if substeps <= 0:
            raise ValueError(f"substeps must be a positive integer, got {substeps}")
        # Divergence must stay visible: MuJoCo would otherwise silently reset a diverging
        # MjData to qpos0 mid-rollout. The NaN guard (env loop) resets it properly instead.
        model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_AUTORESET
        self.model = model
        self.num_envs = n = num_envs
        self.substeps = substeps
        self.device = torch.device("cpu")
        self.nthread = max(1, nthread or os.cpu_count() or 1)
        self._pool = rollout.Rollout(nthread=self.nthread if self.nthread > 1 else 0)
        self._datas = [mujoco.MjData(model) for _ in range(self.nthread)]
        self._models = [model] * n  # per-env; copied on first set_params of that env
        self._own_model = np.zeros(n, dtype=bool)
        self._params64: dict[str, Tensor] = {}  # field -> [N, *shape], set by DR
        self._params32: dict[str, Tensor] = {}  # float32 mirror that tasks read

        nstate = mujoco.mj_stateSize(model, _FULL)
        self._t_slice = slice(0, 1)
        q0 = _state_offset(model, mujoco.mjtState.mjSTATE_QPOS.value)
        v0 = _state_offset(model, mujoco.mjtState.mjSTATE_QVEL.value)
        self._q_slice = slice(q0, q0 + model.nq)
        self._v_slice = slice(v0, v0 + model.nv)
        self._qv_slice = slice(q0, v0 + model.nv)

        fresh = mujoco.MjData(model)
        mujoco.mj_forward(model, fresh)
        init = np.empty(nstate)
        mujoco.mj_getState(model, fresh, init, _FULL)
        self._init_state = init  # [nstate]: qpos0, zero velocity, model's eq/mocap
        self._state = np.tile(init, (n, 1))  # [N, nstate] float64, the canonical state
        self._ctrl = np.zeros((n, substeps, model.nu))  # [N, S, nu] float64
        self._out_state = np.zeros((n, substeps, nstate))  # [N, S, nstate]
        self._out_sens = np.zeros((n, substeps, model.nsensordata))  # [N, S, ns]
        self._sens64 = np.tile(fresh.sensordata, (n, 1))  # [N, ns] float64

        # torch views of MuJoCo's arrays (no copy) and the float32 tensors tasks read
        self._state_t = torch.from_numpy(self._state)
        self._ctrl_t = torch.from_numpy(self._ctrl)
        self._sens64_t = torch.from_numpy(self._sens64)
        self.qpos = torch.zeros(n, model.nq)
        self.qvel = torch.zeros(n, model.nv)
        self.sensordata = torch.zeros(n, model.nsensordata)
        self.unstable = torch.zeros(n, dtype=torch.bool)
        self._sensors = sensor_slices(model)
        self._refresh()

    # ------------------------------------------------------------------ properties
    @property
    def control_dt(self) -> float:
        return float(self.model.opt.timestep) * self.substeps

    @property
    def time(self) -> Tensor:
        """[N] float64 simulated time since each env's last reset."""
        return self._state_t[:, 0]

    def sensor(self, name: str) -> Tensor:
        return sensor_view(self, self._sensors, name)

    # ------------------------------------------------------------------ stepping
    def step(self, ctrl: Tensor) -> None:
        self._ctrl_t.copy_(ctrl.unsqueeze(1).expand(-1, self.substeps, -1))  # [N, S, nu]
        self._pool.rollout(
            self._models,
            self._datas,
            self._state,
            self._ctrl,
            skip_checks=True,
            nstep=self.substeps,
            state=self._out_state,
            sensordata=self._out_sens,
        )
        np.copyto(self._state, self._out_state[:, -1])
        np.copyto(self._sens64, self._out_sens[:, -1])
        self.unstable.copy_(torch.from_numpy(diverged(self._state[:, self._qv_slice])))
        self._refresh()

    def _refresh(self) -> None:
        self.qpos.copy_(self._state_t[:, self._q_slice])
        self.qvel.copy_(self._state_t[:, self._v_slice])
        self.sensordata.copy_(self._sens64_t)

    # ------------------------------------------------------------------ resets
    def reset(self, mask: Tensor, qpos: Tensor, qvel: Tensor) -> None:
        ids = np.flatnonzero(mask.numpy())  # cpu backend: host arrays are the state
        if ids.size == 0:
            return
        rows = torch.from_numpy(ids)
        self._state[ids] = self._init_state
        self._state_t[rows, self._q_slice] = qpos[rows].double()
        self._state_t[rows, self._v_slice] = qvel[rows].double()
        self._sens64[ids] = self._forward_sensors(ids)
        self.unstable[rows] = False
        self._refresh()

    def _forward_sensors(self, ids: np.ndarray) -> np.ndarray:
        """Sensors of the envs `ids` in their current state under zero control: [k, ns].

        One physics step's recorded sensordata is the forward pass at its *initial* state
        (mj_step = mj_forward, then integrate), so a 1-step rollout from the reset states,
        whose resulting states are discarded, is a batched, threaded mj_forward.
        """
        k = ids.size
        out_s = np.empty((k, 1, self._state.shape[1]))
        out_d = np.empty((k, 1, self.model.nsensordata))
        self._pool.rollout([self._models[i] for i in ids], self._datas, self._state[ids],
                           np.zeros((k, 1, self.model.nu)), skip_checks=True, nstep=1,
                           state=out_s, sensordata=out_d)
        return out_d[:, 0]

    # ------------------------------------------------------------------ randomization
    def set_params(self, field: str, mask: Tensor, values: Tensor) -> None:
        shape = check_field(self.model, field)
        if tuple(values.shape) != (self.num_envs, *shape):
            raise ValueError(
                f"values for {field} must have shape {(self.num_envs, *shape)}, "
                f"got {tuple(values.shape)}"
            )
        self.params(field)  # materialize the per-env table
        table = self._params64[field]  # [N, *shape] float64, authoritative
        table[mask] = values[mask].to(torch.float64)
        self._params32[field].copy_(table)
        vals = table.numpy()
        for i in np.flatnonzero(mask.numpy()):
            if not self._own_model[i]:
                self._models[i] = copy.copy(self.model)
                self._own_model[i] = True
            getattr(self._models[i], field)[...] = vals[i]

    def params(self, field: str) -> Tensor:
        shape = check_field(self.model, field)
        if field not in self._params64:
            base = torch.as_tensor(np.array(getattr(self.model, field), dtype=np.float64))
            self._params64[field] = base.expand(self.num_envs, *shape).clone()
            self._params32[field] = self._params64[field].float()
        return self._params32[field]

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Tensor]:
        out = {"state": self._state_t.clone(), "sensordata": self._sens64_t.clone()}
        out["own_model"] = torch.from_numpy(self._own_model.copy())
        out.update({f"param/{k}": v.clone() for k, v in self._params64.items()})
        return out

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self._state_t.copy_(state["state"])
        self._sens64_t.copy_(state["sensordata"])
        owners = state["own_model"]
        for key, vals in state.items():
            if key.startswith("param/"):
                self.set_params(key.removeprefix("param/"), owners, vals)
        self.unstable.zero_()
        self._refresh()
