"""Where tasks come from: trot's own modules, a user's file or module (`--tasks`), and
installed plugins (the entry-point group `trot.tasks`).

Every registered task remembers its source. A run records it (config.json, policy.json),
so resume, eval, export, sim2sim and play find the task again in a new process without
`--tasks`: a module is imported by name; a file by its absolute path, checked against the
sha256 recorded at training time (a moved file is an error naming the path, an edited one a
warning naming both hashes). Recorded code is announced on stderr before it is imported,
and a file inside the run or export directory itself is never imported (a shared run
directory must not be able to bring its own code). An explicit `--tasks` wins over the
record: a name that is already registered is never looked up again.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

ENTRY_POINT_GROUP = "trot.tasks"
HOW_TO_ADD = ("a task in your own file or module: --tasks FILE.py (or --tasks "
              f"package.module); an installed package: declare its module in the "
              f"entry-point group {ENTRY_POINT_GROUP!r}")


class DuplicateTaskError(ValueError):
    """Two sources registered the same task name (never skipped, unlike a broken plugin)."""


@dataclass(frozen=True)
class TaskSource:
    """Where a registered task's code lives."""

    kind: str
    """"trot" (built in), "module" (imported by name), "file" (by path) or "entry-point\""""
    name: str
    """module name, or the file's absolute path"""
    sha256: str | None = None
    """of the file's bytes, for kind "file\""""

    def describe(self) -> str:
        return {"trot": "trot", "module": f"module {self.name}", "file": f"file {self.name}",
                "entry-point": f"entry point {self.name}"}[self.kind]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


BUILTIN = TaskSource("trot", "trot.tasks")
_current: list[TaskSource] = [BUILTIN]  # the source whose code is registering right now
_loaded: dict[str, TaskSource] = {}  # module name or absolute path -> source
_plugins_done = False


def current_source() -> TaskSource:
    return _current[-1]


@contextmanager
def _registering(source: TaskSource) -> Iterator[None]:
    _current.append(source)
    try:
        yield
    finally:
        _current.pop()


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_tasks(spec: str) -> TaskSource:
    """Import a task file (by path) or module (by name) once; its `register` calls record
    it as their source. Raises ValueError if neither exists."""
    path = Path(spec).expanduser()
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ValueError(f"--tasks {spec}: no such file")
        path = path.resolve()
        key = str(path)
        if key not in _loaded:
            source = TaskSource("file", key, _file_sha256(path))
            _import_file(path, source)
            _loaded[key] = source
        return _loaded[key]
    local = _working_dir_module(spec)
    if local is not None:  # recorded by path: a later run from elsewhere finds it too
        return load_tasks(str(local))
    if spec not in _loaded:
        source = TaskSource("module", spec)
        try:
            with _registering(source):
                importlib.import_module(spec)
        except ModuleNotFoundError as e:
            if e.name and spec.startswith(e.name):  # the module itself, not one it imports
                raise ValueError(f"--tasks {spec}: no such file, and no module {spec!r} "
                                 "on the Python path") from None
            raise
        _loaded[spec] = source
    return _loaded[spec]


def _working_dir_module(spec: str) -> Path | None:
    """The file of a top-level module `spec` that sits in the working directory, which
    `python -m` puts on the path and a later `trot eval` run from elsewhere would not have;
    None for anything else (a package module, an installed one, none at all)."""
    if "." in spec or spec in sys.modules:
        return None
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError):
        return None
    origin = Path(found.origin) if found is not None and found.origin else None
    if origin is None or origin.suffix != ".py" or found.submodule_search_locations:
        return None
    return origin if origin.resolve().parent == Path.cwd().resolve() else None


def _import_file(path: Path, source: TaskSource) -> None:
    name = f"trot_user_tasks.{path.stem}_{source.sha256[:12]}"  # a unique, stable name
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        with _registering(source):
            spec.loader.exec_module(module)
    except ValueError as e:  # the CLI prints a ValueError's message alone: say where it was
        sys.modules.pop(name, None)
        lines = [n for f, n in traceback.walk_tb(e.__traceback__)
                 if f.f_code.co_filename == str(path)]
        msg = f"{path}, line {lines[-1]}: {e}" if lines else f"{path}: {e}"
        try:
            again = type(e)(msg)  # the same kind (DuplicateTaskError stays one)
        except Exception:  # noqa: BLE001 (a subclass with another constructor)
            again = ValueError(msg)
        raise again from e
    except BaseException:
        sys.modules.pop(name, None)
        raise


def loaded_specs() -> list[str]:
    """What `--tasks` loaded in this process, as arguments for child processes."""
    return [s.name for s in _loaded.values() if s.kind in ("file", "module")]


def load_plugins() -> None:
    """Import every module declared in the entry-point group, once; a plugin that fails
    to import is a warning naming it, and trot goes on without it."""
    global _plugins_done
    if _plugins_done:
        return
    _plugins_done = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        source = TaskSource("entry-point", f"{ep.name} = {ep.value}")
        try:
            with _registering(source):
                ep.load()
        except DuplicateTaskError:
            raise
        except Exception as e:  # noqa: BLE001 (a broken plugin must not stop trot)
            warnings.warn(f"trot: task plugin {ep.name!r} ({ep.value}, entry-point group "
                          f"{ENTRY_POINT_GROUP!r}) failed to import and is skipped: "
                          f"{type(e).__name__}: {e}", stacklevel=2)


def load_recorded(record: dict[str, Any] | None, run_dir: Path) -> None:
    """Import the task code a run or export recorded (see the module docstring)."""
    if not record or record.get("kind") in (None, "trot", "entry-point"):
        return  # built in, or found again through the installed plugin
    source = TaskSource(**record)
    if source.kind == "module":
        print(f"trot: importing task module {source.name} (recorded in {run_dir})",
              file=sys.stderr)
        load_tasks(source.name)
        return
    path = Path(source.name)
    if not path.is_file():
        raise ValueError(f"the task file this run was trained with is gone: {path} (recorded "
                         f"in {run_dir}); restore it there, or pass --tasks NEW_PATH")
    if path.resolve().is_relative_to(Path(run_dir).resolve()):
        raise ValueError(f"refusing to import {path}: it lies inside {run_dir} itself; a run "
                         "or export directory never brings its own code (pass --tasks to "
                         "import it if you trust it)")
    digest = _file_sha256(path)
    if digest != source.sha256:
        warnings.warn(f"trot: task file {path} changed since this run was trained "
                      f"(sha256 {source.sha256} then, {digest} now)", stacklevel=2)
    print(f"trot: importing task file {path} (recorded in {run_dir})", file=sys.stderr)
    load_tasks(str(path))
