"""trot: batched MuJoCo robot learning with the learner on the same device.

Attributes are imported lazily so that `trot.export.runner` (numpy, onnxruntime and
mujoco only) can be used on a robot without torch installed.
"""

__version__ = "0.1.0"

_LAZY = {"make_env": "trot.tasks", "register": "trot.tasks", "task_names": "trot.tasks"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trot' has no attribute {name!r}")


__all__ = ["__version__", "make_env", "register", "task_names"]
