"""The `cpu` backend: MuJoCo C stepping the whole batch on all cores with the GIL released.

Built on `mujoco.batch.Batch` (MuJoCo >= 4.0): every env is one row of integration state
(time, qpos, qvel, act, warmstart, ctrl, ...) in one float64 array; a call loads each row
into a per-thread MjData, steps it and saves it back, bit-identical to a loop of `mj_step`
over one MjData per env. Rows keep their solver warmstart between control steps.

torch views MuJoCo's arrays without copying; the only copies are float64 -> float32 into
the tensors tasks read (qpos, qvel, sensordata) and float32 -> float64 for the control.

Domain randomization uses the batch's per-env model fields (`Batch.expand`): only a
randomized field is stored per env ([N, *field.shape] float64), everything else is shared,
and constants derived from masses or inertial frames are recomputed (`set_const`) for the
envs that changed.

Tracked MjData fields (`fields=`, read with `data(name)`): outputs the batch copies out after
each call; for RNE_POST_FIELDS the batch is persistent (one MjData per env, so the data
mj_step left is still there) and each env's MjData gets mj_rnePostConstraint on the host
after the step, a few tens of microseconds per env, paid only by tasks that ask for them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import mujoco
import numpy as np
import torch
from mujoco import batch
from torch import Tensor

from trot.sim.base import (
    MAX_STATE_VALUE,
    RANDOMIZABLE_FIELDS,
    RNE_POST_FIELDS,
    available_cpus,
    check_field,
    sensor_slices,
    sensor_view,
)

_SETCONST_INPUTS = frozenset(mujoco.MjModel._setconst_inputs)


def _view(array: np.ndarray) -> Tensor:
    """A torch view of a MuJoCo batch array (outputs are read-only numpy; torch warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


class CpuSim:
    """Batched MuJoCo C. See `trot.sim.base.BatchedSim` for the contract."""

    def __init__(self, model: mujoco.MjModel, num_envs: int, substeps: int = 1,
                 nthread: int | None = None, fields: Sequence[str] = ()):
        if num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs}")
        if substeps <= 0:
            raise ValueError(f"substeps must be a positive integer, got {substeps}")
        # Divergence must stay visible: MuJoCo would otherwise silently reset a diverging
        # env to qpos0 mid-step. The NaN guard (env loop) resets it properly instead.
        model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_AUTORESET
        self.model = model
        self.num_envs = n = num_envs
        self.substeps = substeps
        self.device = torch.device("cpu")
        self.nthread = max(1, nthread or available_cpus())  # this process's cores
        self.fields = tuple(dict.fromkeys(fields))
        for f in self.fields:
            if f not in batch.DATA_FIELDS or f in ("qpos", "qvel", "sensordata"):
                raise ValueError(f"cannot track MjData field {f!r}; accepted: MjData fields "
                                 "other than qpos, qvel and sensordata (read those directly)")
        rne = [f for f in self.fields if f in RNE_POST_FIELDS]
        # persistent: keep each env's MjData as mj_step left it, for mj_rnePostConstraint
        self._b = batch.Batch(model, n, nthread=self.nthread, persistent=bool(rne))
        self._b.reset()  # model defaults + forward kinematics for every env
        # the binding's own forward (see _forward); None where a mujoco version lacks it
        self._c_forward = getattr(getattr(self._b, "_b", None), "forward", None)
        self._fresh_row = self._b.state[0].copy()  # time 0, qpos0, zero vel/act/warmstart

        # live float64 arrays over the state rows / outputs, and their torch views
        nq, nv = model.nq, model.nv
        self._qpos_np, self._qvel_np = self._b.bind("qpos"), self._b.bind("qvel")
        # qpos and qvel are adjacent in each state row (mjSTATE_INTEGRATION order): one
        # [N, nq + nv] float64 block, so one copy and one divergence check serve both
        state = self._b.state
        col = (self._qpos_np.ctypes.data - state.ctypes.data) // state.itemsize
        assert self._qvel_np.ctypes.data == self._qpos_np.ctypes.data + state.itemsize * nq
        self._qq64 = _view(state[:, col:col + nq + nv])
        self._ctrl64 = _view(self._b.bind("ctrl"))  # [N, nu]
        self._sens64 = _view(self._b.bind("sensordata"))  # [N, ns], read-only output
        self._qq = torch.zeros(n, nq + nv)  # float32 [qpos | qvel]
        self.qpos, self.qvel = self._qq[:, :nq], self._qq[:, nq:]
        self.sensordata = torch.zeros(n, model.nsensordata)
        self.unstable = torch.zeros(n, dtype=torch.bool)
        self.all_stable = True
        # numpy views of the same memory, for the per-step host work
        self._qq_np, self._qq64_np = self._qq.numpy(), self._qq64.numpy()
        self._sens_np, self._sens64_np = self.sensordata.numpy(), self._sens64.numpy()
        self._ctrl64_np, self._unstable_np = self._ctrl64.numpy(), self.unstable.numpy()
        self._abs_np = np.empty(self._qq64_np.shape)  # scratch of the divergence check
        self._scratch = mujoco.MjData(model) if rne else None
        # float64 sources of the tracked fields: the batch's outputs, or our rne buffers
        self._rne64 = {f: np.zeros((n, *getattr(self._scratch, f).shape)) for f in rne}
        self._data64 = {f: self._rne64[f] if f in self._rne64 else self._b.bind(f)
                        for f in self.fields}
        self._data32 = {f: torch.zeros(a.shape) for f, a in self._data64.items()}
        # precise values a checkpoint restored, read until the next step recomputes them
        # (a forward at the restored state is not what mj_step left: xpos lags a step)
        self._restored64: dict[str, np.ndarray] = {}
        self._rne_post(np.arange(n))
        self._sensors = sensor_slices(model)
        self._params32: dict[str, Tensor] = {}
        self._refresh()

    # ------------------------------------------------------------------ properties
    @property
    def control_dt(self) -> float:
        return float(self.model.opt.timestep) * self.substeps

    @property
    def time(self) -> Tensor:
        """[N] float64 simulated time since each env's last reset."""
        return _view(self._b.bind("time"))

    def sensor(self, name: str) -> Tensor:
        return sensor_view(self, self._sensors, name)

    def data(self, name: str, precise: bool = False) -> Tensor:
        try:
            if precise:
                return _view(self._restored64.get(name, self._data64[name]))
            return self._data32[name]
        except KeyError:
            raise KeyError(f"MjData field {name!r} is not tracked; this sim tracks "
                           f"{list(self.fields)} (Task.data_fields)") from None

    def _rne_post(self, ids: np.ndarray) -> None:
        """mj_rnePostConstraint on each env's MjData as its last call left it. The shared
        model serves every env: the function reads model structure, and masses only
        through cinert, which is in the data."""
        if not self._rne64:
            return
        d = self._scratch
        for i in ids.tolist():
            self._b.get_data(i, d)
            mujoco.mj_rnePostConstraint(self.model, d)
            for f, buf in self._rne64.items():
                buf[i] = getattr(d, f)

    # ------------------------------------------------------------------ stepping
    def step(self, ctrl: Tensor) -> None:
        # numpy on the host arrays: a numpy call costs a fraction of a torch op's dispatch,
        # which dominates at these sizes (the cpu backend's one intended exception)
        np.copyto(self._ctrl64_np, ctrl.numpy())
        failed = None
        try:
            self._b.step(nstep=self.substeps)
        except batch.SimulationError as e:  # MuJoCo raised in some envs: those diverged
            failed = e.ids
        if self._rne64:
            self._rne_post(np.arange(self.num_envs))
        if self._restored64:  # the step recomputed them
            self._restored64 = {}
        self._refresh()
        self._diverged_np()
        if failed is not None:
            self._unstable_np[failed] = True
            self.all_stable = False

    def _diverged_np(self) -> None:
        """[N] unstable on the host arrays: NaN/Inf or beyond MAX_STATE_VALUE in a row. One
        whole-array max decides the common case; rows are examined only when it fails."""
        a = np.abs(self._qq64_np, out=self._abs_np)
        self.all_stable = bool(a.max() <= MAX_STATE_VALUE)  # False for NaN: max keeps it
        if self.all_stable:
            self._unstable_np.fill(False)
        else:
            np.logical_not((a <= MAX_STATE_VALUE).all(axis=1), out=self._unstable_np)

    def _refresh(self) -> None:
        np.copyto(self._qq_np, self._qq64_np)
        np.copyto(self._sens_np, self._sens64_np)
        for f, t in self._data32.items():
            np.copyto(t.numpy(), self._data64[f])

    def _refresh_rows(self, ids: np.ndarray) -> None:
        """_refresh for a few envs: numpy row copies (cheaper than torch fancy indexing)."""
        self._qq_np[ids] = self._qq64_np[ids]
        self._sens_np[ids] = self._sens64_np[ids]
        for f, t in self._data32.items():
            t.numpy()[ids] = self._data64[f][ids]

    # ------------------------------------------------------------------ resets
    def reset(self, mask: Tensor, qpos: Tensor, qvel: Tensor) -> None:
        ids = np.flatnonzero(mask.numpy())  # cpu backend: host arrays are the state
        if ids.size == 0:
            return
        # model defaults (time 0, zero act, ctrl and warmstart), then the requested state;
        # numpy fancy indexing on the host arrays is several times cheaper than torch's
        self._b.state[ids] = self._fresh_row
        self._qpos_np[ids] = qpos.numpy()[ids]
        self._qvel_np[ids] = qvel.numpy()[ids]
        self._forward(ids)  # so sensors describe the reset state
        self._rne_post(ids)
        self._unstable_np[ids] = False
        if not self.all_stable:
            self.all_stable = not self._unstable_np.any()
        for f, saved in self._restored64.items():  # reset rows: the fresh forward's values
            saved[ids] = self._data64[f][ids]
        self._refresh_rows(ids)

    def _forward(self, ids: np.ndarray) -> None:
        """`Batch.forward(ids)` for ids that are sorted, unique and in range by construction
        (np.flatnonzero): the C call directly where the binding has it, because the Python
        wrapper re-validates ids with about eight numpy calls, which cost more than the
        forward of the few envs a step resets."""
        if self._c_forward is None:
            self._b.forward(ids)
            return
        ids32 = ids.astype(np.int32)
        nfail = self._c_forward(ids32, mujoco.mjtStage.mjSTAGE_ACC.value)
        if nfail:
            self._b._check(ids32, nfail)  # raises SimulationError, as forward() would

    def kick(self, mask: Tensor, dqvel: Tensor) -> None:
        ids = np.flatnonzero(mask.numpy())
        if ids.size:
            self._qvel_np[ids] += dqvel.numpy()[ids]
            self._refresh_rows(ids)

    # ------------------------------------------------------------------ randomization
    def set_params(self, field: str, mask: Tensor, values: Tensor) -> None:
        shape = check_field(self.model, field)
        if tuple(values.shape) != (self.num_envs, *shape):
            raise ValueError(f"values for {field} must have shape {(self.num_envs, *shape)}, "
                             f"got {tuple(values.shape)}")
        ids = np.flatnonzero(mask.numpy())
        if ids.size == 0:
            return
        table = self._b.expand(field)  # [N, *shape] float64, live
        table[ids] = values.detach().double().numpy()[ids]
        if field in _SETCONST_INPUTS:  # masses, inertial frames: derived constants follow
            self._b.set_const(ids)
        self._params32.pop(field, None)

    def params(self, field: str) -> Tensor:
        shape = check_field(self.model, field)
        if field not in self._params32:
            per_env = self._b.expanded(field)
            base = np.broadcast_to(getattr(self.model, field), (self.num_envs, *shape)) \
                if per_env is None else per_env
            self._params32[field] = torch.tensor(np.array(base), dtype=torch.float32)
        return self._params32[field]

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Tensor]:
        out = {"state": torch.from_numpy(self._b.state.copy()),
               "sensordata": self._sens64.clone()}
        out.update({f"data/{f}": t.clone() for f, t in self._data32.items()})
        out.update({f"data64/{f}": self.data(f, precise=True).clone()
                    for f in self._data64})
        for field in RANDOMIZABLE_FIELDS:  # only the fields some env has its own values of
            per_env = self._b.expanded(field)
            if per_env is not None:
                out[f"param/{field}"] = torch.from_numpy(np.array(per_env))
        return out

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        everyone = torch.ones(self.num_envs, dtype=torch.bool)
        for key, vals in state.items():
            if key.startswith("param/"):
                self.set_params(key.removeprefix("param/"), everyone, vals)
        self._b.state[...] = state["state"].numpy()
        self._b.forward()  # derived fields of the restored rows ...
        self._rne_post(np.arange(self.num_envs))
        self._qq.copy_(self._qq64)
        self.sensordata.copy_(state["sensordata"])  # ... but sensors as they were saved
        for f, t in self._data32.items():  # ... and tracked fields, where saved
            saved = state.get(f"data/{f}")
            t.copy_(_view(self._data64[f]) if saved is None else saved)
        self._restored64 = {f: state[f"data64/{f}"].numpy().copy() for f in self._data64
                            if f"data64/{f}" in state}
        self.unstable.zero_()
        self.all_stable = True
