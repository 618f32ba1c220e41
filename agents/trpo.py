"""TRPO (Schulman et al. 2015): `trot train TASK --algo trpo`. The policy takes one natural-
gradient step per iteration, the largest along F^-1 g whose mean KL from the pre-update
policy stays within desired_kl (delta) and whose surrogate improves; the critic then runs
PPO's epochs of minibatch Adam on the value loss alone (agents/ppo.py drives both).

- F is the Hessian of the batch's mean KL(pi_old || pi_theta) at theta_old, applied to a
  vector by double backprop (never built); `cg_iters` steps of conjugate gradient solve
  (F + cg_damping I) x = g.
- The line search tries `backtracks` step sizes 1, 1/2, 1/4, ... of the step scaled to
  KL = delta under F's quadratic model, all evaluated on the device and the first
  acceptable one chosen by tensor ops: no host sync; none acceptable, the policy stays.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import functional_call

from trot.agents.config import PPOConfig
from trot.agents.networks import Actor, Critic, gaussian_kl
from trot.agents.sgd import normalize_advantages, value_loss
from trot.agents.storage import Batch


def flat(tensors: list[Tensor] | tuple[Tensor, ...]) -> Tensor:
    """Tensors -> one vector [D], in order."""
    return torch.cat([t.reshape(-1) for t in tensors])


def conjugate_gradient(fvp: Callable[[Tensor], Tensor], b: Tensor, iters: int) -> Tensor:
    """x [D] ~ F^-1 b [D] after `iters` conjugate-gradient steps from 0, F symmetric
    positive definite given as its product fvp(v) [D] -> [D]. A fixed count and no
    early exit: a converged residual (0) makes the remaining steps add 0."""
    x, r, p = torch.zeros_like(b), b.clone(), b.clone()
    rr = r @ r
    for _ in range(iters):
        fp = fvp(p)
        pfp = p @ fp
        alpha = torch.where(pfp > 0, rr / pfp, torch.zeros_like(pfp))
        x = x + alpha * p
        r = r - alpha * fp
        rr_new = r @ r
        p = r + torch.where(rr > 0, rr_new / rr, torch.zeros_like(rr)) * p
        rr = rr_new
    return x


def _surrogate_kl(mean: Tensor, log_std: Tensor, b: Batch, adv: Tensor,
                  old_log_std: Tensor) -> tuple[Tensor, Tensor]:
    """The surrogate E[pi/mu * A] and the mean KL(pi_old || pi) (0-d each) of the policy
    whose means are mean [B, A] and log-std log_std [A]."""
    std = log_std.exp().expand_as(mean)
    log_pi = torch.distributions.Normal(mean, std, validate_args=False).log_prob(
        b.actions).sum(-1)  # [B]
    surrogate = ((log_pi - b.log_probs).exp() * adv).mean()
    kl = gaussian_kl(b.action_mean, old_log_std.expand_as(mean), mean,
                     log_std.expand_as(mean)).mean()
    return surrogate, kl


def fisher_product(actor: Actor, b: Batch, old_log_std: Tensor, damping: float
                   ) -> Callable[[Tensor], Tensor]:
    """v [D] -> (F + damping I) v, F the Hessian of the batch's mean KL(pi_old || pi) in
    the actor's parameters at their current values (the pre-update policy's)."""
    params = list(actor.parameters())
    mean = actor(b.obs)  # [B, A]
    kl = gaussian_kl(b.action_mean, old_log_std.expand_as(mean), mean,
                     actor.log_std.expand_as(mean)).mean()
    grad = flat(torch.autograd.grad(kl, params, create_graph=True))  # [D], with its graph

    def fvp(v: Tensor) -> Tensor:
        return flat(torch.autograd.grad(grad @ v, params, retain_graph=True)) + damping * v

    return fvp


def natural_policy_step(actor: Actor, b: Batch, old_log_std: Tensor, cfg: PPOConfig
                        ) -> dict[str, Tensor]:
    """Move the actor's parameters by TRPO's step on batch b (its advantages normalized
    as cfg.advantage_norm says; action_mean the pre-update policy's means). Returns the
    logged statistics (0-d): the accepted step's KL (0 when none was), the backtracks
    taken (cfg.backtracks when none was accepted), the surrogate's gain, the policy loss
    (minus the surrogate) and the entropy after the step."""
    names, params = zip(*actor.named_parameters())
    theta0 = flat([p.detach() for p in params])  # [D]
    adv = b.advantages if cfg.advantage_norm != "minibatch" \
        else normalize_advantages(b.advantages)
    surr0, _ = _surrogate_kl(actor(b.obs), actor.log_std, b, adv, old_log_std)
    g = flat(torch.autograd.grad(surr0, params))  # [D]
    fvp = fisher_product(actor, b, old_log_std, cfg.cg_damping)
    x = conjugate_gradient(fvp, g, cfg.cg_iters)
    shs = x @ fvp(x)  # x^T F x
    with torch.no_grad():
        full = x * (2.0 * cfg.desired_kl / shs.clamp_min(1e-12)).sqrt()  # [D]: KL = delta
        fracs = 0.5 ** torch.arange(cfg.backtracks, device=g.device, dtype=g.dtype)  # [K]
        thetas = theta0 + fracs[:, None] * full  # [K, D]
        surr, kl = torch.stack([torch.stack(_evaluate(actor, names, params, th, b, adv,
                                                      old_log_std)) for th in thetas]).T
        ok = (kl <= cfg.desired_kl) & (surr > surr0) & surr.isfinite()  # [K]
        first = ok.long().argmax()  # the first True (0 where none)
        taken = ok.any()
        theta = torch.where(taken, thetas[first], theta0)
        for p, value in zip(params, _unflatten(theta, params)):
            p.copy_(value)
        zero = torch.zeros_like(surr0)
        gain = torch.where(taken, surr[first] - surr0, zero)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + actor.log_std).sum()
        return {"loss/policy": -(surr0 + gain).detach(), "entropy": entropy,
                "kl": torch.where(taken, kl[first], zero),
                "backtracks": torch.where(taken, first, cfg.backtracks).to(g.dtype),
                "surrogate_gain": gain}


def _unflatten(theta: Tensor, like: tuple[Tensor, ...]) -> list[Tensor]:
    """theta [D] -> tensors shaped as `like`."""
    return [c.view_as(p) for c, p in zip(theta.split([p.numel() for p in like]), like)]


def _evaluate(actor: Actor, names: tuple[str, ...], params: tuple[Tensor, ...],
              theta: Tensor, b: Batch, adv: Tensor, old_log_std: Tensor
              ) -> tuple[Tensor, Tensor]:
    """The surrogate and mean KL (0-d) of the actor with parameters theta [D]; the actor
    itself is left as it is."""
    p = dict(zip(names, _unflatten(theta, params)))
    return _surrogate_kl(functional_call(actor, p, (b.obs,)), p["log_std"], b, adv,
                         old_log_std)


def value_step(critic: Critic, optimizer: torch.optim.Optimizer, b: Batch,
               cfg: PPOConfig) -> dict[str, Tensor]:
    """One Adam step of the critic on minibatch b's value loss (PopArt-normalized
    targets, clipped as cfg.value_clip says); its loss and gradient norm (0-d)."""
    vf = value_loss(critic(b.critic_obs), critic.normalize_targets(b.values, b.critic_obs),
                    critic.normalize_targets(b.returns, b.critic_obs), cfg.value_clip)
    optimizer.zero_grad(set_to_none=False)
    vf.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(critic.parameters(), cfg.max_grad_norm)
    optimizer.step()
    return {"loss/value": vf.detach(), "grad_norm": grad_norm}
