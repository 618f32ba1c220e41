"""Atomic run files and safe checkpoints.

Every file a run writes goes to a temporary name beside the target, is fsynced and renamed:
a crash at any point leaves the previous file or the new one, never half. Temporary names
carry the writer's pid (`.NAME.PID.RANDOM.tmp`), so a run that starts or resumes can remove
what a crashed writer left without touching the files of a live one (a concurrent export).

Checkpoints hold only tensors and plain containers (dicts, lists, tuples, numbers, strings,
None) and load with `torch.load(weights_only=True)`: loading one runs no code from the file,
so a checkpoint from elsewhere is as safe to load as an ONNX file. Nothing is allow-listed.
"""

from __future__ import annotations

import os
import pickle
import re
import secrets
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from trot import faults


class CheckpointError(RuntimeError):
    pass


def temp_prefix(name: str) -> str:
    """The start of a temporary name for `name` written by this process."""
    return f".{name}.{os.getpid()}."


# .NAME.PID.RANDOM.tmp[.ext]; older trot wrote .NAME.RANDOM.tmp (no pid: always stale now)
_TEMP = re.compile(r"^\.(?P<name>.+?)\.(?:(?P<pid>\d+)\.)?[^./]+\.tmp(?:\.[A-Za-z0-9]+)?$")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_temps(folder: Path) -> list[Path]:
    """Remove the temporary files and folders that crashed writers left in `folder` (those
    whose pid no longer runs); returns what was removed."""
    removed = []
    for p in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else []:
        m = _TEMP.match(p.name)
        if m is None or (m["pid"] is not None and _alive(int(m["pid"]))):
            continue
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def _new_temp(path: Path, suffix: str) -> str:
    """A new empty file beside `path` with the mode a plain open gives (0666 less the
    umask): tempfile.mkstemp's 0600 would leave run files unreadable to the group."""
    for _ in range(100):
        tmp = path.parent / f"{temp_prefix(path.name)}{secrets.token_hex(4)}{suffix}"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return str(tmp)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def atomic_write(path: Path, write: Callable[[Path], None], suffix: str = ".tmp") -> None:
    """Call write(tmp) then atomically move tmp over path. `suffix` ends the temporary
    name (".tmp.mp4" for writers that choose a format by extension)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temp(path, suffix)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        faults.point(f"tmp-written-{path.name}")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _refused(e: Exception) -> str:
    """The line of torch's message that names the refused global."""
    return next((ln.strip() for ln in str(e).splitlines() if "GLOBAL" in ln), _first_line(e))
