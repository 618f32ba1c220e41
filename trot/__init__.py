"""trot: batched MuJoCo robot learning with the learner on the same device."""

__version__ = "0.1.0"

from trot.tasks import make_env, register, task_names  # noqa: E402

__all__ = ["__version__", "make_env", "register", "task_names"]
