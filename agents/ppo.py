"""PPO, and A2C as its special case (`PPOConfig.as_a2c()`: one epoch, one minibatch, no
clipping, where the surrogate ratio * A has exactly the gradient of log pi * A).

Everything stays on the device: the KL-adaptive learning rate is a tensor that the
optimizer reads, updated with `torch.where`, so no minibatch waits for the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext

import torch
from torch import Tensor

from trot.agents.advantages import compute_gae
from trot.agents.capture import native_bf16
from trot.agents.config import PPOConfig
from trot.agents.distributed import ONE_PROCESS, Comm
from trot.agents.networks import ActorCritic, gaussian_kl
from trot.agents.sgd import (
    LR_BOUNDS,
    adapt_beta,
    adapt_lr,
    epochs,
    mean_stats,
    normalize_advantages,
    surrogate_loss,
    value_loss,
)
from trot.agents.storage import Batch, Rollout, Sequences, reuse
from trot.agents.trpo import natural_policy_step, value_step
from trot.agents.vtrace import vtrace
from trot.tasks.mirror import Mirrors


def _sequence_means(actor: torch.nn.Module, b: Batch, seq: Sequences) -> Tensor:
    """A recurrent actor's means [B, A] for the rows of `b`, whole rollouts of the envs of
    `seq`: rows t-major (t * n + i) or env-major (i * T + t)."""
    t, n = seq.starts.shape
    if seq.env_major:
        obs = b.obs.view(n, t, -1).transpose(0, 1)  # [T, n, P]
        return actor.sequence(obs, seq.state0, seq.starts).transpose(0, 1).flatten(0, 1)
    return actor.sequence(b.obs.view(t, n, -1), seq.state0, seq.starts).flatten(0, 1)


def _sample_with(actor: torch.nn.Module, obs: Tensor, eps: Tensor, state: Tensor
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`actor.sample_with`, as a function of the actor: one captured program serves the
    learner's actor and a lagged copy alike (Dynamo guards on which one it is)."""
    return actor.sample_with(obs, eps, state)


class PPO:
    """The algorithm: acting, turning a rollout into a batch, and the update (PPO's
    epochs, or under `trust_region` TRPO's natural step and the critic's epochs)."""

    def __init__(self, ac: ActorCritic, cfg: PPOConfig, device: torch.device,
                 comm: Comm = ONE_PROCESS, mirrors: Mirrors | None = None,
                 capture: Callable[[Callable], Callable] = lambda fn: fn,
                 optimizer: torch.optim.Optimizer | None = None, trust_region: bool = False):
        """mirrors: the task's left-right mirror maps, for cfg.symmetry='augment'.
        capture: how the act step and the minibatch's forward and loss run (agents/
        capture.py's `compiler`; default eager). optimizer: what steps the parameters
        (a3c's shared RMSProp); default Adam at the KL-adaptive rate, over the critic's
        alone under `trust_region` (--algo trpo: agents/trpo.py moves the actor)."""
        if cfg.symmetry == "augment" and mirrors is None:
            raise ValueError("symmetry='augment' needs the task's mirror maps (Env.mirrors)")
        self.ac, self.cfg, self.device, self.comm = ac, cfg, device, comm
        self._shuffled: Tensor | None = None  # [B, W] the epoch's shuffled batch (_shuffle)
        # V-trace: the last rollout's fraction of importance weights cut to rho_bar (0-d)
        self.rho_clipped: Tensor | None = None
        self.mirrors = mirrors if cfg.symmetry == "augment" else None
        # in the net's dtype: float32 in training; float64 in the reference test, where a
        # float32 rate alone would put the two updates 1e-8 apart instead of 1e-16
        self.lr = torch.tensor(cfg.learning_rate, device=device,
                               dtype=next(ac.parameters()).dtype)
        # fused: one kernel for all parameters (4x faster steps on CPU for small nets); it
        # also accepts the tensor learning rate
        self.trust_region = trust_region
        self.optimizer = torch.optim.Adam((ac.critic if trust_region else ac).parameters(),
                                          lr=self.lr, fused=True) \
            if optimizer is None else optimizer
        self.beta = torch.tensor(cfg.kl_penalty, device=device, dtype=self.lr.dtype)  # penalty
        lo, hi = LR_BOUNDS
        self.lr_bounds = (min(lo, cfg.learning_rate), max(hi, cfg.learning_rate))
        self.bf16 = cfg.update_dtype == "bfloat16" or (cfg.update_dtype == "auto"
                                                       and native_bf16(torch.device(device)))
        self._sample_with = capture(_sample_with)
        self._forward_loss = capture(self.forward_loss)

    def _forward_precision(self):
        """The update's forward passes under bf16 autocast (update_dtype), else as they are:
        the matrix products run in bf16 from float32 weights; backward follows the graph."""
        if not self.bf16:
            return nullcontext()
        return torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16)

    @property
    def weights_by_log_prob(self) -> bool:
        """The policy loss is -log pi * A (the ratio pi/mu is ignored, or already inside A as
        V-trace's rho) rather than the surrogate on pi/mu."""
        return self.cfg.off_policy == "ignore" or (self.cfg.off_policy == "vtrace"
                                                   and not self.cfg.clip)

    @torch.no_grad()
    def act(self, obs: Tensor, actor: torch.nn.Module | None = None,
            gen: torch.Generator | None = None, state: Tensor | None = None
            ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Sample actions [N, A]; return them with log-probs [N], the means [N, A] and the
        actor's next memory state [N, S]. `actor`: the behaviour actor (a lagged snapshot);
        default the learner's own. `gen`: the generator of the action noise."""
        actor = self.ac.actor if actor is None else actor
        if state is None:
            state = actor.initial_state(obs.shape[0], obs.device)
        return self._sample_with(actor, obs, actor.noise(obs.shape[0], gen), state)

    @torch.no_grad()
    def fill_values(self, ro: Rollout) -> Rollout:
        """ro with its V(s_t) [T, N], in one batched pass of the critic the update starts
        from."""
        t, n = ro.values.shape
        ro.values.copy_(self.ac.critic.value(ro.critic_obs.flatten(0, 1)).view(t, n))
        return ro

    @torch.no_grad()
    def prepare(self, ro: Rollout, next_values: Tensor | None = None) -> Batch:
        """GAE on unnormalized values, then PopArt moves to the new returns. The advantages
        stay raw (several tasks: each divided by its task's return scale): `update`
        normalizes them as `advantage_norm` says. next_values: V of each step's reached
        state [T, N], where the caller computed them (agents/seeds.py)."""
        adv, ret = self.targets(ro, next_values)
        critic = self.ac.critic
        self.move_popart(critic, ret, ro.critic_obs)
        if critic.tasks > 1 and critic.popart is not None:  # per task on a common scale
            onehot = critic.task_of(ro.critic_obs.flatten(0, 1))  # [T * N, K]
            adv = adv / (onehot @ critic.popart.std.to(adv.dtype)).view_as(adv)
        return self.pack(ro, adv, ret)

    @torch.no_grad()
    def targets(self, ro: Rollout, next_values: Tensor | None = None
                ) -> tuple[Tensor, Tensor]:
        """The rollout's advantages and value targets [T, N] in reward units: GAE, or
        V-trace (off_policy='vtrace') against the policy about to be updated."""
        t, n = ro.rewards.shape
        if next_values is None:
            next_values = self.ac.critic.value(ro.final_critic_obs.flatten(0, 1)).view(t, n)
        if self.cfg.off_policy == "vtrace":  # log pi(a|x) of the policy about to be updated
            mean = self.ac.actor.sequence(ro.obs, ro.state0, ro.starts())  # [T, N, A]
            log_pi = self.ac.actor.dist_of(mean).log_prob(ro.actions).sum(-1)  # [T, N]
            self.rho_clipped = (log_pi - ro.log_probs > math.log(self.cfg.rho_bar)).float().mean()
            ret, adv = vtrace(ro.rewards, ro.values, next_values, ro.terminated, ro.truncated,
                              log_pi - ro.log_probs, self.cfg.gamma, self.cfg.lam,
                              self.cfg.rho_bar, self.cfg.c_bar,
                              weight_advantages=not self.cfg.clip)
            return adv, ret
        return compute_gae(ro.rewards, ro.values, next_values, ro.terminated, ro.truncated,
                           self.cfg.gamma, self.cfg.lam)

    @torch.no_grad()
    def move_popart(self, critic: torch.nn.Module, ret: Tensor,
                    critic_obs: Tensor | None = None) -> None:
        """PopArt's statistics (of every rank's returns ret [T, N]) move, and `critic`'s
        head is rescaled to keep its outputs; nothing without PopArt. Several tasks: each
        output's statistics move to its own task's returns (the task read from critic_obs
        [T, N, C]), or all to every task's with popart_tasks 'shared'."""
        if critic.popart is None:
            return
        y = ret.reshape(-1, 1)  # [T * N, 1]
        if critic.tasks == 1 or self.cfg.popart_tasks == "shared":
            mean, var, _ = self.comm.moments(y)  # [1]
            mean, var = mean.expand(critic.tasks), var.expand(critic.tasks)
        else:
            onehot = critic.task_of(critic_obs.flatten(0, 1)) > 0.5  # [T * N, K]
            mean, var = (torch.cat(m) for m in zip(*(self.comm.moments(y, onehot[:, k])[:2]
                                                     for k in range(critic.tasks))))
        critic.popart.update_from_moments(mean, var + mean * mean)

    @torch.no_grad()
    def pack(self, ro: Rollout, adv: Tensor, ret: Tensor) -> Batch:
        """The update's batch: the rollout's rows (t-major, row t * N + n) with adv and ret
        [T, N], and their mirror images under symmetry='augment'."""
        parts = [x.flatten(0, 1) for x in (ro.obs, ro.critic_obs, ro.actions, ro.log_probs,
                                            ro.action_mean, adv, ret, ro.values)]
        if self.mirrors is not None:
            parts = self._with_mirror(parts)
        batch = Batch.packed(*parts)
        if self.ac.actor.memory is not None:
            batch.sequences = Sequences(ro.state0, ro.starts())
        return batch

    def _with_mirror(self, parts: list[Tensor]) -> list[Tensor]:
        """Each field [B, ...] -> [2B, ...]: the samples, then their mirror images. A
        mirrored sample keeps its advantage, return and value (under a symmetric task they
        are the original's) and its behaviour log-prob: the mirror is a signed permutation,
        so the mirrored action's density under the mirrored behaviour distribution is the
        original's. Its reference mean for the KL is the pre-update policy's at the mirrored
        observation (one forward), not the mirrored mean: while the policy is not yet
        symmetric those differ, and the KL would read that asymmetry as policy change."""
        m = self.mirrors
        obs, critic_obs, actions, log_probs, mean, adv, ret, values = parts
        obs_m = m.policy(obs)  # [B, P]
        return [torch.cat(x) for x in ((obs, obs_m), (critic_obs, m.critic(critic_obs)),
                                       (actions, m.action(actions)), (log_probs, log_probs),
                                       (mean, self.ac.actor(obs_m)), (adv, adv), (ret, ret),
                                       (values, values))]

    def update(self, batch: Batch, gen: torch.Generator,
               lagged: bool = False) -> dict[str, Tensor]:
        """Epochs of minibatch SGD. Returns 0-d device tensors (means over minibatches).

        The KL that steers the adaptive rate is between the policy before this update and
        the policy now. Without lag the batch's `action_mean` are that policy's own means.
        `lagged`: the batch was collected by an older policy (--actor-lag), whose means
        would put the KL at K updates' distance and the rate at its floor; the pre-update
        means are then computed here (one forward) and written into the batch.
        `advantage_norm="batch"` likewise normalizes `batch.advantages` in place, over every
        rank's samples, before the first epoch.

        `gen` draws one permutation per epoch, `randperm(len(batch))`: minibatch k of an
        epoch is rows [k * size, (k + 1) * size) of it."""
        cfg, ac = self.cfg, self.ac
        old_log_std = ac.actor.log_std.detach().clone()  # [A], the pre-update policy's
        seq = batch.sequences
        if lagged:
            with torch.no_grad():  # action_mean: a view into batch.table
                batch.action_mean.copy_(ac.actor(batch.obs) if seq is None else
                                        _sequence_means(ac.actor, batch, seq))
        if cfg.advantage_norm == "batch":  # a view into batch.table, as action_mean
            batch.advantages.copy_(normalize_advantages(batch.advantages, self.comm))
        if self.trust_region:  # TRPO: the natural step on the actor, epochs on the critic
            out = natural_policy_step(ac.actor, batch, old_log_std, cfg) | self._epochs(
                batch, gen, lambda b, adapt: value_step(ac.critic, self.optimizer, b, cfg))
        elif seq is None:  # rows shuffled: the epochs every seed of a stack runs too
            out = self._epochs(batch, gen, lambda b, adapt: self._minibatch(
                b, None, old_log_std, adapt))
        else:
            out = self._recurrent_epochs(batch, gen, old_log_std)
        if cfg.kl_penalty > 0:  # beta from the whole batch's KL after the update
            with torch.no_grad():
                self.beta.copy_(adapt_beta(self.beta, self._batch_kl(batch, old_log_std),
                                           cfg.desired_kl))
            out = out | {"kl_beta": self.beta.clone()}
        return out if self.rho_clipped is None else out | {"rho_clipped": self.rho_clipped}

    def _epochs(self, batch: Batch, gen: torch.Generator,
                step: Callable[[Batch, bool], dict[str, Tensor]]) -> dict[str, Tensor]:
        """`sgd.epochs` over this one batch's rows, shuffled into a table reused across
        iterations; step(minibatch, adapt) -> its statistics."""
        if batch.table is None:  # a batch built field by field (tests): one table
            batch = Batch.packed(*batch.fields())
        self._shuffled = reuse(self._shuffled, (1, *batch.table.shape), batch.table)
        like = batch.fields()
        return epochs(self.cfg, [batch.table], [gen], self._shuffled,
                      lambda mb, adapt: step(Batch._from_table(mb[0], like), adapt))

    def _batch_kl(self, batch: Batch, old_log_std: Tensor) -> Tensor:
        """The mean KL (0-d) of the policy now from the pre-update one over the batch."""
        actor, seq = self.ac.actor, batch.sequences
        mean = actor(batch.obs) if seq is None else _sequence_means(actor, batch, seq)
        return gaussian_kl(batch.action_mean, old_log_std.expand_as(mean), mean,
                           actor.log_std.expand_as(mean)).mean()

    def _recurrent_epochs(self, batch: Batch, gen: torch.Generator, old_log_std: Tensor
                          ) -> dict[str, Tensor]:
        """A recurrent actor's epochs: each minibatch whole rollouts of a subset of envs."""
        mbs = (mb for _ in range(self.cfg.epochs) for mb in self._minibatches(batch, gen))
        return mean_stats(self._minibatch(b, seq_b, old_log_std, adapt=k > 0)
                          for k, (b, seq_b) in enumerate(mbs))

    def _minibatches(self, batch: Batch, gen: torch.Generator):
        """A recurrent actor's epoch: envs shuffled, each minibatch (Batch, Sequences) whole
        rollouts of N / minibatches envs, env-major. One gather per epoch; the minibatches
        are then contiguous views of it."""
        k_mb, seq = self.cfg.minibatches, batch.sequences
        t, n = seq.starts.shape
        perm = torch.randperm(n, generator=gen, device=self.device)  # [N]
        steps = torch.arange(t, device=self.device) * n  # [T]
        shuffled = self._shuffle(batch, (perm[:, None] + steps[None, :]).flatten())  # env-major
        e = n // k_mb
        for k in range(k_mb):
            envs = perm[k * e:(k + 1) * e]
            yield shuffled[k * e * t:(k + 1) * e * t], Sequences(seq.state0[envs],
                                                                 seq.starts[:, envs],
                                                                 env_major=True)

    def _shuffle(self, batch: Batch, idx: Tensor) -> Batch:
        """batch's rows idx, in a table reused across epochs and iterations: each epoch's
        minibatches are done with before the next epoch's gather overwrites it."""
        shuffled = batch.gather(idx, self._shuffled)
        self._shuffled = shuffled.table
        return shuffled


    def _minibatch(self, b: Batch, seq: Sequences | None, old_log_std: Tensor,
                   adapt: bool = True) -> dict[str, Tensor]:
        """One SGD step on minibatch `b` (its rollouts' `seq` for a recurrent actor); its
        statistics by logged name (0-d tensors). `adapt`: steer the learning rate by this
        minibatch's KL (when `desired_kl` > 0)."""
        ac = self.ac
        loss, stats = self._forward_loss(b, seq, old_log_std)
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        # one bucket: every rank's gradients and KL, averaged (a no-op in one process)
        kl = self.comm.average_gradients(ac.parameters(), extra=stats["kl"], samples=len(b))
        return stats | self.apply_gradients(kl, adapt)

    def apply_gradients(self, kl: Tensor, adapt: bool) -> dict[str, Tensor]:
        """The step after the backward pass: the learning rate steered by the minibatch's
        KL (0-d; when `adapt` and `desired_kl` > 0), the gradient clipped, Adam's step.
        Returns the logged kl, grad_norm and learning_rate (0-d)."""
        cfg, ac = self.cfg, self.ac
        if adapt and cfg.desired_kl > 0 and cfg.kl_penalty == 0:  # the penalty steers beta
            self.lr.copy_(adapt_lr(self.lr, kl, cfg.desired_kl, self.lr_bounds))
        grad_norm = torch.nn.utils.clip_grad_norm_(ac.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        return {"kl": kl, "grad_norm": grad_norm, "learning_rate": self.lr.clone()}

    def forward_loss(self, b: Batch, seq: Sequences | None, old_log_std: Tensor
                     ) -> tuple[Tensor, dict[str, Tensor]]:
        """The actor's means on minibatch `b` (along its rollouts `seq` for a recurrent
        actor), then `loss`: the part of a minibatch step that graph capture covers."""
        with self._forward_precision():
            mean = self.ac.actor(b.obs) if seq is None else _sequence_means(self.ac.actor,
                                                                             b, seq)
            return self.loss(b, mean.to(b.actions.dtype), old_log_std)

    def loss(self, b: Batch, mean: Tensor, old_log_std: Tensor
             ) -> tuple[Tensor, dict[str, Tensor]]:
        """The minibatch loss (0-d, with its graph) and its statistics: policy and value
        losses, entropy, clip fraction, and the KL [0-d] of the policy now from the
        pre-update one. A pure function of the tensors: ready for graph capture
        (tests/test_capture.py)."""
        cfg, ac = self.cfg, self.ac
        dist = ac.actor.dist_of(mean)
        log_probs = dist.log_prob(b.actions).sum(-1)  # [B]
        entropy = dist.entropy().sum(-1).mean()
        adv = normalize_advantages(b.advantages, self.comm) \
            if cfg.advantage_norm == "minibatch" \
            else b.advantages
        if self.weights_by_log_prob:  # the lag ignored, or corrected inside adv (V-trace)
            pg, clip_frac = -(log_probs * adv).mean(), torch.zeros((), device=adv.device)
        else:
            pg, clip_frac = surrogate_loss(log_probs, b.log_probs, adv, cfg.clip,
                                           cfg.clip_low, cfg.clip_high)
        critic = ac.critic
        vf = value_loss(critic(b.critic_obs).to(b.returns.dtype),
                        critic.normalize_targets(b.values, b.critic_obs),
                        critic.normalize_targets(b.returns, b.critic_obs), cfg.value_clip)
        loss = pg + cfg.value_coef * vf - cfg.entropy_coef * entropy
        penalized = cfg.kl_penalty > 0  # the KL then carries its gradient into the loss
        with nullcontext() if penalized else torch.no_grad():
            kl = gaussian_kl(b.action_mean, old_log_std.expand_as(b.action_mean),
                             dist.loc, ac.actor.log_std.expand_as(dist.loc)).mean()
        if penalized:
            loss = loss + self.beta * kl
        return loss, {"loss/policy": pg.detach(), "loss/value": vf.detach(),
                      "entropy": entropy.detach(), "kl": kl.detach(),
                      "clip_fraction": clip_frac}

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "lr": self.lr.clone(),
                "beta": self.beta.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr.copy_(state["lr"])
        if "beta" in state:  # checkpoints before the KL penalty have none (and no penalty)
            self.beta.copy_(state["beta"])
        for g in self.optimizer.param_groups:  # keep the optimizer reading our lr tensor
            g["lr"] = self.lr
