"""Task definitions in torch, the registry and the env loop."""

from trot.tasks import cartpole, g1, go1, go2, gym_ant  # noqa: F401  (registers the tasks)
from trot.tasks.base import Observation, StepResult, Task, TaskConfig
from trot.tasks.env import Env
from trot.tasks.observation import ObsTerm
from trot.tasks.registry import get_task, make_env, register, task_names

__all__ = ["Env", "Observation", "ObsTerm", "StepResult", "Task", "TaskConfig", "get_task",
           "make_env", "register", "task_names"]
