"""Files written atomically: to a temporary name beside the target, fsynced, then renamed,
so a crash at any point leaves the previous file or the new one, never half. Temporary names
carry the writer's pid (`.NAME.PID.RANDOM.tmp`), so a run that starts or resumes can remove
what a crashed writer left without touching the files of a live one (a concurrent export).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from trot.core import faults


def temp_prefix(name: str) -> str:
    """The start of a temporary name for `name` written by this process."""
    return f".{name}.{os.getpid()}."


_TEMP = re.compile(r"^\.(?P<name>.+?)\.(?P<pid>\d+)\.[^./]+\.tmp(?:\.[A-Za-z0-9]+)?$")


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
        if m is None or _alive(int(m["pid"])):
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
