"""trot: batched MuJoCo robot learning with the learner on the same device.

Attributes are imported lazily so that `trot.export.runner` (numpy, onnxruntime and
mujoco only) can be used on a robot without torch installed.

Imported from a clone (the current folder on `sys.path`, as `python -m trot` and torchrun
put it there), this file is the clone's `trot/`, which holds none of the subpackages: they
sit beside it (sim/, tasks/, agents/, export/), and only an install knows pyproject's
mapping. So a clone's `trot` adds the clone's root to its own `__path__`, where each
subpackage's folder has the subpackage's name (docs/architecture.md, "Layout").
"""

from pathlib import Path as _Path

__version__ = "0.1.0"

SUBPACKAGES = ("sim", "tasks", "agents", "export")  # pyproject's package-dir map, folder = name


def _clone_root() -> str | None:
    """The clone's root if this `trot/` sits in a source tree that keeps the subpackages
    beside it; None when installed (they are then inside this folder)."""
    here = _Path(__file__).resolve().parent
    if any((here / name / "__init__.py").is_file() for name in SUBPACKAGES):
        return None
    root = here.parent
    if (root / "pyproject.toml").is_file() and all(
            (root / name / "__init__.py").is_file() for name in SUBPACKAGES):
        return str(root)
    return None


if (_root := _clone_root()) is not None and _root not in __path__:
    __path__.append(_root)

_LAZY = {"make_env": "trot.tasks", "register": "trot.tasks", "task_names": "trot.tasks"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trot' has no attribute {name!r}")


__all__ = ["__version__", "make_env", "register", "task_names"]
