"""Safe checkpoints, written atomically through the run directory's module (trot/runs.py).

Checkpoints hold only tensors and plain containers (dicts, lists, tuples, numbers, strings,
None) and load with `torch.load(weights_only=True)`: loading one runs no code from the file,
so a checkpoint from elsewhere is as safe to load as an ONNX file. Nothing is allow-listed.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from trot import faults
from trot.runs import CheckpointError, atomic_write

__all__ = ["CheckpointError", "load_checkpoint", "require_keys", "save_checkpoint"]


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


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    _check_plain(payload, "checkpoint")
    atomic_write(path, lambda tmp: torch.save(payload, tmp))
    faults.point("checkpoint-saved")


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint at path, loaded without running any code it may contain."""
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
    if not isinstance(payload, dict) or not ("model" in payload or "seeds" in payload):
        raise CheckpointError(f"{path} is not a trot checkpoint (no model state, and no "
                              "seeds' states)")
    return payload


def require_keys(state: dict, keys: tuple[str, ...], where: str) -> None:
    """Refuse a checkpoint that lacks what trot 0.1 writes: a development trot's older
    format, which no release wrote, would otherwise load with defaults and quietly continue
    a different run."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(
            f"{where} lacks {', '.join(map(repr, missing))}: it was written by a trot before "
            f"0.1's checkpoint format, which this trot does not read (it holds "
            f"{sorted(state)}; 0.1 writes {sorted(keys)}). Retrain the run, or finish it with "
            "the trot that wrote it")


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _refused(e: Exception) -> str:
    """The line of torch's message that names the refused global."""
    return next((ln.strip() for ln in str(e).splitlines() if "GLOBAL" in ln), _first_line(e))
