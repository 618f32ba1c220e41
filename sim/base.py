"""The batched-physics contract every backend honours, and the pieces backends share."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import mujoco
import numpy as np
import torch
from torch import Tensor

# Model fields a task may randomize per env (domain randomization). Both backends accept
# exactly these; values always have the full field shape per env: [len, *field.shape].
RANDOMIZABLE_FIELDS = (
    "geom_friction",
    "body_mass",
    "body_ipos",
    "actuator_gainprm",
    "actuator_biasprm",
    "dof_damping",
)


def available_cpus() -> int:
    """The cores this process may run on: its CPU affinity where the OS has one (a
    distributed rank's share, `pin_cpus`; a taskset or a container's cpuset), else every
    core. Thread pools are sized from this, never from os.cpu_count()."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


# MjData fields MuJoCo computes only on demand, in mj_rnePostConstraint (accelerations and
# the external/internal forces on bodies, contact forces included). A sim tracking one of
# them (`fields=`) runs it after every step and reset, on the data as mj_step left it: what
# Gymnasium's MujocoEnv does after each step.
RNE_POST_FIELDS = ("cacc", "cfrc_int", "cfrc_ext")


@dataclass(frozen=True)
class SensorSlice:
    """Where one named MJCF sensor lives in `sensordata`."""

    name: str
    start: int
    size: int


def sensor_slices(model: mujoco.MjModel) -> dict[str, SensorSlice]:
    """Map each named sensor to its [start, start+size) range in sensordata."""
    out = {}
    for i in range(model.nsensor):
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, i)
        if name:
            out[name] = SensorSlice(name, int(model.sensor_adr[i]), int(model.sensor_dim[i]))
    return out


@runtime_checkable
class BatchedSim(Protocol):
    """N copies of one MuJoCo model stepped together on one device.

    Every tensor attribute is refreshed by `step` and `reset` and lives on `device`. Treat
    them as read-only and read them from the sim after each call rather than keeping them:
    the mjx backend rebinds them to zero-copy views of new JAX buffers (cpu updates in place).
    Sensors are what MuJoCo's `mj_step` leaves in `sensordata`: evaluated by the forward
    pass at the start of the last physics substep (exactly as on a plain MjData).
    """

    model: mujoco.MjModel
    num_envs: int
    substeps: int
    device: torch.device
    qpos: Tensor  # [N, nq] float32
    qvel: Tensor  # [N, nv] float32
    sensordata: Tensor  # [N, nsensordata] float32
    unstable: Tensor  # [N] bool: diverged (NaN/Inf or beyond MAX_STATE_VALUE) until reset
    all_stable: bool | None
    """True when no env is unstable, where the host knows that for free (cpu); None where
    knowing would need a device sync (the env loop then takes its general path)"""

    @property
    def control_dt(self) -> float: ...

    def step(self, ctrl: Tensor) -> None:
        """Apply ctrl [N, nu] for `substeps` physics steps in every env."""

    def sensor(self, name: str) -> Tensor:
        """[N, dim] view of the named sensor."""

    def data(self, name: str, precise: bool = False) -> Tensor:
        """[N, *shape] float32 (precise: the backend's own precision, float64 on the cpu
        backend as a read-only zero-copy view; mjx state is float32 either way): an MjData field the sim was built to track (`fields=` of
        the backend, from `Task.data_fields`), as a plain MjData holds it after mj_step:
        derived fields come from the last evaluation of the last substep (RK4: its last
        stage), and RNE_POST_FIELDS are then completed by mj_rnePostConstraint. After a reset,
        the reset state's. Privileged simulator state: no robot measures it."""

    def reset(self, mask: Tensor, qpos: Tensor, qvel: Tensor) -> None:
        """Envs where mask [N] is set get qpos [N, nq] / qvel [N, nv] (rows elsewhere are
        ignored), zero time, act and warmstart, then forward kinematics; others untouched."""

    def kick(self, mask: Tensor, dqvel: Tensor) -> None:
        """Add dqvel [N, nv] to the velocity of envs where mask [N] is set (pushes); the rest
        of their state, solver warmstart included, is untouched."""

    def set_params(self, field: str, mask: Tensor, values: Tensor) -> None:
        """Per-env model parameters: rows of values [N, *field.shape] where mask is set."""

    def params(self, field: str) -> Tensor:
        """Current per-env values of a model field, [N, *field.shape] float32."""

    def state_dict(self) -> dict[str, Tensor]: ...

    def load_state_dict(self, state: dict[str, Tensor]) -> None: ...


# MuJoCo's own bound on a sane qpos/qvel value (mjMAXVAL); beyond it a state has diverged.
MAX_STATE_VALUE = 1e10


def check_field(model: mujoco.MjModel, field: str) -> tuple[int, ...]:
    """Validate a randomizable field name; return its per-env shape."""
    if field not in RANDOMIZABLE_FIELDS:
        raise ValueError(
            f"cannot randomize model field {field!r}; accepted: {', '.join(RANDOMIZABLE_FIELDS)}"
        )
    return tuple(np.asarray(getattr(model, field)).shape)


def sensor_view(sim: BatchedSim, slices: dict[str, SensorSlice], name: str) -> Tensor:
    try:
        s = slices[name]
    except KeyError:
        raise KeyError(
            f"no sensor named {name!r} in the model; available: {', '.join(slices) or 'none'}"
        ) from None
    return sim.sensordata[:, s.start : s.start + s.size]
