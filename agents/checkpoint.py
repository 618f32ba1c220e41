"""Checkpoints: one format for every way of training, safe to load, written atomically
(trot/core/files.py).

A checkpoint is a `Checkpoint`: the format number, which learner wrote it (its `kind`), the
run's config, the counters (iteration, env steps, training seconds) and the learner's own
`state_dict()`. Every mode resumes through it (agents/loop.py); eval, export, play and
sim2sim read the policy from `state["model"]`. A file of another format is refused, named.

Checkpoints hold only tensors and plain containers (dicts, lists, tuples, numbers, strings,
None) and load with `torch.load(weights_only=True)`: loading one runs no code from the file,
so a checkpoint from elsewhere is as safe to load as an ONNX file. Nothing is allow-listed.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import trot
from trot.core import faults
from trot.core.files import atomic_write

__all__ = ["FORMAT", "Checkpoint", "CheckpointError", "Counters", "load_checkpoint",
           "require_keys", "save_checkpoint"]

FORMAT = 2
"""The checkpoint format this trot writes and reads. 1 was trot 0.1's: a flat dict per
learner (its `model` beside the counters), without `format` or `learner`."""


class CheckpointError(ValueError):
    """A run directory or its checkpoint that cannot be read back (bad input: the CLI
    prints its message, as for any ValueError)."""


def _check_plain(x: Any, where: str) -> None:
    """Raise CheckpointError unless x is tensors in plain containers (what weights_only
    loads), naming the first offending key: refused when written, not when read back."""
    if isinstance(x, dict):
        for k, v in x.items():
            if not isinstance(k, (str, int)):
                raise CheckpointError(f"checkpoint key {where}[{k!r}] is a {type(k).__name__}")
            _check_plain(v, f"{where}[{k!r}]")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _check_plain(v, f"{where}[{i}]")
    elif not (x is None or isinstance(x, (bool, int, float, str, torch.Tensor))):
        raise CheckpointError(f"checkpoint entry {where} is a {type(x).__module__}."
                              f"{type(x).__qualname__}; checkpoints hold only tensors, "
                              "numbers, strings, None and dicts/lists/tuples of them")


@dataclass(frozen=True)
class Counters:
    """Where a run stands: iterations, env steps, and training seconds (the wall-clock the
    loop counts, evaluations excluded, summed across resumes)."""

    iteration: int = 0
    env_steps: int = 0
    wall_s: float = 0.0


@dataclass(frozen=True)
class Checkpoint:
    learner: str
    """the kind of learner whose `state` this is (its class's `kind`; agents/learners.py's
    BUILDERS build them)"""
    config: dict[str, Any]
    """the run's TrainConfig as JSON (agents/train_config.py's to_json)"""
    counters: Counters
    state: dict[str, Any]
    """the learner's state_dict(): everything its resume needs"""
    trot_version: str = trot.__version__

    @property
    def model(self) -> dict[str, Any]:
        """The policy's actor-critic state (what eval, export, play and sim2sim load)."""
        if "model" not in self.state:
            raise CheckpointError(f"a checkpoint of the {self.learner!r} learner holds no "
                                  "single policy (each part is a run directory of its own)")
        return self.state["model"]

    def payload(self) -> dict[str, Any]:
        return {"format": FORMAT, "learner": self.learner, "config": self.config,
                "counters": dataclasses.asdict(self.counters), "state": self.state,
                "trot_version": self.trot_version}


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    payload = checkpoint.payload()
    _check_plain(payload, "checkpoint")
    atomic_write(path, lambda tmp: torch.save(payload, tmp))
    faults.point("checkpoint-saved")


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    """The checkpoint at path, loaded without running any code it may contain; a file of
    another format is refused, naming it."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "GLOBAL" not in str(e):  # not a refused object: garbage bytes
            raise CheckpointError(f"checkpoint {path} is corrupt or unreadable: "
                                  f"{_first_line(e)}") from e
        raise CheckpointError(
            f"refused to load {path}: it holds Python objects other than tensors and plain "
            "containers, and loading those could run code from the file (trot's checkpoints "
            "never need them). Only if you trust its source: load it with torch.load(p, "
            "weights_only=False), keep the tensors and plain containers, and save it again. "
            f"Refused: {_refused(e)}") from e
    except Exception as e:  # truncated, garbage, wrong format
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable: {e}") from e
    return _from_payload(payload, path)


def _from_payload(payload: Any, path: Path) -> Checkpoint:
    if not isinstance(payload, dict) or not ({"format", "model", "seeds"} & set(payload)):
        raise CheckpointError(f"{path} is not a trot checkpoint (no format, model state or "
                              "seeds' states)")
    fmt = payload.get("format", 1)
    if fmt != FORMAT:
        raise CheckpointError(
            f"{path} is in checkpoint format {fmt}" + (" (trot 0.1's, before one format "
            "served every learner)" if fmt == 1 else "") + f"; this trot reads format "
            f"{FORMAT} only. Finish the run with the trot that wrote it, or retrain it")
    require_keys(payload, ("learner", "config", "counters", "state"), f"checkpoint {path}")
    return Checkpoint(payload["learner"], payload["config"], Counters(**payload["counters"]),
                      payload["state"], payload.get("trot_version", "?"))


def require_keys(state: dict, keys: tuple[str, ...], where: str) -> None:
    """Refuse a state that lacks what this trot writes (a learner's state of another
    version would otherwise load with defaults and quietly continue a different run)."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(
            f"{where} lacks {', '.join(map(repr, missing))}: it was written by another "
            f"version of trot's learner (it holds {sorted(state)}; this trot writes "
            f"{sorted(keys)}). Finish the run with the trot that wrote it, or retrain it")


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _refused(e: Exception) -> str:
    """The line of torch's message that names the refused global."""
    return next((ln.strip() for ln in str(e).splitlines() if "GLOBAL" in ln), _first_line(e))
