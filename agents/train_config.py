"""The run configuration: a frozen dataclass whose field docstrings are the CLI's help, and
whose `mode` is a typed choice of how training runs.

`trot train TASK --agent.learning-rate 3e-4 --env.episode-seconds 5` overrides one field;
the task's own config class and tuned agent defaults come from the registry. The mode is
one of `Sync`, `Actors`, `A3C`, `Seeds`, `Tasks` and `Distill`: each holds only the
settings that apply to it, so a setting of one mode cannot be given to another
(trot/cli_train.py turns today's flags into the mode and names the flag that does not fit).
What remains to check across the shared settings is one table, `RULES`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

from trot.agents.capture import check_setting as check_capture
from trot.agents.config import DistillSettings, PPOConfig
from trot.core.files import atomic_write
from trot.tasks.base import TaskConfig, from_fields
from trot.tasks.registry import get_task, is_registered
from trot.tasks.sources import load_recorded

ALGOS = ("ppo", "a2c")


# ---------------------------------------------------------------------- modes
@dataclass(frozen=True)
class Sync:
    """PPO or A2C with one learner: in this process, or data-parallel in `nproc`
    processes (DD-PPO's synchronous replicas, torchrun)."""

    kind: ClassVar[str] = "sync"
    title: ClassVar[str] = "synchronous training (one process, or --nproc K)"
    nproc: int = 1
    """processes, one per device, trained data-parallel on torch.distributed (gloo on CPU,
    NCCL on CUDA); > 1 launches torchrun. num_envs and the batch are per process"""
    preempt_fraction: float = 0.0
    """DD-PPO's straggler preemption under nproc > 1 (0: off; DD-PPO used 0.6): once
    ceil(F x nproc) ranks have collected their whole rollout, the others stop at their next
    step and learn from the shorter rollout; gradients and statistics are weighted by
    samples, and every rank makes the same number of all-reduces"""
    actor_lag: int = 0
    """actors act with the parameters of K updates ago, kept as snapshots on the device
    (stale-actor experiments; see agent.off_policy for how the learner corrects)"""
    async_collect: bool = False
    """collect the next rollout on a second thread while this one's update runs (Sample
    Factory's double buffering); it acts with the parameters one update old, so it needs
    actor_lag=1, and trains exactly as actor_lag=1 does. Torch uses torch_threads then,
    for acting and the update alike, since both run beside MuJoCo's threads"""

    def validate(self, cfg: TrainConfig) -> None:
        if self.nproc < 1:
            raise ValueError(f"nproc must be >= 1, got {self.nproc}")
        if self.actor_lag < 0:
            raise ValueError(f"actor_lag must be >= 0, got {self.actor_lag}")
        if self.async_collect and self.actor_lag != 1:
            raise ValueError("async_collect acts with the parameters one update old while the "
                             f"update runs: it needs actor_lag=1, got actor_lag={self.actor_lag}")
        f = self.preempt_fraction
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"preempt_fraction must be in [0, 1] (0: off), got {f}")
        if f == 0.0:
            return
        if self.nproc < 2:
            raise ValueError(f"preempt_fraction {f} preempts slow ranks of a data-parallel "
                             f"run: it needs nproc >= 2, got {self.nproc}")
        if self.actor_lag or self.async_collect:
            raise ValueError("preempt_fraction cuts the plain collector's rollouts; it does "
                             "not combine with actor_lag or async_collect")
        k = cfg.agent_effective.minibatches
        if cfg.num_envs % k:
            raise ValueError(f"preempt_fraction: a shortened rollout of T' steps must split "
                             f"into {k} minibatches for every T', so num_envs "
                             f"{cfg.num_envs} must divide by minibatches {k}")


@dataclass(frozen=True)
class Actors:
    """IMPALA's decoupled actors (agents/actors.py): torchrun runs this learner as rank 0
    and `actors` actor ranks, each stepping num_envs envs (cpu sim) with its own copy of
    the actor and sending its rollouts over gloo; the learner corrects for their lag as
    agent.off_policy says (vtrace: IMPALA's), and logs it (policy_lag)."""

    kind: ClassVar[str] = "actors"
    title: ClassVar[str] = "decoupled actors (--actors K)"
    actors: int = 1
    """actor processes"""
    central_inference: bool = False
    """the learner acts for the actors (SEED RL): an actor sends each step's observations
    and receives its actions, so no parameters travel (agents/central.py)"""
    actor_sync: bool = False
    """each actor waits for the update that learns from its rollout before acting again
    (no overlap, no lag); with one actor, exactly the synchronous run"""

    def validate(self, cfg: TrainConfig) -> None:
        if self.actors < 1:
            raise ValueError(f"actors must be >= 1, got {self.actors}")


@dataclass(frozen=True)
class A3C:
    """A3C (agents/a3c.py): `workers` processes, each with num_envs envs, apply A2C
    gradients to shared parameters without locks, with a shared RMSProp."""

    kind: ClassVar[str] = "a3c"
    title: ClassVar[str] = "A3C (--algo a3c)"
    workers: int = 0
    """worker processes, each with its own num_envs envs and an equal share of the cores
    (0: one per core this process may use)"""

    def validate(self, cfg: TrainConfig) -> None:
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0 (0: one per core), got {self.workers}")


@dataclass(frozen=True)
class Seeds:
    """Several seeds in one process as one batched program (agents/seeds.py): each is a
    whole one-seed run in RUN_DIR/seed_S, with its own envs (blocks of one sim), networks,
    optimizer and statistics."""

    kind: ClassVar[str] = "seeds"
    title: ClassVar[str] = "seeds trained together (--seeds)"
    seeds: tuple[int, ...] = (0, 1)
    """the seeds trained together (replaces --seed)"""

    def validate(self, cfg: TrainConfig) -> None:
        s = self.seeds
        if not s or len(set(s)) != len(s) or min(s) < 0:
            raise ValueError(f"seeds must be distinct integers >= 0, got {list(s)}")


@dataclass(frozen=True)
class Tasks:
    """One policy for several tasks (agents/multitask.py): num_envs is split between the
    run's task and `with_tasks` by task_shares, the observations gain the one-hot task
    index; each task keeps its own value output and PopArt statistics."""

    kind: ClassVar[str] = "tasks"
    title: ClassVar[str] = "several tasks (trot train TASK_A TASK_B)"
    with_tasks: tuple[str, ...] = ()
    """the further registered tasks the same policy trains on (`trot train TASK_A TASK_B`)"""
    with_envs: tuple[TaskConfig, ...] = ()
    """the task settings of with_tasks, in their order (`--env.TASK.FIELD V` on the CLI;
    empty: their registered defaults)"""
    task_shares: tuple[float, ...] = ()
    """each task's share of num_envs, in the order the tasks are given (`--task-shares 3
    1`: three quarters of the envs to the first); rounded by largest remainders, every task
    at least one env. Empty: equal shares"""

    def validate(self, cfg: TrainConfig) -> None:
        names = [cfg.task, *self.with_tasks]
        if not self.with_tasks:
            raise ValueError("several tasks need at least two (trot train TASK_A TASK_B)")
        if len(set(names)) != len(names):
            raise ValueError(f"each task may be given once, got {names}")
        if len(self.with_envs) not in (0, len(self.with_tasks)):
            raise ValueError(f"with_envs needs one task config per task of with_tasks "
                             f"({len(self.with_tasks)}), or none, got {len(self.with_envs)}")
        shares = self.task_shares
        if shares and (len(shares) != len(names) or not all(0 < w < float("inf")
                                                             for w in shares)):
            raise ValueError(f"task_shares needs one positive share per task ({len(names)}: "
                             f"{', '.join(names)}), or none, got {list(shares)}")
        if cfg.num_envs < len(names):
            raise ValueError(f"num_envs {cfg.num_envs} cannot give each of the "
                             f"{len(names)} tasks an env")
        for config in self.with_envs:
            config.validate()


@dataclass(frozen=True)
class Distill:
    """Teacher-student distillation (agents/distill.py): the run's task is the student's,
    which learns to act as the teacher run did."""

    kind: ClassVar[str] = "distill"
    title: ClassVar[str] = "distillation (trot distill)"
    teacher: str = ""
    """the teacher's run directory"""
    distill: DistillSettings = field(default_factory=DistillSettings)
    """DAgger's schedule and the student's regression"""

    def validate(self, cfg: TrainConfig) -> None:
        if not self.teacher:
            raise ValueError("distillation needs the teacher's run directory "
                             "(trot distill TEACHER_RUN STUDENT_TASK)")
        self.distill.validate(cfg.num_envs)


Mode = Union[Sync, Actors, A3C, Seeds, Tasks, Distill]
MODES: tuple[type, ...] = Mode.__args__


@dataclass(frozen=True)
class Rule:
    """A shared setting that a mode accepts only some values of, and why."""

    mode: type
    setting: str  # a TrainConfig field, or agent.FIELD
    accepted: tuple[Any, ...]
    why: str


RULES = (
    Rule(Actors, "sim", ("cpu",), "the actors step MuJoCo C"),
    Rule(Actors, "device", ("cpu",), "a CUDA learner fed by actors is not built yet"),
    Rule(A3C, "sim", ("cpu",), "each worker steps its envs with MuJoCo C"),
    Rule(A3C, "device", ("cpu",), "a3c shares parameters in CPU memory"),
    Rule(A3C, "algo", ("a2c",), "each worker's update is A2C's"),
    Rule(A3C, "eval_every", (0,), "workers train on while an evaluation would pause the "
                                  "clock: evaluate with trot eval"),
    Rule(A3C, "capture", ("auto", "off"), "a3c runs eager"),
    Rule(Seeds, "eval_every", (0,), "evaluate each seed with trot eval RUN_DIR/seed_S"),
    Rule(Seeds, "capture", ("auto", "off"), "the stacked networks run under vmap, eager"),
    Rule(Seeds, "agent.rnn", ("none",), "the stack's acting step is memoryless"),
    Rule(Seeds, "agent.symmetry", ("none",), "the stacked update does not mirror batches"),
    Rule(Tasks, "eval_every", (0,), "evaluate each task with trot eval RUN_DIR/task_NAME"),
    Rule(Tasks, "agent.symmetry", ("none",), "one mirror for several tasks is not defined"),
    Rule(Distill, "eval_every", (0,), "evaluate the student with trot eval"),
)
"""The combinations of a mode and a shared setting that trot does not build, in one place."""


def describe(mode_cls: type) -> str:
    """A mode as a user names it (in messages)."""
    return mode_cls.title


# ---------------------------------------------------------------------- the config
@dataclass(frozen=True)
class TrainConfig:
    task: str = "cartpole-balance"
    """registered task name (see `trot list`)"""
    mode: Mode = field(default_factory=Sync)
    """how training runs: Sync (one learner, or nproc data-parallel ones), Actors, A3C,
    Seeds, Tasks or Distill"""
    algo: Literal["ppo", "a2c"] = "ppo"
    """ppo; a2c (PPO with one epoch, one minibatch, no clipping, and desired_kl 0: a
    fixed learning rate)"""
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
        bad = [f"{r.setting} {self.setting(r.setting)!r} (accepted: "
               f"{', '.join(map(str, r.accepted))}: {r.why})" for r in RULES
               if isinstance(self.mode, r.mode) and self.setting(r.setting) not in r.accepted]
        if bad:
            raise ValueError(f"{describe(type(self.mode))} does not take " + "; ".join(bad))

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
