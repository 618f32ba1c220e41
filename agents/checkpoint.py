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


class Rollback:
    """The learner's tensors (model parameters and buffers, optimizer state, the learning
    rate) as they were before an update, copied into buffers allocated once; `restore`
    copies them back, so a NaN update is undone without a deepcopy every iteration."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 extra: tuple[torch.Tensor, ...] = ()):
        self.model, self.optimizer, self.extra = model, optimizer, extra
        self.saved: list[torch.Tensor] = []

    def _live(self) -> list[torch.Tensor]:
        opt = [v for group in self.optimizer.param_groups for p in group["params"]
               for v in self.optimizer.state.get(p, {}).values() if torch.is_tensor(v)]
        return [*self.model.state_dict().values(), *opt, *self.extra]

    @torch.no_grad()
    def save(self) -> None:
        live = self._live()
        if [t.shape for t in live] != [t.shape for t in self.saved]:  # first call, or the
            self.saved = [t.detach().clone() for t in live]  # optimizer just made its state
        else:
            torch._foreach_copy_(self.saved, live)

    @torch.no_grad()
    def restore(self) -> None:
        live = self._live()
        if len(live) != len(self.saved):  # the optimizer's state was born in this update
            self.optimizer.state.clear()
            live = self._live()
        torch._foreach_copy_(live, self.saved)
