"""How training runs, as a type: `TrainConfig.mode` is one of these frozen dataclasses, each
holding only the settings that apply to it, so a setting of one mode cannot be given to
another (trot/cli_train.py turns today's flags into the mode and names a flag that does
not fit). agents/learners.py builds each mode's learner. What remains to check across the
settings every mode shares is one table, `RULES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Union

from trot.agents.config import DistillSettings, PPOConfig
from trot.tasks.base import TaskConfig


class Shared(Protocol):
    """What a mode's `validate` reads of the settings every mode shares (the run's
    TrainConfig, agents/train_config.py)."""

    task: str
    num_envs: int

    @property
    def agent_effective(self) -> PPOConfig: ...


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

    def validate(self, cfg: Shared) -> None:
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

    def validate(self, cfg: Shared) -> None:
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

    def validate(self, cfg: Shared) -> None:
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

    def validate(self, cfg: Shared) -> None:
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

    def validate(self, cfg: Shared) -> None:
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

    def validate(self, cfg: Shared) -> None:
        if not self.teacher:
            raise ValueError("distillation needs the teacher's run directory "
                             "(trot distill TEACHER_RUN STUDENT_TASK)")
        self.distill.validate(cfg.num_envs)


Mode = Union[Sync, Actors, A3C, Seeds, Tasks, Distill]
MODES: tuple[type, ...] = Mode.__args__


@dataclass(frozen=True)
class Rule:
    """A shared setting that a mode (`object`: every mode) accepts only some values of,
    and why; with `algo`, only when the run trains with that --algo."""

    mode: type
    setting: str  # a TrainConfig field, agent.FIELD or mode.FIELD
    accepted: tuple[Any, ...]
    why: str
    algo: str = ""


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
    Rule(Seeds, "algo", ("ppo", "a2c"), "the stacked update runs PPO's epochs"),
    Rule(Seeds, "agent.kl_penalty", (0.0,), "the stacked update has no penalty weight"),
    Rule(Distill, "algo", ("ppo",), "the student regresses the teacher's actions"),
    Rule(object, "agent.rnn", ("none",), "the KL's Hessian is taken over single "
                                         "observations", algo="trpo"),
    Rule(object, "agent.share_torso", (False,), "the critic's epochs would move a shared "
                                                "torso outside the trust region", algo="trpo"),
    Rule(object, "agent.kl_penalty", (0.0,), "its constraint holds the KL", algo="trpo"),
    Rule(object, "agent.off_policy", ("ratio", "vtrace"), "its surrogate weighs by pi/mu",
         algo="trpo"),
    Rule(object, "agent.update_dtype", ("float32",), "the conjugate gradient runs in "
                                                     "float32", algo="trpo"),
    Rule(Sync, "mode.nproc", (1,), "the natural step is solved on one process's batch",
         algo="trpo"),
    Rule(Tasks, "eval_every", (0,), "evaluate each task with trot eval RUN_DIR/task_NAME"),
    Rule(Tasks, "agent.symmetry", ("none",), "one mirror for several tasks is not defined"),
    Rule(Distill, "eval_every", (0,), "evaluate the student with trot eval"),
)
"""The combinations of a mode and a shared setting that trot does not build, in one place."""


def describe(mode_cls: type) -> str:
    """A mode as a user names it (in messages)."""
    return mode_cls.title
