"""The run directory: its file names, creating one, its config.json, and reading a run back.
Training, evaluation, export and play all go through here, so none of them needs another's
code (export needs no training loop). Every file is written atomically (trot/core/files.py).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trot.agents.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from trot.agents.networks import ActorCritic
from trot.agents.modes import Seeds, Tasks
from trot.agents.train_config import TrainConfig, load_json, save_json
from trot.tasks.env import Env
from trot.tasks.registry import get_task, make_env

CHECKPOINT = "checkpoint.pt"  # agents/checkpoint.py's format
CONFIG = "config.json"  # the TrainConfig the run was started with (budgets as raised)


# ---------------------------------------------------------------------- create and read
def new_run_dir(cfg: TrainConfig) -> Path:
    """cfg.run_dir, which must not hold a run yet (its TensorBoard events and checkpoint
    would mix with the new run's), or runs/<task>/<time>, -2, -3 ... where two runs start
    within one second."""
    if cfg.run_dir:
        d = Path(cfg.run_dir)
        if (d / CONFIG).exists():
            raise ValueError(f"{d} already holds a run: continue it with `trot train "
                             f"--resume {d}`, or give another --run-dir")
        return d
    base = Path("runs") / "+".join(t for t, _ in cfg.tasks) / time.strftime(
        "%Y%m%d-%H%M%S")
    d, k = base, 1
    while d.exists():
        k += 1
        d = base.with_name(f"{base.name}-{k}")
    return d


def task_dir(run_dir: Path, task: str) -> Path:
    """One task's own run directory inside a run of several tasks (agents/multitask.py)."""
    return Path(run_dir) / f"task_{task}"


def each_task(run_dir: Path) -> list[tuple[str | None, Path]]:
    """The run directories that eval, export and sim2sim act on: a run of several tasks'
    task directories, by task name; any other folder is itself (name None)."""
    path = Path(run_dir) / CONFIG
    cfg = load_json(path) if path.is_file() else None
    if cfg is None or not isinstance(cfg.mode, Tasks):
        return [(None, Path(run_dir))]
    return [(name, task_dir(run_dir, name)) for name, _ in cfg.tasks]


def write_config(run_dir: Path, cfg: TrainConfig) -> None:
    """The run's config.json (atomically; the folder is made if new)."""
    save_json(Path(run_dir) / CONFIG, cfg)


def run_config(run_dir: Path) -> TrainConfig:
    """The TrainConfig a run directory was started with."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        raise CheckpointError(f"{run_dir} is not a trot run directory (no {CONFIG})")
    return load_json(path)


RESUMABLE = ("max_env_steps", "minutes", "export", "eval_every", "eval_episodes",
             "log_every", "checkpoint_every", "wandb")
"""the settings a continued run takes anew (`trot train --resume RUN --FLAG V`); the
budgets are the run's totals, not increments"""


def continue_with(run_dir: Path, cfg: TrainConfig, env_steps: int, wall_s: float,
                  changes: dict[str, Any], write: bool = True) -> TrainConfig:
    """The resumed run's config `cfg` with `changes` (RESUMABLE settings), saved to its
    config.json (`write`: on rank 0) so that a later plain --resume keeps them. A budget
    the run has already spent (env_steps, wall_s) is refused: it would stop at once."""
    other = sorted(set(changes) - set(RESUMABLE))
    if other:
        raise ValueError(f"a resumed run takes anew only {', '.join(RESUMABLE)}; not {other}")
    steps, minutes = changes.get("max_env_steps"), changes.get("minutes")
    if steps is not None and steps <= env_steps:
        raise ValueError(f"--max-env-steps {steps} is not above the {env_steps} env steps "
                         f"{run_dir} has done: it is the run's total, not an increment "
                         f"(for N more, give {env_steps} + N)")
    if minutes is not None and 0 < minutes * 60 <= wall_s:  # 0: no time limit
        raise ValueError(f"--minutes {minutes} is not above the {wall_s / 60:.1f} minutes "
                         f"{run_dir} has trained: it is the run's total, not an increment")
    cfg = dataclasses.replace(cfg, **changes)
    cfg.validate()  # e.g. negative minutes, before they are written
    if changes and write:
        write_config(run_dir, dataclasses.replace(run_config(run_dir), **changes))
    return cfg


def read_checkpoint(run_dir: Path, map_location: str = "cpu") -> Checkpoint:
    """The run's last checkpoint (agents/checkpoint.py: loading it runs no code)."""
    return load_checkpoint(Path(run_dir) / CHECKPOINT, map_location=map_location)


@dataclass
class LoadedRun:
    cfg: TrainConfig
    checkpoint: Checkpoint
    env: Env
    ac: ActorCritic


def load_run(run_dir: Path, num_envs: int, seed: int = 12345, device: str = "cpu",
             sim: str | None = None, course: bool = False,
             changes: dict | None = None) -> LoadedRun:
    """A run's config and checkpoint, with a fresh noise-free env of num_envs.
    sim: the physics backend of that env (default: the run's own, `cfg.sim`); course: on
    the task's fixed terrain course (`course_changes`); changes: task config fields to
    replace (`trot view`: no pushes, no randomization)."""
    ckpt = read_checkpoint(run_dir, map_location=device)
    cfg = load_json(Path(run_dir) / CONFIG)
    if isinstance(cfg.mode, Seeds):
        raise ValueError(f"{run_dir} is a run of seeds {list(cfg.mode.seeds)} trained "
                         f"together: give one seed's directory, e.g. "
                         f"{Path(run_dir) / 'seed_'}{cfg.mode.seeds[0]}")
    if isinstance(cfg.mode, Tasks):
        raise ValueError(f"{run_dir} is one policy trained on tasks "
                         f"{[t for t, _ in cfg.tasks]}: give one task's directory, e.g. "
                         f"{task_dir(run_dir, cfg.task)}")
    task_cfg = cfg.env if cfg.env is not None else get_task(cfg.task).config
    changes = (changes or {}) | (course_changes(cfg.task, task_cfg) if course else {})
    env = make_env(cfg.task, num_envs, cfg.sim if sim is None else sim, device, seed,
                   dataclasses.replace(task_cfg, **({"obs_noise": False} | changes)))
    ac = ActorCritic(env.obs_dim, env.critic_obs_dim, env.action_dim, cfg.agent_effective)
    ac.load_state_dict(ckpt.model)
    return LoadedRun(cfg, ckpt, env, ac.to(device).eval())


def course_changes(task: str, config) -> dict:
    """The task config change that puts a terrain task on its fixed evaluation course
    (`--course` of trot eval and sim2sim); a ValueError for a task without one."""
    if "terrain" not in {f.name for f in dataclasses.fields(config)}:
        raise ValueError(f"--course: task {task!r} has no terrain course (its config has no "
                         "`terrain` field; the rough-terrain tasks, e.g. go1-rough, do)")
    return {"terrain": "course"}
