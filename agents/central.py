"""SEED RL's central inference (Espeholt et al., 2020) for the decoupled actors:
`trot train TASK --actors K --central-inference`. The actors only step their envs; the
learner acts for them, so no parameters travel and the policy runs where the learner's
device is.

  actor k                                              learner (rank 0), inbox thread
    send [first | obs_t | critic obs_t | the last   --->  write step t-1's outcome and step t's
         step's reward, terminated, truncated,              observations into actor k's rollout;
         final critic obs | env report]                     a rollout of T steps is complete:
                                                            queue it (after its update, under
                                                            actor_sync); act on obs_t with the
    recv [stop | action_t]; step its envs           <---    published actor and actor k's own
                                                            noise stream and memory

Each step of a rollout may be acted by a newer published actor; its behaviour log-probs
and means are those of the actor that acted, and the rollout's `policy_lag` counts from the
oldest. With one actor under actor_sync the run is the single-process run bit for bit. Before the first step
the learner tells each actor the version the run stands at, which seeds its envs and the
noise stream kept for it (a resumed run's actors start new episodes).
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch import Tensor

from trot.agents.actors import (RESEED, STOP, Inbox, ignore_signals, report, sums_width,
                                traffic)
from trot.agents.distributed import ENV_STREAM, NOISE_STREAM, Comm, rank_seed
from trot.agents.networks import reset_state
from trot.agents.storage import Rollout
from trot.agents.train_config import TrainConfig
from trot.tasks.registry import make_env


class StepWire:
    """One control step of an actor's N envs as one float32 message (see the module)."""

    def __init__(self, n: int, obs: int, critic: int, stats: int):
        self.parts = {"first": 1, "obs": n * obs, "critic_obs": n * critic, "rewards": n,
                      "terminated": n, "truncated": n, "final_critic_obs": n * critic,
                      "report": stats}
        self.shapes = {"obs": (n, obs), "critic_obs": (n, critic),
                       "final_critic_obs": (n, critic)}
        self.size = sum(self.parts.values())

    def pack(self, **x: Tensor) -> Tensor:
        return torch.cat([x[k].float().flatten() for k in self.parts])

    def unpack(self, buf: Tensor) -> dict[str, Tensor]:
        out, at = {}, 0
        for k, size in self.parts.items():
            v = buf[at:at + size]
            out[k] = v.view(self.shapes[k]) if k in self.shapes else v
            at += size
        for k in ("terminated", "truncated"):
            out[k] = out[k] > 0.5
        return out


class _Acting:
    """The learner's acting state for one actor: its rollout being written, the step,
    its noise stream and memory, the oldest version acting in it, its episode sums and
    its task's last iteration metrics."""

    def __init__(self, storage: Rollout, state: Tensor, sums: int):
        self.ro, self.t = storage, 0
        self.gen = torch.Generator(device=state.device)  # seeded in start_actors
        self.state, self.version = state, 0
        self.sums, self.task = torch.zeros(sums, device=state.device), None


class CentralInbox(Inbox):
    """The inbox that acts for its actors (see the module)."""

    def __init__(self, cfg: TrainConfig, env, algo, ac, storage: Rollout, noise_seed: int,
                 world: Comm):
        super().__init__(cfg, env, algo, ac, storage, noise_seed, world)
        self.step_wire = StepWire(env.num_envs, env.obs_dim, env.critic_obs_dim,
                                  self.wire.stats)
        self.acting_actor, self.acting_version = copy.deepcopy(ac.actor), -1
        self.seed = cfg.seed
        self.acting = {rank: _Acting(
            Rollout.allocate(storage.steps, env.num_envs, env.obs_dim, env.critic_obs_dim,
                             env.action_dim, env.device, ac.actor.state_size),
            ac.actor.initial_state(env.num_envs, env.device), self.n_sums)
            for rank in range(1, self.k + 1)}

    def start_actors(self) -> None:
        """Each actor learns the version its envs start from (after a resume's load, the
        run's iteration: their streams and the noise kept here move on with it)."""
        self.published.write(self.version)  # what acts first
        for rank, a in self.acting.items():
            a.gen.manual_seed(rank_seed(self.seed + NOISE_STREAM + RESEED * self.version,
                                        rank - 1))
            dist.send(torch.tensor([float(self.version)]), dst=rank, group=self.group)
        self.thread.start()  # then the actors speak first

    def serve(self) -> None:
        try:
            while len(self.told) < self.k:
                buf = torch.empty(self.step_wire.size)
                src = dist.recv(buf, group=self.group)
                stop = self.stopping.is_set() or not self._record(src, buf)
                reply = torch.zeros(1 + self.env.num_envs * self.env.action_dim)
                if stop:
                    self.told.add(src)
                    reply[0] = 1.0
                else:
                    reply[1:] = self._act(src, self.step_wire.unpack(buf)).flatten().cpu()
                dist.send(reply, dst=src, group=self.group)
        except Exception as e:  # noqa: BLE001 - reported by collect() on the learner
            self.error = e

    def _record(self, src: int, buf: Tensor) -> bool:
        """Step t-1's outcome into actor src's rollout; a complete rollout is queued.
        False: the learner stopped while waiting for that rollout's update."""
        a, m = self.acting[src], self.step_wire.unpack(buf.to(self.env.device))
        a.sums += m["report"][:self.n_sums]
        a.task = m["report"][self.n_sums:]
        if m["first"][0] > 0.5:
            return True
        a.ro.write(a.t - 1, rewards=m["rewards"], terminated=m["terminated"],
                   truncated=m["truncated"], final_critic_obs=m["final_critic_obs"])
        if a.state.shape[1]:  # a new episode's memory starts from zero
            a.state = reset_state(a.state, m["terminated"] | m["truncated"])
        if a.t < a.ro.steps:
            return True
        ro = Rollout(*(x.clone() for x in a.ro.state_dict().values()))
        self.rollouts.put((ro, a.version, torch.cat([a.sums, a.task])))
        a.t, a.sums = 0, torch.zeros_like(a.sums)
        return self.lagged or self.done.get() != STOP  # actor_sync: after its update

    @torch.no_grad()
    def _act(self, src: int, m: dict[str, Tensor]) -> Tensor:
        """Actor src's action at its step t, by the newest published actor; [N, A]."""
        a = self.acting[src]
        with self.lock:
            if self.acting_version != self.version:  # published since: load it
                self.published.read(self.acting_actor)
                self.acting_version = self.version
        obs, critic = m["obs"].to(self.env.device), m["critic_obs"].to(self.env.device)
        if a.t == 0:
            a.ro.state0.copy_(a.state)
            a.version = self.acting_version
        action, log_prob, mean, a.state = self.algo.act(obs, self.acting_actor, a.gen, a.state)
        a.ro.write(a.t, obs=obs, critic_obs=critic, actions=action, log_probs=log_prob,
                   action_mean=mean)
        a.t += 1
        return action


def run_central_actor(cfg: TrainConfig, world: Comm) -> None:
    """A central-inference actor: its envs only; the learner acts."""
    ignore_signals()
    group = traffic(cfg.dist_timeout)
    k, cpu = world.rank - 1, torch.device("cpu")
    probe = make_env(cfg.task, 1, "cpu", cpu, 0, cfg.env)
    probe.reset()
    probe.step(torch.zeros(1, probe.action_dim))  # fixes the reward terms: the sums' size
    hello = torch.zeros(1)
    dist.recv(hello, src=0, group=group)  # the version the run stands at
    env = make_env(cfg.task, cfg.num_envs, "cpu", cpu,
                   rank_seed(cfg.seed + ENV_STREAM + RESEED * int(hello[0]), k), cfg.env)
    env.reset(stagger=cfg.stagger_start)
    n_sums = sums_width(probe)
    wire = StepWire(env.num_envs, env.obs_dim, env.critic_obs_dim,
                    n_sums + len(env.task.iteration_metrics()))
    n, zeros = env.num_envs, torch.zeros(env.num_envs)
    reply = torch.empty(1 + n * env.action_dim)
    res = None
    while True:
        obs = env.obs
        dist.send(wire.pack(
            first=torch.tensor([float(res is None)]), obs=obs.policy, critic_obs=obs.critic,
            rewards=zeros if res is None else res.reward,
            terminated=zeros if res is None else res.terminated,
            truncated=zeros if res is None else res.truncated,
            final_critic_obs=obs.critic if res is None else res.final_obs.critic,
            report=report(env, n_sums)), dst=0, group=group)
        dist.recv(reply, src=0, group=group)
        if reply[0] > 0.5:
            return
        res = env.step(reply[1:].view(n, env.action_dim).clone())
