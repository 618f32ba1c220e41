"""A block of rows of a batched sim, seen as a sim of its own.

K seeds trained in one process (agents/seeds.py) share one sim of K x N envs: the physics
is one call for all of them, while each seed's `Env` and task read and reset only its own N
rows, with its own random streams. `SimRows` is that view: tensors are row slices of the
parent's (taken at each read, since the mjx backend rebinds its tensors after a step),
and resets, pushes and randomization reach the parent through full-size masks.
"""

from __future__ import annotations

import mujoco
import torch
from torch import Tensor

from trot.sim.base import BatchedSim


class SimRows:
    """Rows [lo, hi) of `parent`; see `trot.sim.base.BatchedSim`. Not stepped on its own:
    whoever owns the parent steps every block at once."""

    def __init__(self, parent: BatchedSim, lo: int, hi: int):
        if not 0 <= lo < hi <= parent.num_envs:
            raise ValueError(f"rows [{lo}, {hi}) are not within the parent's "
                             f"{parent.num_envs} envs")
        self.parent, self.rows = parent, slice(lo, hi)
        self.model: mujoco.MjModel = parent.model
        self.num_envs, self.substeps, self.device = hi - lo, parent.substeps, parent.device
        n, dev = parent.num_envs, parent.device
        # full-size scratch for the parent's masked calls: rows outside ours stay unset
        self._mask = torch.zeros(n, dtype=torch.bool, device=dev)
        self._qpos = torch.zeros(n, self.model.nq, device=dev)
        self._qvel = torch.zeros(n, self.model.nv, device=dev)
        self._values: dict[str, Tensor] = {}  # set_params's, per field
        self.pending: dict[str, Tensor] | None = None  # a checkpoint's state (load_blocks)

    @property
    def control_dt(self) -> float:
        return self.parent.control_dt

    @property
    def qpos(self) -> Tensor:
        return self.parent.qpos[self.rows]

    @property
    def qvel(self) -> Tensor:
        return self.parent.qvel[self.rows]

    @property
    def sensordata(self) -> Tensor:
        return self.parent.sensordata[self.rows]

    @property
    def unstable(self) -> Tensor:
        return self.parent.unstable[self.rows]

    @property
    def all_stable(self) -> bool | None:
        """True where the parent knows every env is stable; otherwise unknown for ours."""
        return True if self.parent.all_stable is True else None

    @property
    def time(self) -> Tensor:
        return self.parent.time[self.rows]

    def sensor(self, name: str) -> Tensor:
        return self.parent.sensor(name)[self.rows]

    def data(self, name: str, precise: bool = False) -> Tensor:
        return self.parent.data(name, precise)[self.rows]

    def params(self, field: str) -> Tensor:
        return self.parent.params(field)[self.rows]

    def step(self, ctrl: Tensor) -> None:
        raise RuntimeError("a block of rows is stepped with its parent sim, every block at "
                           "once (agents/seeds.py)")

    def _full(self, mask: Tensor) -> Tensor:
        self._mask[self.rows] = mask
        return self._mask

    def reset(self, mask: Tensor, qpos: Tensor, qvel: Tensor) -> None:
        self._qpos[self.rows], self._qvel[self.rows] = qpos, qvel
        self.parent.reset(self._full(mask), self._qpos, self._qvel)

    def kick(self, mask: Tensor, dqvel: Tensor) -> None:
        self._qvel[self.rows] = dqvel
        self.parent.kick(self._full(mask), self._qvel)

    def set_params(self, field: str, mask: Tensor, values: Tensor) -> None:
        if field not in self._values:  # [K * N, *shape]: the parent reads only our rows
            self._values[field] = torch.zeros(self.parent.num_envs, *values.shape[1:],
                                              dtype=values.dtype, device=self.device)
        full = self._values[field]
        full[self.rows] = values
        self.parent.set_params(field, self._full(mask), full)

    def state_dict(self) -> dict[str, Tensor]:
        """Our rows of every per-env tensor of the parent's state (copies)."""
        return {k: v[self.rows].clone() for k, v in self.parent.state_dict().items()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Held until the parent is restored from every block at once (`load_blocks`)."""
        self.pending = state


def load_blocks(parent: BatchedSim, blocks: list[SimRows]) -> None:
    """Restore `parent` from the states its blocks of rows were given (`load_state_dict`),
    which must cover its rows in order."""
    rows = [(b.rows.start, b.rows.stop) for b in blocks]
    if rows[0][0] != 0 or rows[-1][1] != parent.num_envs or any(
            a[1] != b[0] for a, b in zip(rows, rows[1:])):
        raise ValueError(f"blocks of rows {rows} do not cover the sim's {parent.num_envs} "
                         "envs in order")
    states = [getattr(b, "pending", None) for b in blocks]
    if any(s is None for s in states):
        raise ValueError("every block needs its state (SimRows.load_state_dict) first")
    keys = set(states[0])
    if any(set(s) != keys for s in states):
        raise ValueError("the blocks' sim states hold different fields: "
                         f"{[sorted(s) for s in states]}")
    parent.load_state_dict({k: torch.cat([s[k] for s in states]) for k in states[0]})
    for b in blocks:
        b.pending = None
