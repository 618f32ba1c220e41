"""torch <-> JAX on one device: device mapping, zero-copy DLPack transfers, the MJX
implementation choice.

Torch and JAX on one CUDA device (the stream rule the mjx backend relies on):
  * torch -> JAX: `jax.dlpack.from_dlpack(t)` passes JAX's stream to `t.__dlpack__`, and torch
    then makes that stream wait on an event recorded on torch's *current* stream. So a tensor
    written on torch's current stream may be handed over at once: no
    `torch.cuda.synchronize()`. A tensor written on another torch stream must first be
    ordered onto the current one (`torch.cuda.current_stream().wait_stream(side)`).
  * JAX -> torch: `torch.from_dlpack(a)` passes torch's current stream to `a.__dlpack__`, and
    JAX makes that stream wait until `a` is computed. No `block_until_ready()` is needed;
    torch kernels reading the view are queued behind the JAX program that writes it.
  * Lifetimes: JAX may read a torch tensor asynchronously, so every tensor handed to JAX is
    kept referenced until torch has imported an output of the program that read it (which
    orders torch's stream after that program); torch can then recycle the memory safely.
    Conversely, every JAX launch here is preceded, in the same call, by a torch -> JAX import,
    which orders it after all torch work queued so far, including reads of views of buffers
    that JAX may now recycle.
  * The torch views of JAX buffers (qpos, qvel, sensordata, time, unstable) are read-only:
    JAX arrays are immutable and the next step reads them. Clone before writing.
  * The attributes are rebound to new views by every step/reset (not updated in place): read
    `sim.qpos` when needed rather than keeping the tensor from an earlier step.

On a GPU, JAX would by default grab 75% of the device's memory at start-up, leaving torch
short; building an mjx sim (`jax_device`, before JAX's first device query starts its
backends) sets XLA_PYTHON_CLIENT_PREALLOCATE=false unless the user has set it, so JAX
allocates as it goes, next to torch's allocator. Importing this module sets nothing.
"""

from __future__ import annotations

import os

import jax
import numpy as np
import torch
from torch import Tensor

IMPLS = ("jax", "warp")
IMPL_ENV = "TROT_MJX_IMPL"


def warp_available() -> bool:
    """warp-lang and MJX's Warp bridge import."""
    try:
        from mujoco.mjx import warp as mjxw
    except Exception:  # noqa: BLE001 (a broken warp install raises all sorts)
        return False
    return bool(getattr(mjxw, "WARP_INSTALLED", False))


def resolve_impl(device: torch.device, impl: str | None = None) -> str:
    """The argument, else $TROT_MJX_IMPL, else "warp" on CUDA with warp installed, else "jax"."""
    choice = impl or os.environ.get(IMPL_ENV) or None
    if choice is None:
        return "warp" if device.type == "cuda" and warp_available() else "jax"
    choice = choice.lower()
    if choice not in IMPLS:
        src = "impl" if impl else f"${IMPL_ENV}"
        raise ValueError(f"unknown MJX implementation {choice!r} ({src}); accepted: "
                         f"{', '.join(IMPLS)}")
    if choice == "warp" and not warp_available():
        raise ValueError("impl 'warp' needs warp-lang (pip install 'trot[mjx]'); "
                         "use impl='jax'")
    return choice


def jax_device(device: torch.device) -> jax.Device:
    """The JAX device that is the same memory as a torch device. Called where an mjx sim is
    built: JAX reads its allocator setting when this first query starts its backends."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the user's wins
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type != "cuda":
        raise ValueError(f"the mjx backend runs on 'cpu' or 'cuda', not {str(device)!r}")
    try:
        gpus = jax.devices("cuda")
    except RuntimeError:
        gpus = []
    if not gpus:
        raise ValueError(f"device {str(device)!r} requested but JAX sees no CUDA GPU: install "
                         "a CUDA build of JAX (pip install 'jax[cuda12]') or use device 'cpu'")
    index = torch.cuda.current_device() if device.index is None else device.index
    for d in gpus:
        if getattr(d, "local_hardware_id", d.id) == index:
            return d
    raise ValueError(f"JAX sees no CUDA device with index {index} "
                     f"(it sees {[str(d) for d in gpus]})")


# ---------------------------------------------------------------------- torch <-> JAX
# Empty buffers never cross DLPack: some producers reject them, and a zero-length copy is
# one that CUDA refuses to put in a command buffer. Each side makes its own empty array.
def to_jax(t: Tensor) -> jax.Array:
    """Zero-copy torch -> JAX (see the stream rule in the module docstring)."""
    if t.numel() == 0:
        return jax.device_put(np.zeros(t.shape, dtype=_NUMPY_DTYPES[t.dtype]),
                              jax_device(t.device))
    return jax.dlpack.from_dlpack(t.detach().contiguous())


def to_torch(a: jax.Array) -> Tensor:
    """Zero-copy JAX -> torch view (read-only by convention)."""
    if a.size == 0:
        dev = next(iter(a.devices()))
        where = "cpu" if dev.platform == "cpu" else f"cuda:{dev.local_hardware_id}"
        return torch.zeros(a.shape, dtype=_TORCH_DTYPES[np.dtype(a.dtype)], device=where)
    return torch.from_dlpack(a)


_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.int32): torch.int32,
                 np.dtype(np.bool_): torch.bool, np.dtype(np.uint8): torch.uint8,
                 np.dtype(np.float64): torch.float64, np.dtype(np.int64): torch.int64}
_NUMPY_DTYPES = {t: d for d, t in _TORCH_DTYPES.items()}
