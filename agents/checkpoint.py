"""Atomic checkpoint files: write to a temporary file beside the target, fsync, rename.
A crash at any point leaves either the previous checkpoint or the new one, never half."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch


class CheckpointError(RuntimeError):
    pass


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call write(tmp) then atomically move tmp over path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # truncated, garbage, wrong format
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable: {e}") from e
    if not isinstance(payload, dict) or "model" not in payload:
        raise CheckpointError(f"{path} is not a trot checkpoint (no model state)")
    return payload
