"""The run configuration: one frozen dataclass whose field docstrings are the CLI's help.

`trot train TASK --agent.learning-rate 3e-4 --env.episode-seconds 5` overrides one field;
the task's own config class and tuned agent defaults come from the registry.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trot.agents.capture import check_setting as check_capture
from trot.agents.config import PPOConfig
from trot.tasks.base import TaskConfig, from_fields

ALGOS = ("ppo", "a2c", "a3c")


@dataclass(frozen=True)
class TrainConfig:
    task: str = "cartpole-balance"
    """registered task name (see `trot list`)"""
    with_tasks: tuple[str, ...] = ()
    """further registered tasks that the same policy trains on (`trot train TASK_A TASK_B
    ...`, agents/multitask.py): num_envs is split between all the tasks by task_shares,
    their observations gain the one-hot task index; each task keeps its own value output
    and PopArt statistics (agent.popart_tasks)"""
    with_envs: tuple[TaskConfig, ...] = ()
    """the task settings of with_tasks, in their order (`--env.TASK.FIELD V` on the CLI;
    empty: their registered defaults)"""
    task_shares: tuple[float, ...] = ()
    """several tasks: each task's share of num_envs, in the order the tasks are given
    (`--task-shares 3 1`: three quarters of the envs to the first); rounded by largest
    remainders, every task at least one env. Empty: equal shares"""
    algo: Literal["ppo", "a2c", "a3c"] = "ppo"
    """ppo; a2c (PPO with one epoch, one minibatch, no clipping, and desired_kl 0: a
    fixed learning rate); or a3c: `workers` processes, each with num_envs envs, apply A2C
    gradients to shared parameters without locks, with a shared RMSProp (agents/a3c.py)"""
    num_envs: int = 1024
    """parallel simulated robots"""
    seed: int = 0
    """seeds the envs, the network init and the sampling"""
    seeds: tuple[int, ...] = ()
    """train these seeds together, in one process as one batched program (replaces
    --seed): each is a whole one-seed run in RUN_DIR/seed_S, with its own envs (blocks of
    one sim), networks, optimizer and statistics (agents/seeds.py)"""
    device: str = "cpu"
    """learner device: cpu, cuda, cuda:K (also the sim's on mjx)"""
    sim: str = "cpu"
    """physics backend: cpu (MuJoCo C on the host; with a cuda device, Sebulba mode: one
    copy of the observations up and of the actions down per step) or mjx"""
    max_env_steps: int = 5_000_000
    """stop after this many env steps (control steps x envs)"""
    minutes: float = 0.0
    """stop after this much wall-clock (0: no limit)"""
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
    actor_lag: int = 0
    """actors act with the parameters of K updates ago, kept as snapshots on the device
    (stale-actor experiments; see agent.off_policy for how the learner corrects)"""
    async_collect: bool = False
    """collect the next rollout on a second thread while this one's update runs (Sample
    Factory's double buffering); it acts with the parameters one update old, so it needs
    actor_lag=1, and trains exactly as actor_lag=1 does. Torch uses torch_threads then,
    for acting and the update alike, since both run beside MuJoCo's threads"""
    actors: int = 0
    """decoupled actor processes (IMPALA; 0: none): torchrun runs this learner as rank 0 and
    K actor ranks, each stepping num_envs envs (cpu sim) with its own copy of the actor and
    sending its rollouts over gloo; the learner corrects for their lag as agent.off_policy
    says (vtrace: IMPALA's), and logs it (policy_lag). agents/actors.py"""
    central_inference: bool = False
    """actors: the learner acts for them (SEED RL): an actor sends each step's observations
    and receives its actions, so no parameters travel (agents/central.py)"""
    actor_sync: bool = False
    """actors: each actor waits for the update that learns from its rollout before acting
    again (no overlap, no lag); with one actor, exactly the synchronous run"""
    workers: int = 0
    """a3c: worker processes, each with its own num_envs envs and an equal share of the
    cores (0: one per core this process may use); only --algo a3c takes it"""
    nproc: int = 1
    """processes, one per device, trained data-parallel on torch.distributed (gloo on CPU,
    NCCL on CUDA); > 1 launches torchrun. num_envs and the batch are per process"""
    preempt_fraction: float = 0.0
    """DD-PPO's straggler preemption under nproc > 1 (0: off; DD-PPO used 0.6): once
    ceil(F x nproc) ranks have collected their whole rollout, the others stop at their next
    step and learn from the shorter rollout; gradients and statistics are weighted by
    samples, and every rank makes the same number of all-reduces"""
    dist_timeout: float = 300.0
    """seconds a collective waits for the other processes before the job fails"""
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
        return [(self.task, self.env), *zip(self.with_tasks,
                                            self.with_envs or [None] * len(self.with_tasks))]

    @property
    def agent_effective(self) -> PPOConfig:
        """The settings the update actually runs with (A2C folds into PPO here)."""
        return self.agent.as_a2c() if self.algo in ("a2c", "a3c") else self.agent

    def spent(self, env_steps: int, wall_s: float) -> bool:
        """Whether a run at env_steps and wall_s training seconds has used its budget."""
        return env_steps >= self.max_env_steps or (self.minutes > 0 and
                                                    wall_s >= 60 * self.minutes)

    def validate(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"unknown algo {self.algo!r}; accepted: {', '.join(ALGOS)}")
        if self.num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {self.num_envs}")
        if self.max_env_steps <= 0 or self.minutes < 0:
            raise ValueError("max_env_steps must be > 0 and minutes >= 0")
        if self.nproc < 1 or self.dist_timeout <= 0:
            raise ValueError(f"nproc must be >= 1 and dist_timeout > 0, got {self.nproc}, "
                             f"{self.dist_timeout}")
        if self.torch_threads < 0 or self.update_threads < 0:
            raise ValueError("torch_threads and update_threads must be >= 0 (0: all cores), got "
                             f"{self.torch_threads}, {self.update_threads}")
        if self.eval_every < 0 or self.eval_episodes <= 0:
            raise ValueError("eval_every must be >= 0 (0: no evaluation) and eval_episodes > 0, "
                             f"got {self.eval_every}, {self.eval_episodes}")
        if self.actor_lag < 0:
            raise ValueError(f"actor_lag must be >= 0, got {self.actor_lag}")
        if self.async_collect and self.actor_lag != 1:
            raise ValueError("async_collect acts with the parameters one update old while the "
                             f"update runs: it needs actor_lag=1, got actor_lag={self.actor_lag}")
        check_capture(self.capture)
        self._check_a3c()
        self._check_preemption()
        self._check_actors()
        self._check_seeds()
        self._check_tasks()
        self.agent_effective.validate(self.num_envs)
        if self.env is not None:
            self.env.validate()

    def _check_preemption(self) -> None:
        """Preemption cuts the plain collector's rollouts in data-parallel runs."""
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
        k = self.agent_effective.minibatches
        if self.num_envs % k:
            raise ValueError(f"preempt_fraction: a shortened rollout of T' steps must split "
                             f"into {k} minibatches for every T', so num_envs "
                             f"{self.num_envs} must divide by minibatches {k}")

    def _check_actors(self) -> None:
        """Decoupled actors: one learner, actors stepping MuJoCo C, no other collector."""
        if self.actors < 0:
            raise ValueError(f"actors must be >= 0 (0: none), got {self.actors}")
        if (self.actor_sync or self.central_inference) and not self.actors:
            raise ValueError("actor_sync and central_inference are settings of decoupled "
                             "actors: they need actors >= 1")
        if not self.actors:
            return
        clashes = {"nproc": self.nproc != 1, "sim": self.sim != "cpu",
                   "device": self.device != "cpu",
                   "actor_lag": self.actor_lag != 0, "async_collect": self.async_collect,
                   "preempt_fraction": self.preempt_fraction != 0, "algo": self.algo == "a3c"}
        bad = [f"{k} {getattr(self, k)!r}" for k, clash in clashes.items() if clash]
        if bad:
            raise ValueError(f"actors {self.actors} (one learner fed by actor processes that "
                             "step MuJoCo C) does not take " + ", ".join(bad) + "; accepted: "
                             "nproc 1, sim cpu, device cpu (a CUDA learner is not built "
                             "yet), actor_lag 0, no async_collect or preemption, algo ppo "
                             "or a2c")

    def _check_seeds(self) -> None:
        """Stacked seeds: the plain collector and PPO/A2C update of one process."""
        s = self.seeds
        if not s:
            return
        if len(set(s)) != len(s) or min(s) < 0:
            raise ValueError(f"seeds must be distinct integers >= 0, got {list(s)}")
        a = self.agent_effective
        clashes = {"nproc": (self.nproc != 1, 1), "actors": (self.actors != 0, 0),
                   "algo": (self.algo == "a3c", "ppo or a2c"),
                   "actor_lag": (self.actor_lag != 0, 0),
                   "async_collect": (self.async_collect, False),
                   "eval_every": (self.eval_every != 0, "0 (then trot eval RUN_DIR/seed_S)"),
                   "capture": (self.capture not in ("auto", "off"), "auto or off"),
                   "agent.rnn": (a.rnn != "none", "none"),
                   "agent.symmetry": (a.symmetry == "augment", "not augment")}
        bad = [f"{k} (accepted: {ok})" for k, (clash, ok) in clashes.items() if clash]
        if bad:
            raise ValueError("seeds trained together (--seeds) are not built yet with: "
                             + ", ".join(bad))

    def _check_tasks(self) -> None:
        """Several tasks: one learner in one process, every task's settings given."""
        names = [self.task, *self.with_tasks]
        if not self.with_tasks:
            if self.with_envs or self.task_shares:
                raise ValueError("with_envs and task_shares are settings of several tasks "
                                 "(trot train TASK_A TASK_B ...); this run has one")
            return
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
        if self.num_envs < len(names):
            raise ValueError(f"num_envs {self.num_envs} cannot give each of the "
                             f"{len(names)} tasks an env")
        clashes = {"seeds": (bool(self.seeds), "none"), "nproc": (self.nproc != 1, 1),
                   "actors": (self.actors != 0, 0), "algo": (self.algo == "a3c", "ppo or a2c"),
                   "eval_every": (self.eval_every != 0, "0 (then trot eval RUN_DIR/task_NAME)"),
                   "agent.symmetry": (self.agent.symmetry == "augment", "not augment")}
        bad = [f"{k} (accepted: {ok})" for k, (clash, ok) in clashes.items() if clash]
        if bad:
            raise ValueError("several tasks trained as one policy are not built yet with: "
                             + ", ".join(bad))
        for config in self.with_envs:
            config.validate()

    def _check_a3c(self) -> None:
        """A3C's workers share CPU memory and step their own envs, in one process group."""
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0 (0: one per core), got {self.workers}")
        if self.algo != "a3c":
            if self.workers:
                raise ValueError(f"workers {self.workers} is for --algo a3c (its worker "
                                 f"processes); algo {self.algo!r} trains in one process, or "
                                 "data-parallel with --nproc")
            return
        clashes = {
            "device": (self.device != "cpu", "a3c shares parameters in CPU memory: cpu"),
            "sim": (self.sim != "cpu", "each worker steps its envs with MuJoCo C: cpu"),
            "nproc": (self.nproc != 1, "a3c starts its own worker processes: 1"),
            "actor_lag": (self.actor_lag != 0, "a worker acts with its rollout's copy: 0"),
            "async_collect": (self.async_collect, "a worker acts with its rollout's copy"),
            "eval_every": (self.eval_every != 0, ("workers train on while an evaluation "
                                                   "would pause the clock: 0, then trot eval")),
            "capture": (self.capture not in ("auto", "off"), "a3c runs eager: auto or off"),
        }
        bad = [f"{name} {getattr(self, name)!r} ({why})"
               for name, (clash, why) in clashes.items() if clash]
        if bad:
            raise ValueError("algo a3c does not take " + "; ".join(bad))


def to_json(cfg: TrainConfig) -> dict[str, Any]:
    from trot.tasks.registry import get_task

    d = dataclasses.asdict(cfg)
    d["env_type"] = None if cfg.env is None else type(cfg.env).__name__
    d["task_source"] = get_task(cfg.task).source.to_json()  # where later commands find it
    d["with_sources"] = [get_task(t).source.to_json() for t in cfg.with_tasks]
    return d


def from_json(d: dict[str, Any], run_dir: Path | None = None) -> TrainConfig:
    """Rebuild a TrainConfig saved by `to_json`; each task's config class comes from the
    registry, so an unknown field is an error rather than silently dropped. A task that is
    not registered is imported from the recorded source (tasks/sources.py)."""
    if not isinstance(d, dict) or not isinstance(d.get("task"), str):
        raise ValueError("a run's config must be a JSON object with its task name ('task')")
    d = dict(d)
    d.pop("env_type", None)
    names = [d["task"], *d.get("with_tasks", [])]
    records = [d.pop("task_source", None), *d.pop("with_sources", [None] * (len(names) - 1))]
    given = d.pop("with_envs", None) or []
    configs = [_task_config(n, c, r, run_dir) for n, c, r in
               zip(names, [d.pop("env", None), *(given or [None] * (len(names) - 1))],
                   records)]
    agent = from_fields(PPOConfig, d.pop("agent", {}))
    return from_fields(TrainConfig, d | {"agent": agent, "env": configs[0],
                                         "with_envs": tuple(configs[1:]) if given else ()})


def _task_config(name: str, fields: dict | None, record: Any, run_dir: Path | None
                 ) -> TaskConfig | None:
    """Task `name`'s config from its JSON fields (None: its defaults), the task imported
    from its recorded source where it is not registered."""
    from trot.tasks.registry import get_task, is_registered
    from trot.tasks.sources import load_recorded

    if not is_registered(name):
        load_recorded(record, run_dir or Path("."))
    return None if fields is None else type(get_task(name).config).from_dict(fields)


def save_json(path: Path, cfg: TrainConfig) -> None:
    from trot.runs import atomic_write  # trot/runs.py reads configs through this module

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
