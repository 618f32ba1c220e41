"""The jitted MJX programs of the mjx backend: stepping and resetting the whole batch
(`vmap` over envs of a `lax.scan` over substeps), with divergence and MuJoCo Warp's buffer
overflow flags computed on the device."""

from __future__ import annotations

from functools import cache
from typing import ClassVar

import jax
import jax.numpy as jnp
from mujoco import mjx

from trot.sim.base import MAX_STATE_VALUE

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
              capacity: int | None = None):
    """(step, reset) for one number of substeps and one set of batched model fields. Module
    level, so sims with equal model structure and N share compiled programs. Models and
    data travel as flat leaves with their structure as a static argument (see _Structure);
    the per-env parameter tables travel beside the model, as a tuple in `fields` order, so
    that updating one (torch, in MjxSim.set_params) never re-flattens the model.
    rne: complete cacc/cfrc_int/cfrc_ext after each step and reset (RNE_POST_FIELDS).
    capacity: reset at most this many envs by gathering them (kinematics and sensors of
    those rows only) and the whole batch only where more end in one step; None: forward
    the whole batch on every reset (MuJoCo Warp, whose data rows share buffers)."""

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

    return jax.jit(step, static_argnums=(0, 1)), jax.jit(reset, static_argnums=(0, 1, 2))


def _overflow(d, n: int) -> jax.Array:
    """[N] bool: MuJoCo Warp dropped contacts/constraints in the env since its reset (the
    flags are sticky until reset). MJX-JAX sizes its contact arrays statically: never."""
    flags = getattr(d._impl, "overflow", None)
    if flags is None:
        return jnp.zeros((n,), dtype=bool)
    return (flags.reshape(n, -1) & BUFFER_OVERFLOW_BITS).any(axis=1)


@jax.jit
def _broadcast_data(d0, qpos):
    """An [N]-batched copy of the template data (vmap keeps MJX-Warp's shared buffers)."""
    return jax.vmap(lambda q: d0.replace(qpos=q))(qpos)
