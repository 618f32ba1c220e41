"""The jitted MJX programs of the mjx backend: stepping and resetting the whole batch
(`vmap` over envs of a `lax.scan` over substeps), with divergence and MuJoCo Warp's buffer
overflow flags computed on the device; and the model and template data they start from."""

from __future__ import annotations

import copy
import os
from functools import cache
from typing import ClassVar

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

from trot.sim.base import MAX_STATE_VALUE

WARP_GRAPH_ENV = "TROT_MJX_WARP_GRAPH"  # MJX-Warp CUDA-graph mode: WARP (default), WARP_STAGED, ...
COMMAND_BUFFER_ENV = "TROT_XLA_COMMAND_BUFFERS"  # "1": keep XLA's CUDA command buffers on

# XLA's command buffers (CUDA graphs of a program's kernels and copies) failed every MJX step
# program on the first H200 run (JAX 0.11.2, CUDA 13): "Failed to set memcpy D2D node
# params: CUDA_ERROR_INVALID_VALUE". They are turned off per program, never by XLA_FLAGS
# (process-wide); the CPU compiler does not know the option, so it is passed on GPUs only.
_NO_COMMAND_BUFFERS = (("xla_gpu_enable_command_buffer", ""),)


def compiler_options(platform: str, command_buffers: bool | None = None) -> tuple:
    """The XLA options trot's mjx programs compile with on a JAX device platform ("cpu",
    "gpu"), as a hashable tuple of (name, value). command_buffers: keep XLA's command
    buffers on a GPU (default: $TROT_XLA_COMMAND_BUFFERS == "1", else off)."""
    if command_buffers is None:
        command_buffers = os.environ.get(COMMAND_BUFFER_ENV, "") == "1"
    return _NO_COMMAND_BUFFERS if platform == "gpu" and not command_buffers else ()


def _jit(fn, options: tuple, **kw):
    """jax.jit with per-program XLA options (none: JAX's defaults)."""
    return jax.jit(fn, compiler_options=dict(options) or None, **kw)

# MuJoCo Warp's per-world overflow bitmask (mujoco_warp OverflowType): the bits that mean a
# fixed-size buffer was too small and contacts or constraints were dropped. (ITERATIONS and
# LS_ITERATIONS only say the solver hit its iteration limit.)
_NEFC, _NJMAX_NNZ, _BROADPHASE, _NARROWPHASE, _CCD = 1, 2, 4, 8, 16
_HFIELD, _CONTACT_MATCH, _NVMAX, _EPA_HORIZON, _TACTILE = 32, 64, 128, 256, 2048
BUFFER_OVERFLOW_BITS = (_NEFC | _NJMAX_NNZ | _BROADPHASE | _NARROWPHASE | _CCD | _HFIELD
                        | _CONTACT_MATCH | _NVMAX | _EPA_HORIZON | _TACTILE)


def _diverged(qpos: jax.Array, qvel: jax.Array) -> jax.Array:
    """[N] bool: any NaN/Inf or |value| > MAX_STATE_VALUE (as CpuSim._diverged_np, on device)."""
    x = jnp.concatenate([qpos, qvel], axis=1)
    return ~jnp.all(jnp.abs(x) <= MAX_STATE_VALUE, axis=1)


def _model_axes(m, fields: tuple[str, ...]):
    """vmap in_axes for the model: 0 on the per-env parameter tables, None elsewhere."""
    axes = jax.tree_util.tree_map(lambda _: None, m)
    return axes.tree_replace({f: 0 for f in fields}) if fields else axes


class _Structure:
    """A pytree structure as a static jit argument. Flattening an `mjx.Model` costs a few
    hundred microseconds per call (its numpy fields are hashed by content), so the programs
    take flat leaves plus this: hashed once, and interned so that equal structures (equal
    models, in any sim) are one object and compare by identity."""

    _interned: ClassVar[dict] = {}

    def __new__(cls, treedef):
        obj = cls._interned.get(treedef)
        if obj is None:
            obj = super().__new__(cls)
            obj.treedef, obj._hash = treedef, hash(treedef)
            cls._interned[treedef] = obj
        return obj

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, _Structure) and self.treedef == other.treedef)


def _flat(tree) -> tuple[_Structure, list]:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return _Structure(treedef), leaves


def _rne_post(m, d):
    from mujoco.mjx._src import smooth  # MJX exports no public name for it

    return smooth.rne_postconstraint(m, d)


def _with_params(m, fields: tuple[str, ...], params: tuple):
    """The model with its per-env parameter tables [N, ...] in place of those fields."""
    return m.tree_replace(dict(zip(fields, params))) if fields else m


@cache
def _programs(substeps: int, fields: tuple[str, ...], rne: bool = False,
              capacity: int | None = None, options: tuple = ()):
    """(step, reset) for one number of substeps and one set of batched model fields. Module
    level, so sims with equal model structure and N share compiled programs. Models and
    data travel as flat leaves with their structure as a static argument (see _Structure);
    the per-env parameter tables travel beside the model, as a tuple in `fields` order, so
    that updating one (torch, in MjxSim.set_params) never re-flattens the model.
    rne: complete cacc/cfrc_int/cfrc_ext after each step and reset (RNE_POST_FIELDS).
    capacity: reset at most this many envs by gathering them (kinematics and sensors of
    those rows only) and the whole batch only where more end in one step; None: forward
    the whole batch on every reset (MuJoCo Warp, whose data rows share buffers).
    options: XLA compiler options (`compiler_options`)."""

    def step_one(m, d, ctrl):
        d = d.replace(ctrl=ctrl)

        def substep(d, _):
            return mjx.step(m, d), None

        d, _ = jax.lax.scan(substep, d, None, length=substeps)
        return _rne_post(m, d) if rne else d

    def step(ms, ds, m_leaves, params, d_leaves, unstable, overflow_steps, ctrl):
        m = _with_params(ms.treedef.unflatten(m_leaves), fields, params)
        d = ds.treedef.unflatten(d_leaves)
        d = jax.vmap(step_one, in_axes=(_model_axes(m, fields), 0, 0))(m, d, ctrl)
        # sticky: a diverged env stays flagged until it is reset (as with MuJoCo C, whose
        # diverged state stays non-finite once auto-reset is off)
        unstable = unstable | _diverged(d.qpos, d.qvel)
        overflow = _overflow(d, unstable.shape[0])
        overflow_steps = overflow_steps + jnp.sum(overflow, dtype=jnp.int32)
        return jax.tree_util.tree_leaves(d), unstable, overflow, overflow_steps

    def reset(ms, ds, d0s, m_leaves, params, d_leaves, d0_leaves, unstable, mask, qpos, qvel):
        m = _with_params(ms.treedef.unflatten(m_leaves), fields, params)
        d, d0 = ds.treedef.unflatten(d_leaves), d0s.treedef.unflatten(d0_leaves)
        axes = _model_axes(m, fields)

        def fresh(m, q, v):  # the start state with its kinematics and sensors
            f = mjx.forward(m, d0.replace(qpos=q, qvel=v))
            return _rne_post(m, f) if rne else f

        def everyone(d):
            new = jax.vmap(fresh, in_axes=(axes, 0, 0))(m, qpos, qvel)
            return jax.vmap(lambda x, y, k: x.where(k, y))(d, new, mask)

        def gathered(d):
            n = mask.shape[0]
            rows = jnp.nonzero(mask, size=capacity, fill_value=n)[0]  # [K], n: no row
            safe = jnp.minimum(rows, n - 1)
            mk = _with_params(m, fields, tuple(p[safe] for p in params))
            new = jax.vmap(fresh, in_axes=(axes, 0, 0))(mk, qpos[safe], qvel[safe])
            return jax.tree_util.tree_map(lambda x, y: x.at[rows].set(y, mode="drop"), d, new)

        if capacity is None:
            d = everyone(d)
        else:  # one program; only the branch taken runs (no host sync to choose it)
            count = jnp.sum(mask, dtype=jnp.int32)
            branch = jnp.where(count == 0, 0, jnp.where(count <= capacity, 1, 2))
            d = jax.lax.switch(branch, (lambda d: d, gathered, everyone), d)
        return jax.tree_util.tree_leaves(d), unstable & ~mask, _overflow(d, mask.shape[0])

    return (_jit(step, options, static_argnums=(0, 1)),
            _jit(reset, options, static_argnums=(0, 1, 2)))


def _overflow(d, n: int) -> jax.Array:
    """[N] bool: MuJoCo Warp dropped contacts/constraints in the env since its reset (the
    flags are sticky until reset). MJX-JAX sizes its contact arrays statically: never."""
    flags = getattr(d._impl, "overflow", None)
    if flags is None:
        return jnp.zeros((n,), dtype=bool)
    return (flags.reshape(n, -1) & BUFFER_OVERFLOW_BITS).any(axis=1)


@cache
def _broadcaster(options: tuple = ()):
    """A program that makes an [N]-batched copy of the template data from [N, nq] qpos (vmap
    keeps MJX-Warp's shared buffers)."""
    return _jit(lambda d0, qpos: jax.vmap(lambda q: d0.replace(qpos=q))(qpos), options)


# ---------------------------------------------------------------------- placing the model
def _without_autoreset(model: mujoco.MjModel) -> mujoco.MjModel:
    """A copy without mjDSBL_AUTORESET. MJX never auto-resets a diverging env (divergence
    stays visible, as the cpu backend arranges with that flag). MuJoCo Warp rejects the
    flag, and the flags are part of the compiled programs' signature: a model shared with a
    CpuSim (which sets it) still maps to one program."""
    clean = copy.copy(model)
    clean.opt.disableflags &= ~int(mujoco.mjtDisableBit.mjDSBL_AUTORESET)
    return clean


def _put_model(model: mujoco.MjModel, jdev, impl: str, graph_mode: str | None):
    """The mjx.Model on `jdev`; on Warp, with the CUDA-graph mode named by `graph_mode`,
    else $TROT_MJX_WARP_GRAPH, else MJX's default."""
    graph = graph_mode or os.environ.get(WARP_GRAPH_ENV)
    kw = {}
    if impl == "warp" and graph:
        from mujoco.mjx.warp import types as mjxw_types

        try:
            kw = {"graph_mode": getattr(mjxw_types.GraphMode, graph.upper())}
        except AttributeError:
            raise ValueError(f"unknown Warp graph mode {graph!r}; accepted: " + ", ".join(
                m.name for m in mjxw_types.GraphMode)) from None
    return mjx.put_model(model, device=jdev, impl=impl, **kw)


def _template_data(model: mujoco.MjModel, jdev, impl: str, kw: dict):
    """One env's reset template: zero time, act, warmstart, ctrl and applied forces; mocap
    bodies at their model pose, as mj_resetData puts them."""
    d0 = mjx.make_data(model, device=jdev, impl=impl, **kw)
    if model.nmocap:
        ids = np.flatnonzero(model.body_mocapid >= 0)
        ids = ids[np.argsort(model.body_mocapid[ids])]
        put = lambda a: jax.device_put(a.astype(np.float32), jdev)
        d0 = d0.replace(mocap_pos=put(model.body_pos[ids]),
                        mocap_quat=put(model.body_quat[ids]))
    return d0


def _contact_sizes(model: mujoco.MjModel, impl: str, n: int, nconmax: int | None,
                   njmax: int | None) -> tuple[int | None, int | None, dict]:
    """(nconmax, njmax, make_data's keywords). Warp keeps every env's contacts in one shared
    buffer of naconmax = N * nconmax slots and njmax constraint rows per env; overflow drops
    contacts (see `MjxSim.overflow`). MJX-JAX sizes its contact arrays from the model."""
    if impl != "warp":
        return None, None, {}
    nconmax = int(nconmax or _model_size(model, "nconmax")
                  or _warp_default("_default_nconmax", model, 64))
    njmax = int(njmax or _model_size(model, "njmax")
                or _warp_default("_default_njmax", model, 128))
    return nconmax, njmax, {"naconmax": n * nconmax, "njmax": njmax}


def _model_size(model: mujoco.MjModel, name: str) -> int:
    return max(0, int(getattr(model, name, -1)))


def _warp_default(fn: str, model: mujoco.MjModel, fallback: int) -> int:
    """MuJoCo Warp's own per-world estimate (a private helper: fall back if it moved)."""
    try:
        from mujoco.mjx.third_party.mujoco_warp._src import io as mjw_io

        return int(getattr(mjw_io, fn)(model))
    except Exception:  # noqa: BLE001
        return fallback
