"""The run configuration: a frozen dataclass whose field docstrings are the CLI's help, and
whose `mode` is a typed choice of how training runs.

`trot train TASK --agent.learning-rate 3e-4 --env.episode-seconds 5` overrides one field;
the task's own config class and tuned agent defaults come from the registry. The mode is
one of agents/modes.py's types (`Sync`, `Actors`, `A3C`, `Seeds`, `Tasks`, `Distill`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trot.agents.capture import check_setting as check_capture
from trot.agents.config import DistillSettings, PPOConfig
from trot.agents.modes import MODES, RULES, Actors, Distill, Mode, Sync, Tasks, describe
from trot.core.files import atomic_write
from trot.tasks.base import TaskConfig, from_fields
from trot.tasks.registry import get_task, is_registered
from trot.tasks.sources import load_recorded

ALGOS = ("ppo", "a2c", "trpo")


# ---------------------------------------------------------------------- the config
@dataclass(frozen=True)
class TrainConfig:
    task: str = "cartpole-balance"
    """registered task name (see `trot list`)"""
    mode: Mode = field(default_factory=Sync)
    """how training runs: Sync (one learner, or nproc data-parallel ones), Actors, A3C,
    Seeds, Tasks or Distill"""
    algo: Literal["ppo", "a2c", "trpo"] = "ppo"
    """ppo; a2c (PPO with one epoch, one minibatch, no clipping, and desired_kl 0: a
    fixed learning rate); trpo (one natural-gradient step per iteration within a KL of
    agent.desired_kl, then the critic's epochs: agents/trpo.py)"""
    num_envs: int = 1024
    """parallel simulated robots"""
    seed: int = 0
    """seeds the envs, the network init and the sampling"""
    device: str = "cpu"
    """learner device: cpu, cuda, cuda:K (also the sim's on mjx)"""
    sim: str = "cpu"
    """physics backend: cpu (MuJoCo C on the host; with a cuda device, Sebulba mode: one
    copy of the observations up and of the actions down per step) or mjx"""
    max_env_steps: int = 5_000_000
    """stop after this many env steps in all (control steps x envs), the run's total
    across resumes"""
    minutes: float = 0.0
    """stop after this much training wall-clock in all, the run's total across resumes
    (0: no limit)"""
    run_dir: str | None = None
    """where to write the run (default runs/<task>/<timestamp>)"""
    checkpoint_every: int = 20
    """iterations between checkpoints (one is always written at the end)"""
    log_every: int = 5
    """iterations between progress lines"""
    wandb: str = ""
    """Weights & Biases project to log to as well (needs the wandb extra; empty: off): the
    rows of metrics.csv and eval.csv, the config and curve.png, on rank 0; a resumed run
    continues the same W&B run. WANDB_MODE=offline logs offline"""
    eval_every: int = 0
    """iterations between evaluations (0: none): with the training clock paused, the
    deterministic policy plays one episode in each of eval_episodes fresh envs (cpu backend,
    observation noise off, the same starts every time), and a row of the return and the
    task's eval metrics (those of `trot eval`) is appended to eval.csv in the run directory.
    Under nproc > 1 rank 0 evaluates while the others wait (within dist_timeout)"""
    eval_episodes: int = 32
    """episodes per evaluation (eval_every), one per env"""
    stagger_start: bool = True
    """start each env's episode clock at a random step, so time-limit resets spread out"""
    torch_threads: int = 1
    """CPU threads for torch ops while the envs step (0: every core this process may use);
    1 leaves the cores to MuJoCo's threads"""
    update_threads: int = 0
    """CPU threads for the learner's update (0: every core this process may use): the
    simulation is idle then, so the update's matrix products get the cores"""
    dist_timeout: float = 300.0
    """seconds to wait for another process (a collective, an actor, an a3c worker) before
    the job fails"""
    capture: str = "auto"
    """graph capture of the per-step torch code and the minibatch loss (agents/capture.py):
    auto (torch.compile on CUDA, eager on the CPU), off (eager), or a torch.compile
    BACKEND or BACKEND:MODE on any device, e.g. inductor:reduce-overhead (CUDA graphs)"""
    export: bool = True
    """export policy.onnx + policy.json at the end of training"""
    agent: PPOConfig = field(default_factory=PPOConfig)
    """learner settings"""
    env: TaskConfig | None = None
    """task settings (the task's own config class); None: the task's registered defaults"""

    @property
    def tasks(self) -> list[tuple[str, TaskConfig | None]]:
        """Every task this run trains and its settings (None: the registered defaults)."""
        more = self.mode.with_tasks if isinstance(self.mode, Tasks) else ()
        envs = self.mode.with_envs if isinstance(self.mode, Tasks) else ()
        return [(self.task, self.env), *zip(more, envs or [None] * len(more))]

    @property
    def agent_effective(self) -> PPOConfig:
        """The settings the update actually runs with (A2C folds into PPO here)."""
        return self.agent.as_a2c() if self.algo == "a2c" else self.agent

    @property
    def processes(self) -> int:
        """The processes torchrun starts for this run (1: none, it runs here)."""
        if isinstance(self.mode, Actors):
            return self.mode.actors + 1
        return self.mode.nproc if isinstance(self.mode, Sync) else 1

    def spent(self, env_steps: int, wall_s: float) -> bool:
        """Whether a run at env_steps and wall_s training seconds has used its budget."""
        return env_steps >= self.max_env_steps or (self.minutes > 0 and
                                                    wall_s >= 60 * self.minutes)

    def validate(self) -> None:
        if not isinstance(self.mode, MODES):
            raise ValueError(f"mode must be one of {', '.join(m.__name__ for m in MODES)}, "
                             f"got {type(self.mode).__name__}")
        if self.algo not in ALGOS:
            raise ValueError(f"unknown algo {self.algo!r}; accepted: {', '.join(ALGOS)}")
        if self.num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {self.num_envs}")
        if self.max_env_steps <= 0 or self.minutes < 0:
            raise ValueError("max_env_steps must be > 0 and minutes >= 0")
        if self.dist_timeout <= 0:
            raise ValueError(f"dist_timeout must be > 0, got {self.dist_timeout}")
        if self.torch_threads < 0 or self.update_threads < 0:
            raise ValueError("torch_threads and update_threads must be >= 0 (0: all cores), got "
                             f"{self.torch_threads}, {self.update_threads}")
        if self.eval_every < 0 or self.eval_episodes <= 0:
            raise ValueError("eval_every must be >= 0 (0: no evaluation) and eval_episodes > 0, "
                             f"got {self.eval_every}, {self.eval_episodes}")
        if self.checkpoint_every < 1 or self.log_every < 1:
            raise ValueError("checkpoint_every and log_every must be >= 1, got "
                             f"{self.checkpoint_every}, {self.log_every}")
        check_capture(self.capture)
        self._check_rules()
        self.mode.validate(self)
        self.agent_effective.validate(self.num_envs)
        if self.env is not None:
            self.env.validate()

    def _check_rules(self) -> None:
        bad = [r for r in RULES if isinstance(self.mode, r.mode) and r.algo in ("", self.algo)
               and self.setting(r.setting) not in r.accepted]
        if bad:
            r = bad[0]
            who = f"--algo {r.algo}" if r.algo else describe(type(self.mode))
            raise ValueError(f"{who} does not take " + "; ".join(
                f"{r.setting} {self.setting(r.setting)!r} (accepted: "
                f"{', '.join(map(str, r.accepted))}: {r.why})" for r in bad
                if r.algo == bad[0].algo))

    def setting(self, name: str) -> Any:
        """A field by its dotted name (`agent.rnn`)."""
        value: Any = self
        for part in name.split("."):
            value = getattr(value, part)
        return value


# ---------------------------------------------------------------------- JSON
def to_json(cfg: TrainConfig) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    d["mode"] = {"kind": cfg.mode.kind} | d["mode"]
    d["env_type"] = None if cfg.env is None else type(cfg.env).__name__
    d["task_sources"] = [get_task(t).source.to_json() for t, _ in cfg.tasks]  # where later
    return d  # commands find each task


def from_json(d: dict[str, Any], run_dir: Path | None = None) -> TrainConfig:
    """Rebuild a TrainConfig saved by `to_json`; each task's config class comes from the
    registry, so an unknown field is an error rather than silently dropped. A task that is
    not registered is imported from the recorded source (tasks/sources.py)."""
    if not isinstance(d, dict) or not isinstance(d.get("task"), str):
        raise ValueError("a run's config must be a JSON object with its task name ('task')")
    if not isinstance(d.get("mode"), dict):
        raise ValueError("this config has no typed 'mode': it was written by trot 0.1, whose "
                         "flat config this trot does not read (its checkpoint neither); "
                         "finish the run with the trot that wrote it, or retrain it")
    d, mode = dict(d), dict(d["mode"])
    d.pop("env_type", None)
    kinds = {m.kind: m for m in MODES}
    mode_cls = kinds.get(mode.pop("kind", None))
    if mode_cls is None:
        raise ValueError(f"unknown mode kind in config; accepted: {', '.join(kinds)}")
    names = [d["task"], *mode.get("with_tasks", [])]
    records = d.pop("task_sources", None) or [None] * len(names)
    for name, record in zip(names, records):
        if not is_registered(name):
            load_recorded(record, run_dir or Path("."))
    if mode_cls is Tasks:
        mode["with_envs"] = tuple(_task_config(n, c) for n, c in
                                  zip(names[1:], mode.get("with_envs", [])))
    if mode_cls is Distill:
        mode["distill"] = from_fields(DistillSettings, mode.get("distill", {}))
    agent = from_fields(PPOConfig, d.pop("agent", {}))
    return from_fields(TrainConfig, d | {"agent": agent, "mode": from_fields(mode_cls, mode),
                                         "env": _task_config(d["task"], d.pop("env", None))})


def _task_config(name: str, fields: dict | None) -> TaskConfig | None:
    """Task `name`'s config from its JSON fields (None: its defaults)."""
    return None if fields is None else type(get_task(name).config).from_dict(fields)


def save_json(path: Path, cfg: TrainConfig) -> None:
    text = json.dumps(to_json(cfg), indent=2, sort_keys=True)
    atomic_write(Path(path), lambda tmp: tmp.write_text(text))


def load_json(path: Path) -> TrainConfig:
    """The TrainConfig in a run's config.json; a file that is not one is a ValueError
    naming it."""
    try:
        return from_json(json.loads(Path(path).read_text()), Path(path).parent)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
