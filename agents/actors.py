"""Decoupled actors (IMPALA, Espeholt et al., 2018): `trot train TASK --actors K`.

torchrun runs K + 1 processes (`--actors K` launches it on one machine; on a cluster,
`torchrun --nnodes ... -m trot train TASK --actors K` with K + 1 processes in all). Rank 0
learns; ranks 1..K act. What crosses is CPU tensors, point to point over gloo:

  actor k (rank k)                               learner (rank 0)
    its copy of the actor, normalizer included     inbox thread: receive a rollout from any
    T steps of its num_envs envs (cpu sim)  --->     actor; queue it (at most K wait: a full
    [version | episode sums | rollout]               queue holds the actors back, as IMPALA's)
                                            <---     reply at once: the newest parameters
    load them: no wait for the update in flight      published [version | stop | actor state]
                                                   trainer (agents/trainer.py), unchanged:
                                                     V(s_t), GAE or V-trace, the update on the
                                                     rollout's behaviour log-probs, publish

The learner is the ordinary Trainer whose collector is the inbox (`Inbox`): it hands out the
actors' rollouts in arrival order, one per iteration, and publishes the actor after each
update. The rollout is `lagged` (PPO recomputes the pre-update means for its KL), and the
policy lag, the updates between the parameters an actor acted with and the learner's, is
logged per iteration (`policy_lag`).

`actor_sync`: the inbox replies only after the update that learns from the rollout, so an
actor never acts ahead. With one actor this is the synchronous single-process run, bitwise
on the cpu backend (the actor's env and noise streams are the single run's): the test that
the plumbing moves the right data.

An actor that dies ends the job: torchrun stops the other ranks, `trot train` names the
rank and its last lines, and the last checkpoint stays loadable. The learner cannot tell a
dead actor from a slow one without a timeout, and a job quietly running on fewer actors
than it was started with would change its lag and speed unasked. Resume restores the
learner (network, optimizer, counters, its streams); the actors start new episodes, seeded
from the version they first receive. Asynchrony makes it not bitwise.
"""

from __future__ import annotations

import math
import queue
import signal
import threading
import time
from dataclasses import fields
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from trot.core import faults
from trot.agents.collect import Collector
from trot.agents.distributed import ENV_STREAM, NOISE_STREAM, Comm, DistributedError, rank_seed
from trot.agents.networks import ActorCritic
from trot.agents.ppo import PPO
from trot.agents.storage import Rollout
from trot.agents.train_config import TrainConfig
from trot.tasks.registry import make_env

RESEED = 7_919  # an actor's env seed moves by RESEED per published version it starts from
# After a stop signal the learner waits for one more rollout: GRACE_PACE times the longest
# gap it has seen between rollouts (at least GRACE_MIN_S), or GRACE_S before the first one.
# The actors finish the rollout in hand; none arriving in that time means one has died.
GRACE_S, GRACE_MIN_S, GRACE_PACE = 10.0, 2.0, 3.0
STOP, UPDATED = "stop", "updated"  # the learner's word to the inbox, per update


def traffic(timeout_s: float) -> dist.ProcessGroup:
    """The learner's and actors' own gloo group, made by every rank once before any
    message. Point-to-point messages on the default group would share tag 0 with the
    first collective of a rank that has run none: an actor told to stop enters
    shutdown's monitored barrier, whose message the inbox would take for a rollout.
    timeout_s: a receive's longest wait (--dist-timeout; torch's default is 30 minutes)."""
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))


def sums_width(env) -> int:
    """The width of a stepped env's EpisodeStats.take: episodes, return, length, one sum per
    reward term, unstable count."""
    return len(env.reward_terms) + 4


def report(env, n_sums: int) -> Tensor:
    """An actor's env report [n_sums + M]: its episode sums and unstable count since the
    last report, then its task's iteration metrics (the terrain curriculum's level: its
    envs', which the learner's idle env cannot know). n_sums: `sums_width` once
    the env has stepped; before its first step the table is narrower, and reads zeros."""
    taken = env.stats.take()
    sums = taken if taken.numel() == n_sums else torch.zeros(n_sums)
    task = [v.float().reshape(1).cpu() for v in env.task.iteration_metrics().values()]
    return torch.cat([sums.cpu(), *task])


class Wire:
    """A rollout of T steps of N envs as one float32 message: [version, the actor's env
    report (E: `report`), each Rollout field flattened, in field order]."""

    def __init__(self, template: Rollout, stats: int):
        self.fields = [(f.name, getattr(template, f.name).shape,
                        getattr(template, f.name).dtype) for f in fields(Rollout)]
        self.stats = stats
        self.size = 1 + stats + sum(math.prod(s) for _, s, _ in self.fields)

    def pack(self, ro: Rollout, version: int, stats: Tensor) -> Tensor:
        return torch.cat([torch.tensor([float(version)]), stats.float().cpu(),
                          *(getattr(ro, name).float().flatten().cpu()
                            for name, _, _ in self.fields)])

    def unpack(self, buf: Tensor, device: torch.device) -> tuple[Rollout, int, Tensor]:
        """(the rollout on `device`, the version it acted with, the env report)."""
        parts, at = [], 1 + self.stats
        for _, shape, dtype in self.fields:
            x = buf[at:at + math.prod(shape)].view(shape)
            parts.append((x > 0.5 if dtype == torch.bool else x.to(dtype)).to(device))
            at += math.prod(shape)
        return Rollout(*parts), int(buf[0]), buf[1:1 + self.stats].to(device)


class Published:
    """The actor's state (parameters and normalizer buffers) as one float64 message
    [version, stop, state...]: float32 and float64 values both travel exactly."""

    def __init__(self, actor: torch.nn.Module):
        self.actor = actor
        self.state = list(actor.state_dict().values())
        self.buf = torch.zeros(2 + sum(t.numel() for t in self.state), dtype=torch.float64)

    def write(self, version: int) -> Tensor:
        """Publish the actor as it stands now (the learner's thread, between updates)."""
        self.buf[0], self.buf[1] = version, 0.0
        torch.cat([t.detach().double().flatten().cpu() for t in self.state], out=self.buf[2:])
        return self.buf

    def read(self, into: torch.nn.Module | None = None) -> tuple[int, bool]:
        """Load buf into the actor (or `into`, a copy of it); (version, stop)."""
        at = 2
        with torch.no_grad():
            for t in (self.state if into is None else into.state_dict().values()):
                t.copy_(self.buf[at:at + t.numel()].view(t.shape))
                at += t.numel()
        return int(self.buf[0]), bool(self.buf[1])


class Inbox(Collector):
    """The learner's collector: the actors' rollouts, in arrival order, one per iteration.
    A thread receives them and replies with the published actor (after the update that
    learns from it, under actor_sync). What crosses the wire is two hooks, which SEED RL's
    central inference replaces (agents/central.py): `start_actors` (the first message to
    each actor, then the thread) and `serve` (the thread's body)."""

    lagged = True

    def __init__(self, cfg: TrainConfig, env, algo: PPO, ac: ActorCritic, storage: Rollout,
                 noise_seed: int, world: Comm):
        super().__init__(cfg, env, algo, ac, storage, noise_seed)
        self.lagged, self.k = not cfg.mode.actor_sync, world.world_size - 1
        env.reset()
        env.step(torch.zeros(env.num_envs, env.action_dim, device=env.device))
        env.stats.take()  # that step fixed the reward terms' order; the sums are the actors'
        self.n_sums, self.task_names = sums_width(env), list(
            env.task.iteration_metrics())
        self.task_vals = torch.zeros(len(self.task_names), device=env.device)
        self.wire = Wire(storage, self.n_sums + len(self.task_names))
        self.version, self.lag = 0, 0  # version: updates so far (a resumed run's iteration)
        self.arrived, self.longest_gap = 0.0, None  # the pace of arrivals, for the grace
        self.published, self.lock = Published(ac.actor), threading.Lock()
        self.rollouts: queue.Queue = queue.Queue(maxsize=self.k)
        self.done: queue.Queue = queue.Queue()  # actor_sync: the learner's "updated"
        self.stopping, self.error = threading.Event(), None
        self.told: set[int] = set()  # the actor ranks told to stop
        self.thread = threading.Thread(target=self.serve, name="trot-inbox", daemon=True)
        self.group = traffic(cfg.dist_timeout)

    def load_state_dict(self, mine: dict, shared: dict, iteration: int) -> None:
        super().load_state_dict(mine, shared, iteration)
        self.version = iteration

    def start_actors(self) -> None:
        """Every actor starts from the learner's parameters (after a resume's load)."""
        buf = self.published.write(self.version)
        for rank in range(1, self.k + 1):
            dist.send(buf, dst=rank, group=self.group)
        self.thread.start()

    def grace_s(self) -> float:
        """How long a stopped learner waits for one more rollout (GRACE_S above)."""
        if self.longest_gap is None:
            return GRACE_S
        return max(GRACE_MIN_S, GRACE_PACE * self.longest_gap)

    def collect(self) -> Rollout:
        """The next rollout to arrive. A stop signal (Ctrl-C, or torchrun's SIGTERM when an
        actor died) while waiting: the actors, which ignore signals, have `grace_s` to send
        one more; if none comes, an actor is gone, and DistributedError ends the run."""
        if self.thread.ident is None:
            self.start_actors()
            self.arrived = time.monotonic()
        signalled = None
        while True:
            if self.error is not None:
                raise DistributedError(f"the learner's inbox failed: {self.error}")
            if signalled is None and self.interrupted():
                signalled = time.monotonic()
            if signalled is not None and time.monotonic() - signalled > self.grace_s():
                raise DistributedError(
                    f"stopped while waiting for the actors' rollouts: none came within "
                    f"{self.grace_s():.1f} s ({GRACE_PACE:g}x the longest gap between "
                    "rollouts so far), so an actor has died (torchrun names it) or hangs. "
                    "The last checkpoint is intact")
            try:
                ro, version, rep = self.rollouts.get(timeout=0.1)
                break
            except queue.Empty:
                continue
        now = time.monotonic()
        if signalled is None:  # the pace of a run, not of the wait after a signal
            self.longest_gap = max(self.longest_gap or 0.0, now - self.arrived)
        self.arrived = now
        self.env.stats.add(rep[:self.n_sums])
        self.task_vals = rep[self.n_sums:]
        self.lag = self.version - version
        return ro

    def metrics(self) -> dict[str, Tensor]:
        return {"policy_lag": torch.tensor(float(self.lag), device=self.env.device)}

    def task_metrics(self) -> dict[str, Tensor]:
        """The last rollout's actor's (a resumed run's curriculum restarts in its actors)."""
        return dict(zip(self.task_names, self.task_vals))

    def after_update(self) -> None:
        with self.lock:  # the version and its parameters change as one
            self.version += 1
            self.published.write(self.version)
        if not self.lagged:
            self.done.put(UPDATED)

    def close(self) -> None:
        """Tell every actor to stop (each at its next message), then join the thread. An
        actor that does not come for its stop within `grace_s` (dead, with others alive)
        is named in a DistributedError; the thread, blocked receiving from it, is left."""
        if self.thread.ident is None:  # never started: the actors wait for a first reply
            self.start_actors()
        self.stopping.set()
        self.done.put(STOP)
        deadline = time.monotonic() + self.grace_s()
        while self.thread.is_alive() and time.monotonic() < deadline:
            try:  # a full queue would hold the thread in put()
                self.rollouts.get(timeout=0.1)
            except queue.Empty:
                pass
        if self.thread.is_alive():
            missing = sorted(set(range(1, self.k + 1)) - self.told)
            raise DistributedError(
                f"actor ranks {missing} did not come for the stop within "
                f"{self.grace_s():.1f} s: dead (torchrun names it) or hung")
        self.thread.join()
        if self.error is not None:  # e.g. an actor died during the last exchange
            raise DistributedError(f"the learner's inbox failed: {self.error}")

    def serve(self) -> None:
        try:
            while len(self.told) < self.k:
                buf = torch.empty(self.wire.size)
                src = dist.recv(buf, group=self.group)  # from any actor
                stop = self.stopping.is_set()
                if not stop:
                    self.rollouts.put(self.wire.unpack(buf, self.env.device))
                    if not self.lagged:  # actor_sync: reply after its update
                        stop = self.done.get() == STOP
                with self.lock:  # the snapshot after_update wrote, stop flagged
                    self.published.buf[1] = float(stop)
                    dist.send(self.published.buf, dst=src, group=self.group)
                if stop:
                    self.told.add(src)
        except Exception as e:  # noqa: BLE001 - reported by collect() on the learner
            self.error = e


def ignore_signals() -> None:
    """An actor stops when the learner says so: Ctrl-C and SIGTERM reach the learner, which
    finishes its iteration, tells each actor at its next message, and checkpoints."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)


def run_actor(cfg: TrainConfig, world: Comm) -> None:
    """An actor rank's life: the first parameters, then rollouts until told to stop."""
    ignore_signals()
    group = traffic(cfg.dist_timeout)
    a, k, cpu = cfg.agent_effective, world.rank - 1, torch.device("cpu")
    probe = make_env(cfg.task, 1, "cpu", cpu, 0, cfg.env)
    ac = ActorCritic(probe.obs_dim, probe.critic_obs_dim, probe.action_dim, a)
    published = Published(ac.actor)
    dist.recv(published.buf, src=0, group=group)
    version, stop = published.read()
    env = make_env(cfg.task, cfg.num_envs, "cpu", cpu,
                   rank_seed(cfg.seed + ENV_STREAM + RESEED * version, k), cfg.env)
    storage = Rollout.allocate(a.rollout_steps, env.num_envs, env.obs_dim,
                               env.critic_obs_dim, env.action_dim, cpu,
                               ac.actor.state_size)
    collector = Collector(cfg, env, PPO(ac, a, cpu), ac, storage,
                          rank_seed(cfg.seed + NOISE_STREAM + RESEED * version, k))
    env.reset(stagger=cfg.stagger_start)
    wire = None
    while not stop:
        ro = collector.collect()
        faults.point("rollout")  # e.g. a slow actor, in the lag tests
        rep = report(env, sums_width(env))
        wire = wire or Wire(storage, rep.numel())
        dist.send(wire.pack(ro, version, rep), dst=0, group=group)
        dist.recv(published.buf, src=0, group=group)
        version, stop = published.read()
