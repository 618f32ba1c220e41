"""The `mjx` backend: MuJoCo XLA stepping every env on the learner's device, shared with torch.

One jitted program steps the whole batch: `jax.vmap` over envs of a `jax.lax.scan` over
`substeps` calls of `mjx.step`. The state is an `mjx.Data` with a leading env axis, float32
(JAX's default). Its qpos / qvel / sensordata / time buffers reach torch through DLPack
without a copy, and controls, reset states and parameters reach JAX the same way.

Implementations (`impl`): "warp" (MuJoCo Warp kernels from XLA; NVIDIA GPUs) on a CUDA device
where warp-lang imports, else "jax" (pure-JAX physics, any XLA device); `impl=` or
TROT_MJX_IMPL overrides.

Per env step, two XLA executions: the step program and the reset program (on the JAX CPU
backend an empty host mask skips the reset). `kick` and `set_params` are torch ops on
DLPack views of the qvel leaf and the parameter tables, read by the next program.

Domain randomization: the fields of `RANDOMIZABLE_FIELDS` live in per-env tables [N, ...]
that replace the model's fields; `vmap` maps over exactly those (`in_axes=0`) and shares the
rest. The batched set is part of the program: by default every randomizable field is
batched from the start (one compilation; tables of N x a few floats per body/geom/actuator/
dof); `randomize=()` batches nothing until `set_params` first names a field, and each new
set compiles once (cached per set, across sims too).

Compilation: the first step and reset compile in the constructor (`compile_seconds`; vmap
keeps the program one size for any N), cached per process (JAX_COMPILATION_CACHE_DIR keeps
them across processes). The stream rule for shared buffers is in `trot.sim.jax_bridge`.

Tracked MjData fields (`fields=`, `data(name)`) are leaves shared like qpos; RNE_POST_FIELDS
(cfrc_ext, ...) come from MJX's rne_postconstraint in the same programs (jax impl; Warp
raises); under RK4, cacc and cfrc_int differ from MuJoCo C's (xpos and cfrc_ext agree).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import jax
import mujoco
import numpy as np
import torch
from torch import Tensor

from trot.sim import resolve_device
from trot.sim.base import (RANDOMIZABLE_FIELDS, RNE_POST_FIELDS, check_field, sensor_slices,
                           sensor_view)
from trot.sim.jax_bridge import (
    _TORCH_DTYPES,
    IMPL_ENV,
    IMPLS,
    jax_device,
    resolve_impl,
    to_jax,
    to_torch,
    warp_available,
)
from trot.sim.mjx_programs import (
    COMMAND_BUFFER_ENV,
    WARP_GRAPH_ENV,
    _broadcaster,
    _contact_sizes,
    _flat,
    _programs,
    _put_model,
    _template_data,
    _without_autoreset,
    compiler_options,
)

__all__ = ["COMMAND_BUFFER_ENV", "IMPLS", "IMPL_ENV", "WARP_GRAPH_ENV", "MjxSim", "jax_device",
           "resolve_impl", "to_jax", "to_torch", "warp_available"]

RESET_SHARE = 16
"""MJX-JAX resets up to N / RESET_SHARE envs per step by gathering them (their forward
only); a step that ends more forwards the whole batch, in the same program"""


# Data fields that define the state a step starts from (the rest is recomputed by forward);
# a checkpoint holds these, plus sensordata so that observations resume exactly.
_STATE_FIELDS = ("time", "qpos", "qvel", "act", "qacc_warmstart", "ctrl", "qfrc_applied",
                 "xfrc_applied", "mocap_pos", "mocap_quat", "eq_active", "userdata",
                 "plugin_state", "history", "sensordata")


# ---------------------------------------------------------------------- the backend
class MjxSim:
    """Batched MJX. See `trot.sim.base.BatchedSim` for the contract.

    Extra attributes: `impl` ("jax" or "warp"), `xla_options` (the XLA compiler options of
    its programs), `compile_seconds` (wall time of the first
    step + reset compilation; near 0 when this process already compiled them for an equal
    model and N), `compile_log` (the same per set of batched fields), `overflow` ([N] bool,
    Warp only: buffers overflowed since the env's reset) and `overflow_steps` (0-d int32
    tensor on device: env-steps that ended with an overflowed buffer, counted without a host
    sync).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        num_envs: int,
        substeps: int = 1,
        device: torch.device | str = "cpu",
        impl: str | None = None,
        randomize: Sequence[str] | None = None,
        nconmax: int | None = None,
        njmax: int | None = None,
        warp_graph_mode: str | None = None,
        fields: Sequence[str] = (),
        command_buffers: bool | None = None,
    ):
        """randomize: the model fields kept per env from the start (default: all of
        RANDOMIZABLE_FIELDS; see the module docstring). nconmax / njmax (Warp only): contact
        slots per env (naconmax = N * nconmax for the batch) and constraint rows per env;
        default: the model's <size nconmax/njmax> when set, else MuJoCo Warp's estimate.
        warp_graph_mode (Warp only; else $TROT_MJX_WARP_GRAPH, else MJX's default): how the
        Warp calls capture CUDA graphs, a name of `mujoco.mjx.warp.types.GraphMode`
        (WARP_STAGED avoids re-captures when XLA moves buffers between calls). fields: MjData
        fields to track for `data(name)` (see `BatchedSim.data`). command_buffers (CUDA
        only; else $TROT_XLA_COMMAND_BUFFERS == "1", else off): compile the programs with
        XLA's command buffers (see `mjx_programs.compiler_options`)."""
        if num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs}")
        if substeps <= 0:
            raise ValueError(f"substeps must be a positive integer, got {substeps}")
        self.model = model
        self.num_envs = n = num_envs
        self.substeps = substeps
        self.device = resolve_device(device)  # 'cuda' -> 'cuda:K', as the tensors say
        self.impl = resolve_impl(self.device, impl)
        self._jdev = jax_device(self.device)
        self.xla_options = compiler_options(self._jdev.platform, command_buffers)
        self._sensors = sensor_slices(model)

        self.nconmax, self.njmax, kw = _contact_sizes(model, self.impl, n, nconmax, njmax)
        clean = _without_autoreset(model)
        self._mx = _put_model(clean, self._jdev, self.impl, warp_graph_mode)
        d0 = _template_data(clean, self._jdev, self.impl, kw)
        self._d0s, self._d0_leaves = _flat(d0)

        # per-env parameter tables [N, *shape] float32 for the batched model fields
        batched = RANDOMIZABLE_FIELDS if randomize is None else tuple(randomize)
        for f in batched:
            check_field(model, f)
        self._params: dict[str, jax.Array] = {f: self._base_table(f) for f in sorted(batched)}
        # the model's leaves, flattened once: its per-env tables travel beside it
        self._ms, self._m_leaves = _flat(self._mx)
        # kept referenced until a program's output is imported (jax_bridge's lifetime rule)
        self._handed: dict[str, Tensor] = {}
        # reset by gathering at most this many envs (MJX-JAX); Warp forwards the batch
        self.reset_capacity = max(1, n // RESET_SHARE) if self.impl == "jax" else None

        # state: the batched mjx.Data as flat leaves (see _Structure)
        qpos0 = jax.device_put(np.tile(model.qpos0.astype(np.float32), (n, 1)), self._jdev)
        self._ds, self._d_leaves = _flat(_broadcaster(self.xla_options)(d0, qpos0))
        paths = jax.tree_util.tree_flatten_with_path(self._data())[0]
        self._idx = {_attr_name(p): i for i, (p, _) in enumerate(paths)}
        self._track(fields)
        self.all_stable = None  # knowing would need a device sync
        self._unstable = jax.device_put(np.zeros(n, dtype=bool), self._jdev)
        self._overflow = self._unstable
        self._overflow_steps = jax.device_put(np.zeros((), dtype=np.int32), self._jdev)
        self.compile_seconds = 0.0
        self.compile_log: dict[tuple[str, ...], float] = {}  # per set of batched fields
        self._compiled: set[tuple[str, ...]] = set()
        self._warm_up()
        everyone = torch.ones(n, dtype=torch.bool, device=self.device)
        qpos = torch.as_tensor(np.tile(model.qpos0, (n, 1)), dtype=torch.float32)
        self.reset(everyone, qpos.to(self.device), torch.zeros(n, model.nv, device=self.device))

    def _track(self, fields: Sequence[str]) -> None:
        """Map each tracked MjData field to its leaf ('xpos', '_impl.cfrc_ext', ...)."""
        self.fields = tuple(dict.fromkeys(fields))
        self._field_leaf = {}
        for f in self.fields:
            leaf = next((k for k in (f, f"_impl.{f}") if k in self._idx), None)
            if leaf is None or f in ("qpos", "qvel", "sensordata"):
                raise ValueError(f"cannot track MjData field {f!r}; accepted: MJX data fields "
                                 "other than qpos, qvel and sensordata (read those directly)")
            self._field_leaf[f] = leaf
        self._rne = any(f in RNE_POST_FIELDS for f in self.fields)
        if self._rne and self.impl != "jax":
            raise ValueError(f"tracking {[f for f in self.fields if f in RNE_POST_FIELDS]} "
                             "needs MJX's rne_postconstraint, which trot runs on impl='jax' "
                             "only; use impl='jax' or the cpu backend")

    # ------------------------------------------------------------------ properties
    @property
    def control_dt(self) -> float:
        return float(self.model.opt.timestep) * self.substeps

    @property
    def time(self) -> Tensor:
        """[N] float32 simulated time since each env's last reset."""
        return to_torch(self._leaf("time"))

    @property
    def overflow_steps(self) -> Tensor:
        return to_torch(self._overflow_steps)

    @property
    def randomized_fields(self) -> tuple[str, ...]:
        """The model fields batched per env in the compiled programs."""
        return tuple(self._params)

    def sensor(self, name: str) -> Tensor:
        return sensor_view(self, self._sensors, name)

    def data(self, name: str, precise: bool = False) -> Tensor:
        try:  # float32 either way: JAX runs without x64
            return self._data_views[name]
        except KeyError:
            raise KeyError(f"MjData field {name!r} is not tracked; this sim tracks "
                           f"{list(self.fields)} (Task.data_fields)") from None

    def _leaf(self, name: str) -> jax.Array:
        return self._d_leaves[self._idx[name]]

    def _data(self):
        """The batched mjx.Data (rebuilt from the flat leaves)."""
        return self._ds.treedef.unflatten(self._d_leaves)

    # ------------------------------------------------------------------ programs
    def _fns(self):
        return _programs(self.substeps, tuple(self._params), self._rne, self.reset_capacity,
                         self.xla_options)

    def _tables(self) -> tuple[jax.Array, ...]:
        return tuple(self._params.values())

    def _warm_up(self) -> None:
        """Compile step and reset for the current set of batched fields (once per set). On
        the jax impl the two compile in parallel threads (XLA compiles without the GIL);
        Warp's first calls load its kernels, which is left to one thread at a time."""
        key = tuple(self._params)
        if key in self._compiled:
            return
        step, reset = self._fns()
        n, nu = self.num_envs, self.model.nu
        mask = jax.device_put(np.zeros(n, dtype=bool), self._jdev)
        ctrl = jax.device_put(np.zeros((n, nu), dtype=np.float32), self._jdev)
        # results are discarded: JAX programs do not mutate their inputs
        jobs = [lambda: reset(self._ms, self._ds, self._d0s, self._m_leaves, self._tables(),
                              self._d_leaves, self._d0_leaves, self._unstable, mask,
                              self._leaf("qpos"), self._leaf("qvel")),
                lambda: step(self._ms, self._ds, self._m_leaves, self._tables(),
                             self._d_leaves, self._unstable, self._overflow_steps, ctrl)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(jobs) if self.impl == "jax" else 1) as pool:
            for out in [pool.submit(job) for job in jobs]:
                jax.block_until_ready(out.result())
        seconds = time.perf_counter() - t0
        if not self._compiled:
            self.compile_seconds = seconds
        self.compile_log[key] = seconds
        self._compiled.add(key)

    # ------------------------------------------------------------------ stepping
    def step(self, ctrl: Tensor) -> None:
        if tuple(ctrl.shape) != (self.num_envs, self.model.nu):
            raise ValueError(f"ctrl must have shape {(self.num_envs, self.model.nu)}, "
                             f"got {tuple(ctrl.shape)}")
        ctrl_t = ctrl.to(self.device, torch.float32).contiguous()
        step, _ = self._fns()
        self._d_leaves, self._unstable, self._overflow, self._overflow_steps = step(
            self._ms, self._ds, self._m_leaves, self._tables(), self._d_leaves,
            self._unstable, self._overflow_steps, to_jax(ctrl_t))
        self._refresh()
        # released only now: torch's stream is ordered after the step (see top)
        del ctrl_t
        self._handed.pop("qvel", None)

    def _refresh(self) -> None:
        self.qpos = to_torch(self._leaf("qpos"))
        self.qvel = to_torch(self._leaf("qvel"))
        self.sensordata = to_torch(self._leaf("sensordata"))
        self.unstable = to_torch(self._unstable)
        self.overflow = to_torch(self._overflow)
        self._data_views = {f: to_torch(self._leaf(k)) for f, k in self._field_leaf.items()}

    # ------------------------------------------------------------------ resets
    def reset(self, mask: Tensor, qpos: Tensor, qvel: Tensor) -> None:
        n, m = self.num_envs, self.model
        if tuple(mask.shape) != (n,):
            raise ValueError(f"mask must have shape {(n,)}, got {tuple(mask.shape)}")
        if tuple(qpos.shape) != (n, m.nq) or tuple(qvel.shape) != (n, m.nv):
            raise ValueError(f"qpos/qvel must have shapes {(n, m.nq)}/{(n, m.nv)}, got "
                             f"{tuple(qpos.shape)}/{tuple(qvel.shape)}")
        if _known_empty(mask):  # as the cpu backend does: no program for nothing to reset
            return
        inputs = (mask.to(self.device, torch.bool).contiguous(),
                  qpos.to(self.device, torch.float32).contiguous(),
                  qvel.to(self.device, torch.float32).contiguous())
        _, reset = self._fns()
        self._d_leaves, self._unstable, self._overflow = reset(
            self._ms, self._ds, self._d0s, self._m_leaves, self._tables(), self._d_leaves,
            self._d0_leaves, self._unstable, *(to_jax(t) for t in inputs))
        self._refresh()
        del inputs  # see step()
        self._handed.pop("qvel", None)

    def kick(self, mask: Tensor, dqvel: Tensor) -> None:
        """qvel += dqvel where mask, in torch: no program of its own (the next step or reset
        reads the kicked qvel)."""
        mask = mask.to(self.device, torch.bool)
        kicked = torch.where(mask[:, None], dqvel.to(self.device, torch.float32), 0.0)
        kicked = kicked.add_(self.qvel).contiguous()  # [N, nv]
        self._handed["qvel"] = kicked
        leaves = list(self._d_leaves)
        leaves[self._idx["qvel"]] = to_jax(kicked)
        self._d_leaves = type(self._d_leaves)(leaves)
        self.qvel = kicked

    # ------------------------------------------------------------------ randomization
    def _base_values(self, field: str) -> np.ndarray:
        """[N, *shape] float32: the model's value of a field in every env."""
        shape = check_field(self.model, field)
        base = np.asarray(getattr(self.model, field), dtype=np.float32).reshape(shape)
        return np.ascontiguousarray(np.broadcast_to(base, (self.num_envs, *shape)))

    def _base_table(self, field: str) -> jax.Array:
        return jax.device_put(self._base_values(field), self._jdev)

    def set_params(self, field: str, mask: Tensor, values: Tensor) -> None:
        shape = check_field(self.model, field)
        if tuple(values.shape) != (self.num_envs, *shape):
            raise ValueError(
                f"values for {field} must have shape {(self.num_envs, *shape)}, "
                f"got {tuple(values.shape)}"
            )
        if tuple(mask.shape) != (self.num_envs,):
            raise ValueError(f"mask must have shape {(self.num_envs,)}, got {tuple(mask.shape)}")
        new_field = field not in self._params
        if not new_field and _known_empty(mask):
            return
        table = to_torch(self._base_table(field) if new_field else self._params[field])
        rows = mask.to(self.device, torch.bool).reshape(-1, *([1] * len(shape)))
        # in torch, on its stream: no program of its own, no model re-flatten; the programs
        # read the table through DLPack
        new = torch.where(rows, values.to(self.device, torch.float32), table).contiguous()
        self._handed[f"param/{field}"] = new
        self._params[field] = to_jax(new)
        if new_field:  # a new set of batched fields: one new program (cached per set)
            self._params = dict(sorted(self._params.items()))
            self._warm_up()

    def params(self, field: str) -> Tensor:
        """A copy: [N, *shape] float32 on the sim's device."""
        check_field(self.model, field)
        table = self._params.get(field)
        if table is None:  # not batched: the model's value, made by torch alone
            return torch.from_numpy(self._base_values(field)).to(self.device)
        return to_torch(table).clone()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Tensor]:
        out = {k: to_torch(self._leaf(k)).clone() for k in _STATE_FIELDS if k in self._idx}
        out.update({f"data/{f}": to_torch(self._leaf(k)).clone()
                    for f, k in self._field_leaf.items()})
        out.update({f"param/{k}": to_torch(v).clone() for k, v in self._params.items()})
        return out

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        for key, vals in state.items():
            if key.startswith("param/"):
                self.set_params(key.removeprefix("param/"), everyone, vals)
        leaves = list(self._d_leaves)
        keys = {k: k for k in _STATE_FIELDS}
        keys.update({f"data/{f}": k for f, k in self._field_leaf.items()})
        for key, k in keys.items():
            if key not in state or k not in self._idx:
                continue
            cur = leaves[self._idx[k]]
            if tuple(state[key].shape) != tuple(cur.shape):
                raise ValueError(f"state {key!r} has shape {tuple(state[key].shape)}, this sim "
                                 f"needs {tuple(cur.shape)}")
            if cur.size:  # a private copy: JAX keeps using this memory after we return
                t = state[key].to(self.device, _TORCH_DTYPES[np.dtype(cur.dtype)], copy=True)
                leaves[self._idx[k]] = to_jax(t)
        self._d_leaves = leaves
        self._unstable = jax.device_put(np.zeros(self.num_envs, dtype=bool), self._jdev)
        self._overflow = self._unstable
        self._refresh()


def _known_empty(mask: Tensor) -> bool:
    """The mask selects no env, where reading it costs no device sync: a host tensor (the
    JAX CPU backend), whose value torch has already computed. On a GPU the programs run
    with an empty mask instead (one launch, no sync)."""
    return mask.device.type == "cpu" and not bool(mask.any())


def _attr_name(path) -> str:
    """'qpos', '_impl.overflow', ... from a pytree key path of an mjx.Data."""
    return ".".join(str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", k))))
                    for k in path)

