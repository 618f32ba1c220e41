"""trot's full PPO update against a reference written here from the definitions (Schulman et
al. 2017, with rsl_rl's KL-adaptive rate), in float64, on the same batch and the same
minibatch permutations; and proof that the comparison catches plausible bugs.

The reference uses none of trot's loss helpers (surrogate_loss, value_loss,
normalize_advantages, adapt_lr, gaussian_kl) nor torch's optimizer or clip_grad_norm_: only
the networks' forward passes and PopArt's statistics, which are not what is under test.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

import trot.agents.ppo as ppo_mod
from trot.agents.config import PPOConfig
from trot.agents.networks import ActorCritic
from trot.agents.ppo import PPO
from trot.agents.storage import Batch

CPU = torch.device("cpu")
OBS, COBS, ACT, B = 5, 7, 2, 48
STATS = ("loss/policy", "loss/value", "entropy", "kl", "clip_fraction", "grad_norm",
         "learning_rate")
# every part of the update active: asymmetric ratio clip, value clip, batch advantage norm,
# entropy, a KL target the first minibatches undershoot (the rate grows to its upper bound)
# and later ones overshoot, and a gradient clip below the typical gradient norm
CFG = dataclasses.replace(
    PPOConfig(), actor_hidden=(16, 16), critic_hidden=(16, 16), epochs=3, minibatches=4,
    learning_rate=3e-3, clip_low=0.15, clip_high=0.25, value_clip=0.2, value_coef=0.5,
    entropy_coef=0.01, max_grad_norm=0.5, desired_kl=0.002, advantage_norm="batch",
    init_log_std=-0.3)


def _setup(seed: int = 0) -> tuple[ActorCritic, Batch]:
    """A float64 ActorCritic with non-trivial normalizer / PopArt statistics, and an
    off-policy batch (behaviour log-probs and old values moved away from the current
    policy's), so that the ratio clip and the value clip are active from the first step."""
    torch.manual_seed(seed)
    ac = ActorCritic(OBS, COBS, ACT, CFG).double()
    g = torch.Generator().manual_seed(seed + 100)
    rand = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    obs, cobs = rand(B, OBS) * 2.0 + 0.5, rand(B, COBS) * 3.0 - 1.0  # [B, P], [B, C]
    returns = rand(B) * 5.0 + 10.0  # [B]
    ac.update_normalizers(obs, cobs)
    ac.critic.popart.update(returns)
    with torch.no_grad():
        dist = ac.actor.dist(obs)
        actions = dist.mean + dist.stddev * rand(B, ACT)  # [B, A]
        log_probs = dist.log_prob(actions).sum(-1) + 0.4 * rand(B)  # ratios ~ e^(+-0.4)
        values = ac.critic.value(cobs) + 2.0 * rand(B)  # ~0.4 normalized: past the clip
        mean = dist.loc.clone()
    adv = rand(B) * 2.0 + 0.3  # raw: the update normalizes them over the batch
    return ac, Batch.packed(obs, cobs, actions, log_probs, mean, adv, returns, values)


def _normalized(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + 1e-8)


def _losses(ac: ActorCritic, b: dict, adv: torch.Tensor, cfg: PPOConfig) -> tuple:
    """Loss, its statistics and the policy's new means [b, A] for one minibatch."""
    mu, log_std = ac.actor(b["obs"]), ac.actor.log_std  # [b, A], [A]
    z = (b["actions"] - mu) / log_std.exp()
    log_prob = (-0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)  # [b]
    ratio = (log_prob - b["log_probs"]).exp()
    lo, hi = 1.0 - cfg.clip_low, 1.0 + cfg.clip_high
    pg = -torch.min(ratio * adv, ratio.clamp(lo, hi) * adv).mean()  # the pessimistic bound
    clip_frac = ((ratio < lo) | (ratio > hi)).double().mean()
    popart = ac.critic.popart  # the critic regresses normalized targets
    target, old = [(b[k] - popart.mu) / popart.std for k in ("returns", "values")]  # [b]
    pred = ac.critic(b["critic_obs"])
    pred_c = old + (pred - old).clamp(-cfg.value_clip, cfg.value_clip)
    vf = torch.max((pred - target) ** 2, (pred_c - target) ** 2).mean()
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum()  # the same for every row
    loss = pg + cfg.value_coef * vf - cfg.entropy_coef * entropy
    return loss, [pg, vf, entropy, clip_frac], mu


def _reference_update(ac: ActorCritic, batch: Batch, cfg: PPOConfig,
                      perms: list[torch.Tensor]) -> dict[str, float]:
    """One PPO update, a plain loop: `perms` holds one permutation of the batch per epoch."""
    cols = {k: getattr(batch, k) for k in ("obs", "critic_obs", "actions", "log_probs",
                                           "returns", "values")}  # each [B, ...]
    adv_all = batch.advantages.clone()  # [B]
    if cfg.advantage_norm == "batch":  # once, over all B rows, before the first epoch
        adv_all = _normalized(adv_all)
    old_mu, old_log_std = batch.action_mean.clone(), ac.actor.log_std.detach().clone()
    params = list(ac.parameters())
    m1 = [torch.zeros_like(p) for p in params]  # Adam's moments
    m2 = [torch.zeros_like(p) for p in params]
    lr, lr_lo, lr_hi = cfg.learning_rate, 1e-5, 1e-2
    size, rows, step = len(batch) // cfg.minibatches, [], 0
    for perm in perms:
        for k in range(cfg.minibatches):
            idx = perm[k * size:(k + 1) * size]
            b = {name: col[idx] for name, col in cols.items()}
            adv = _normalized(adv_all[idx]) if cfg.advantage_norm == "minibatch" \
                else adv_all[idx]
            loss, stats, mu = _losses(ac, b, adv, cfg)
            # KL(pre-update policy || now), per row summed over actions, then averaged
            new_log_std = ac.actor.log_std.detach()
            kl = (new_log_std - old_log_std + ((2 * old_log_std).exp() + (old_mu[idx] - mu)
                  .detach() ** 2) / (2 * (2 * new_log_std).exp()) - 0.5).sum(-1).mean().item()
            if step > 0 and kl > 2 * cfg.desired_kl:  # the new rate is the one this step uses
                lr = max(lr / 1.5, lr_lo)
            elif step > 0 and kl < cfg.desired_kl / 2:  # not before the update's first step
                lr = min(lr * 1.5, lr_hi)
            grads = torch.autograd.grad(loss, params)
            norm = math.sqrt(sum(g.square().sum().item() for g in grads))
            scale = min(1.0, cfg.max_grad_norm / (norm + 1e-6))
            step += 1
            with torch.no_grad():
                for p, g, a, v in zip(params, grads, m1, m2):
                    g = g * scale
                    a.mul_(0.9).add_(0.1 * g)
                    v.mul_(0.999).add_(0.001 * g * g)
                    p -= lr * (a / (1 - 0.9 ** step)) / ((v / (1 - 0.999 ** step)).sqrt() + 1e-8)
            rows.append([s.item() for s in stats[:3]] + [kl, stats[3].item(), norm, lr])
    return {name: sum(col) / len(rows) for name, col in zip(STATS, zip(*rows))}


def _compare(cfg: PPOConfig = CFG, seed: int = 0
             ) -> tuple[float, dict[str, float], dict[str, float]]:
    """Parameter difference after one update of trot and of the reference, and both stats."""
    ac, batch = _setup(seed)
    ref = copy.deepcopy(ac)
    ref_batch = Batch.packed(*(f.clone() for f in batch.fields()))  # trot writes into its own
    gen = torch.Generator().manual_seed(seed)  # trot draws randperm(B) once per epoch
    perms = [torch.randperm(B, generator=gen) for _ in range(cfg.epochs)]
    stats = PPO(ac, cfg, CPU).update(batch, torch.Generator().manual_seed(seed))
    want = _reference_update(ref, ref_batch, cfg, perms)
    sa, sb = ac.state_dict(), ref.state_dict()
    diff = max((sa[k] - sb[k]).abs().max().item() for k in sa)
    return diff, {k: v.item() for k, v in stats.items()}, want


@pytest.mark.parametrize("adv_norm", ["batch", "minibatch", "none"])
def test_ppo_update_matches_the_reference_in_float64(adv_norm):
    diff, got, want = _compare(dataclasses.replace(CFG, advantage_norm=adv_norm))
    assert list(got) == list(STATS)  # the logged names, in their order
    assert diff <= 1e-6
    for name in STATS:
        assert abs(got[name] - want[name]) <= 1e-6, (name, got[name], want[name])
    # nothing was vacuous: clipped samples, a clipped gradient, and the rate moved
    assert want["clip_fraction"] > 0.1 and want["grad_norm"] > CFG.max_grad_norm
    assert want["learning_rate"] != CFG.learning_rate


# ---------------------------------------------------------------------- the test's power
_TROT_SURROGATE = ppo_mod.surrogate_loss  # wrapped by a bug below, never by the reference


def _optimistic_clip(log_probs, old_log_probs, adv, clip, clip_low, clip_high):
    """max instead of min: the optimistic bound, whose gradient never vanishes."""
    ratio = (log_probs - old_log_probs).exp()
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    frac = ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)).to(ratio.dtype).mean()
    return -torch.maximum(ratio * adv, clipped * adv).mean(), frac


def _swapped_clip_range(log_probs, old_log_probs, adv, clip, clip_low, clip_high):
    """clip_low and clip_high exchanged (unseen with the usual symmetric 0.2)."""
    return _TROT_SURROGATE(log_probs, old_log_probs, adv, clip, clip_high, clip_low)


def _value_clip_wrong_side(pred, old, target, clip):
    """min instead of max: the optimistic value loss, which lets the critic run."""
    pred_c = old + (pred - old).clamp(-clip, clip)
    return torch.minimum((pred - target).square(), (pred_c - target).square()).mean()


def _inverted_kl_rule(lr, kl, desired, bounds):
    """The adaptive rate's branches exchanged: faster when the KL is too large."""
    return torch.where(kl > 2.0 * desired, lr * 1.5, torch.where(
        kl < 0.5 * desired, lr / 1.5, lr)).clamp(*bounds)


def _adapts_on_first_minibatch(monkeypatch):
    """The rate steered by the update's first minibatch too, whose KL (before any step) is
    the policy's against itself (rsl_rl does this)."""
    original = PPO._minibatch
    monkeypatch.setattr(PPO, "_minibatch", lambda self, b, seq, old_log_std, adapt=True:
                        original(self, b, seq, old_log_std, adapt=True))


def _per_minibatch_advantages(monkeypatch):
    """Advantages normalized per minibatch where the config says per batch."""
    original = PPO._minibatch

    def minibatch(self, b, seq, old_log_std, adapt=True):
        adv = b.advantages
        return original(self, dataclasses.replace(
            b, advantages=(adv - adv.mean()) / (adv.std() + 1e-8)), seq, old_log_std, adapt)
    monkeypatch.setattr(PPO, "_minibatch", minibatch)


BUGS = {
    "clip: max instead of min": ("surrogate_loss", _optimistic_clip),
    "clip: low and high swapped": ("surrogate_loss", _swapped_clip_range),
    "value clip: min instead of max": ("value_loss", _value_clip_wrong_side),
    "kl rule inverted": ("adapt_lr", _inverted_kl_rule),
    "kl rule on the first minibatch": (None, _adapts_on_first_minibatch),
    "advantages per minibatch": (None, _per_minibatch_advantages),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_reference_comparison_catches(bug, monkeypatch):
    name, variant = BUGS[bug]
    if name is None:
        variant(monkeypatch)
    else:
        monkeypatch.setattr(ppo_mod, name, variant)
    diff, _, _ = _compare()
    assert diff > 1e-6, f"{bug}: trot and the reference still agree ({diff:.2e})"
