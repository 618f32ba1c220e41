"""Batched physics: one contract (`BatchedSim`), one registry of backends."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import mujoco
import torch

from trot.sim.base import RANDOMIZABLE_FIELDS, BatchedSim, SensorSlice, sensor_slices

# name -> "module:Class"; imported on use so that the cpu path never imports JAX.
BACKENDS: dict[str, str] = {
    "cpu": "trot.sim.cpu:CpuSim",
    "mjx": "trot.sim.mjx:MjxSim",
}


def resolve_device(device: str | torch.device) -> torch.device:
    """Parse a device string with a clear error, and check that it exists here. 'cuda'
    becomes 'cuda:K' (the current device): torch.device('cuda') compares unequal to every
    CUDA tensor's device, which always carries its index."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"unknown device {device!r}; accepted: 'cpu', 'cuda', 'cuda:K'") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but torch sees no CUDA GPU; use 'cpu'")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {device!r}; accepted: 'cpu', 'cuda', 'cuda:K'")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def make_sim(backend: str, model: mujoco.MjModel, num_envs: int, substeps: int,
             device: str | torch.device = "cpu", fields: Sequence[str] = ()) -> BatchedSim:
    """fields: MjData fields the sim tracks for `BatchedSim.data` (Task.data_fields)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sim backend {backend!r}; accepted: {', '.join(BACKENDS)}")
    dev = resolve_device(device)
    module, cls = BACKENDS[backend].split(":")
    kw = {"fields": tuple(fields)} if fields else {}
    if backend == "cpu":
        if dev.type != "cpu":
            raise ValueError(f"the cpu backend keeps its state on 'cpu', not {device!r}; "
                             "use sim='mjx' to simulate on a GPU, or make_env(sim='cpu', "
                             "device='cuda') for MuJoCo C feeding a GPU learner (Sebulba)")
        return getattr(importlib.import_module(module), cls)(model, num_envs, substeps, **kw)
    sim_cls = getattr(importlib.import_module(module), cls)
    return sim_cls(model, num_envs, substeps, device=dev, **kw)


__all__ = ["BACKENDS", "BatchedSim", "RANDOMIZABLE_FIELDS", "SensorSlice", "make_sim",
           "resolve_device", "sensor_slices"]
