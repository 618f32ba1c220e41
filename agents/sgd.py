"""The parts every gradient update shares (PPO and A2C in agents/ppo.py, TRPO's value
step in agents/trpo.py, the stacked seeds in agents/seeds.py): the losses, advantage
normalization, the KL-adaptive rules of the learning rate and of the KL penalty's weight,
and the epochs of minibatch SGD. Pure functions of tensors; all on the device."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from trot.agents.config import PPOConfig
from trot.agents.distributed import ONE_PROCESS, Comm

LR_BOUNDS = (1e-5, 1e-2)


def surrogate_loss(log_probs: Tensor, old_log_probs: Tensor, adv: Tensor, clip: bool,
                   clip_low: float, clip_high: float) -> tuple[Tensor, Tensor]:
    """Clipped surrogate (to minimise) and the fraction of samples clipped. All [B]."""
    ratio = (log_probs - old_log_probs).exp()
    if not clip:  # d/dθ (ratio * A) at ratio = 1 is A * d/dθ log π: the A2C gradient
        return -(ratio * adv).mean(), torch.zeros((), device=adv.device)
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = -torch.minimum(ratio * adv, clipped * adv).mean()
    frac = ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)).to(ratio.dtype).mean()
    return loss, frac


def value_loss(pred: Tensor, old: Tensor, target: Tensor, clip: float) -> Tensor:
    """Mean squared error of normalized values [B], optionally clipped around `old`."""
    err = (pred - target).square()
    if clip > 0:
        pred_c = old + (pred - old).clamp(-clip, clip)
        err = torch.maximum(err, (pred_c - target).square())
    return err.mean()


def normalize_advantages(adv: Tensor, comm: Comm = ONE_PROCESS) -> Tensor:
    """adv [*] -> zero mean, unit (sample) std over every rank's samples."""
    mean, var, n = comm.moments(adv.reshape(-1, 1))  # [1] float64, population var
    std = (var * n / (n - 1).clamp(min=1.0)).sqrt()  # Bessel, as torch.std
    return (adv - mean.to(adv)) / (std.to(adv) + 1e-8)


def adapt_lr(lr: Tensor, kl: Tensor, desired: float, bounds: tuple[float, float]) -> Tensor:
    """rsl_rl's KL-adaptive rule, on the device: /1.5 above 2x target, x1.5 below half.
    `PPO` skips it on an update's first minibatch: measured before any step, that KL is
    between the policy and itself (0 in float32, rounding noise under bfloat16), says
    nothing about the step size, and growing on it would raise the rate at every update."""
    new = torch.where(kl > 2.0 * desired, lr / 1.5,
                      torch.where(kl < 0.5 * desired, lr * 1.5, lr))
    return new.clamp(*bounds)


def adapt_beta(beta: Tensor, kl: Tensor, desired: float) -> Tensor:
    """The KL penalty's weight after an update whose batch KL was `kl` (0-d), as Schulman
    et al. 2017 adapt it: x2 above 1.5x the target, /2 below the target / 1.5."""
    return torch.where(kl > 1.5 * desired, beta * 2.0,
                       torch.where(kl < desired / 1.5, beta / 2.0, beta))


def epochs(cfg: PPOConfig, tables: list[Tensor], gens: list[torch.Generator],
           shuffled: Tensor, step: Callable[[Tensor, bool], dict[str, Tensor]]
           ) -> dict[str, Tensor]:
    """The epochs of minibatch SGD over K batches at once (K = 1: one learner; K seeds of a
    stack, agents/seeds.py): each epoch, batch k's rows [B, W] are shuffled by its own
    generator into shuffled[k] ([K, B, W], reused), then `step(minibatch [K, B/M, W],
    adapt)` runs on rows [j B/M, (j+1) B/M) of every batch, j < M = cfg.minibatches;
    `adapt` is False on the update's first minibatch (no step yet, nothing to adapt on).
    Returns the mean over minibatches of each statistic `step` returns (0-d or [K])."""
    rows = tables[0].shape[0]
    size = rows // cfg.minibatches

    def steps():
        for e in range(cfg.epochs):
            for table, gen, out in zip(tables, gens, shuffled):
                perm = torch.randperm(rows, generator=gen, device=table.device)
                torch.index_select(table, 0, perm, out=out)
            for j in range(cfg.minibatches):
                yield step(shuffled[:, j * size:(j + 1) * size], e > 0 or j > 0)

    return mean_stats(steps())


def mean_stats(steps: Iterable[dict[str, Tensor]]) -> dict[str, Tensor]:
    """The mean of each statistic over an update's minibatch steps (one add per step)."""
    sums, n = None, 0
    for stats in steps:
        row = torch.stack(list(stats.values()))  # [S] or [S, K]
        sums = torch.zeros_like(row) if sums is None else sums
        sums += row
        n += 1
    sums /= n
    return dict(zip(stats, sums.unbind()))
