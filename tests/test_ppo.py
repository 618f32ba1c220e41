"""The PPO update (`trot.agents.ppo`): the A2C special case against an independently written
A2C step, the clipped surrogate and value losses, the KL-adaptive learning rate, and config
validation. The full PPO update against a reference: test_ppo_reference.py."""

from __future__ import annotations

import copy
import math
import dataclasses

import pytest
import torch

from trot.agents.config import PPOConfig
from trot.agents.networks import ActorCritic, Linear, mlp
from trot.agents.ppo import PPO
from trot.agents.sgd import adapt_lr, surrogate_loss, value_loss
from trot.agents.storage import Batch
from trot.agents.train_config import TrainConfig

CPU = torch.device("cpu")
OBS, COBS, ACT, B = 5, 7, 2, 48


def _cfg(**kw) -> PPOConfig:
    base = dict(actor_hidden=(16, 16), critic_hidden=(16, 16), desired_kl=0.0,
                advantage_norm="none", value_coef=0.5, entropy_coef=0.01, max_grad_norm=1.0,
                learning_rate=3e-3, init_log_std=-0.3)
    base.update(kw)
    return dataclasses.replace(PPOConfig(), **base)


def _setup(cfg: PPOConfig, seed: int = 0) -> tuple[ActorCritic, Batch]:
    """A small ActorCritic with non-trivial normalizer / PopArt statistics and an on-policy
    batch: log-probs and means come from the policy itself."""
    torch.manual_seed(seed)
    ac = ActorCritic(OBS, COBS, ACT, cfg)
    g = torch.Generator().manual_seed(seed + 100)
    obs = torch.randn(B, OBS, generator=g) * 2.0 + 0.5
    cobs = torch.randn(B, COBS, generator=g) * 3.0 - 1.0
    returns = torch.randn(B, generator=g) * 5.0 + 10.0
    ac.update_normalizers(obs, cobs)
    if ac.critic.popart is not None:
        ac.critic.popart.update(returns)
    with torch.no_grad():
        dist = ac.actor.dist(obs)
        actions = dist.mean + dist.stddev * torch.randn(B, ACT, generator=g)
        log_probs = dist.log_prob(actions).sum(-1)
        mean = dist.loc.clone()
        values = ac.critic.value(cobs) + 0.1 * torch.randn(B, generator=g)
    adv = torch.randn(B, generator=g) * 2.0 + 0.3
    return ac, Batch(obs, cobs, actions, log_probs, mean, adv, returns, values)


def _reference_a2c_step(ac: ActorCritic, batch: Batch, cfg: PPOConfig) -> None:
    """One A2C step written from the textbook, not from trot's PPO code."""
    opt = torch.optim.Adam(ac.parameters(), lr=cfg.learning_rate)
    adv = batch.advantages
    if cfg.advantage_norm != "none":  # one minibatch = the whole batch
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    mean = ac.actor(batch.obs)
    std = ac.actor.log_std.exp()
    dist = torch.distributions.Normal(mean, std)
    log_prob = dist.log_prob(batch.actions).sum(-1)
    entropy = dist.entropy().sum(-1).mean()
    popart = ac.critic.popart
    target = (batch.returns - popart.mu) / popart.std if popart is not None else batch.returns
    v = ac.critic(batch.critic_obs)
    vf = torch.nn.functional.mse_loss(v, target.float())
    loss = -(log_prob * adv).mean() + cfg.value_coef * vf - cfg.entropy_coef * entropy
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(ac.parameters(), cfg.max_grad_norm)
    opt.step()


def _max_param_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max((sa[k].double() - sb[k].double()).abs().max().item() for k in sa)


@pytest.mark.parametrize("adv_norm", ["none", "minibatch"])
@pytest.mark.parametrize("max_grad_norm", [1e3, 0.05])  # clip inactive / active
def test_a2c_update_matches_reference_a2c_step(adv_norm, max_grad_norm):
    cfg = _cfg(advantage_norm=adv_norm, max_grad_norm=max_grad_norm)
    ac, batch = _setup(cfg)
    ref = copy.deepcopy(ac)
    init = copy.deepcopy(ac)

    stats = PPO(ac, cfg.as_a2c(), CPU).update(batch, torch.Generator().manual_seed(0))
    _reference_a2c_step(ref, batch, cfg)

    assert _max_param_diff(ac, ref) <= 1e-6
    assert _max_param_diff(ac, init) > 1e-4  # the step moved the weights
    # Adam's first step is nearly sign(grad) * lr, blind to the scale of each loss term, so
    # compare the (clipped) gradients the step used as well.
    for (name, p), q in zip(ac.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7, msg=name)
    # the update's own diagnostics are the on-policy ones
    assert stats["kl"].item() == pytest.approx(0.0, abs=1e-10)
    assert stats["clip_fraction"].item() == 0.0
    assert stats["learning_rate"].item() == pytest.approx(cfg.learning_rate)
    if max_grad_norm < 1.0:
        assert stats["grad_norm"].item() > max_grad_norm  # clipping really was active


def test_ppo_one_epoch_one_minibatch_no_clip_is_the_a2c_path():
    cfg = _cfg(entropy_coef=0.0)
    ac_a, batch = _setup(cfg)
    ac_b = copy.deepcopy(ac_a)
    PPO(ac_a, cfg.as_a2c(), CPU).update(batch, torch.Generator().manual_seed(3))
    plain = dataclasses.replace(cfg, epochs=1, minibatches=1, clip=False)
    PPO(ac_b, plain, CPU).update(batch, torch.Generator().manual_seed(3))
    sa, sb = ac_a.state_dict(), ac_b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a2c_identity_is_not_vacuous():
    """Clipped PPO over several epochs/minibatches must end somewhere else."""
    cfg = _cfg()
    ac_a, batch = _setup(cfg)
    ac_b = copy.deepcopy(ac_a)
    PPO(ac_a, cfg.as_a2c(), CPU).update(batch, torch.Generator().manual_seed(0))
    ppo = dataclasses.replace(cfg, epochs=4, minibatches=4, clip=True)
    stats = PPO(ac_b, ppo, CPU).update(batch, torch.Generator().manual_seed(0))
    assert _max_param_diff(ac_a, ac_b) > 1e-4
    assert stats["kl"].item() > 0.0


# ---------------------------------------------------------------------- surrogate loss
@pytest.mark.parametrize("clip_low,clip_high", [(0.2, 0.2), (0.1, 0.3), (0.3, 0.05)])
def test_surrogate_gradient_zero_on_clipped_side(clip_low, clip_high):
    lo, hi = 1.0 - clip_low, 1.0 + clip_high
    # (ratio, advantage, clipped side?)  The clipped side: A > 0 and r > hi, or A < 0 and r < lo
    cases = [
        (hi + 0.2, 1.5, True), (lo - 0.05, -2.0, True),  # pessimistic bound is the clip
        (lo - 0.05, 1.5, False), (hi + 0.2, -2.0, False),  # outside, but not clipped away
        (1.0, 0.7, False), (1.0 + clip_high / 2, -0.4, False), (1.0 - clip_low / 2, 3.0, False),
    ]
    ratios = torch.tensor([c[0] for c in cases], dtype=torch.float64)
    adv = torch.tensor([c[1] for c in cases], dtype=torch.float64)
    old = torch.tensor([-1.0, 0.5, -0.3, 2.0, 0.0, -4.0, 1.0], dtype=torch.float64)
    lp = (old + ratios.log()).requires_grad_(True)
    loss, frac = surrogate_loss(lp, old, adv, True, clip_low, clip_high)
    loss.backward()
    n = len(cases)
    for i, (r, a, clipped) in enumerate(cases):
        expected = 0.0 if clipped else -r * a / n  # d(-r A / n)/d log pi = -r A / n
        assert lp.grad[i].item() == pytest.approx(expected, abs=1e-12), (i, r, a)
    outside = sum(1 for r, _, _ in cases if r < lo or r > hi)
    assert frac.item() == pytest.approx(outside / n)
    # the loss value itself: mean of -min(rA, clip(r)A)
    want = -sum(min(r * a, min(max(r, lo), hi) * a) for r, a, _ in cases) / n
    assert loss.item() == pytest.approx(want, rel=1e-12)


def test_surrogate_without_clip_is_the_policy_gradient():
    old = torch.tensor([0.1, -0.2, 0.3])
    lp = torch.tensor([0.5, -0.9, 0.3], requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 0.5])
    loss, frac = surrogate_loss(lp, old, adv, False, 0.2, 0.2)
    loss.backward()
    r = (lp - old).exp().detach()
    torch.testing.assert_close(lp.grad, -r * adv / 3)
    assert frac.item() == 0.0


# ---------------------------------------------------------------------- value loss
def test_value_loss_clipping_hand_computed():
    pred = torch.tensor([1.0, 0.0, 2.0, 0.55], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([0.5, 0.5, 2.0, 0.5], dtype=torch.float64)
    target = torch.tensor([2.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    # clip 0.2:  i0 pred_c 0.7 -> max(1, 1.69) = 1.69 (clipped term, constant in pred)
    #            i1 pred_c 0.3 -> max(0, 0.09) = 0.09 (clipped term, constant in pred)
    #            i2 pred_c 2.0 -> max(4, 4)    = 4    (both terms equal)
    #            i3 pred_c 0.55 -> 0.2025             (inside the clip)
    loss = value_loss(pred, old, target, 0.2)
    assert loss.item() == pytest.approx((1.69 + 0.09 + 4.0 + 0.2025) / 4, rel=1e-12)
    loss.backward()
    g = pred.grad
    assert g[0].item() == 0.0 and g[1].item() == 0.0
    assert g[3].item() == pytest.approx(2 * (0.55 - 1.0) / 4, rel=1e-12)
    # clip 0: plain MSE
    assert value_loss(pred, old, target, 0.0).item() == pytest.approx(
        (1.0 + 0.0 + 4.0 + 0.2025) / 4, rel=1e-12)


# ---------------------------------------------------------------------- adaptive lr
@pytest.mark.parametrize("kl,factor", [(0.05, 1 / 1.5), (0.0201, 1 / 1.5), (0.02, 1.0),
                                       (0.01, 1.0), (0.005, 1.0), (0.0049, 1.5), (1e-9, 1.5),
                                       (0.0, 1.5)])
def test_adapt_lr_rule(kl, factor):
    lr = torch.tensor(1e-3)
    new = adapt_lr(lr, torch.tensor(kl), 0.01, (1e-5, 1e-2))
    assert new.item() == pytest.approx(1e-3 * factor, rel=1e-6)


def test_adapt_lr_clamped_to_bounds():
    lo, hi = 1e-5, 1e-2
    assert adapt_lr(torch.tensor(9e-3), torch.tensor(1e-4), 0.01, (lo, hi)).item() == \
        pytest.approx(hi)
    assert adapt_lr(torch.tensor(1.2e-5), torch.tensor(1.0), 0.01, (lo, hi)).item() == \
        pytest.approx(lo)
    # repeated halving/growing never leaves the bounds
    lr = torch.tensor(1e-3)
    for _ in range(50):
        lr = adapt_lr(lr, torch.tensor(1.0), 0.01, (lo, hi))
    assert lr.item() == pytest.approx(lo)
    for _ in range(50):
        lr = adapt_lr(lr, torch.tensor(1e-4), 0.01, (lo, hi))
    assert lr.item() == pytest.approx(hi)


@pytest.mark.parametrize("shift, factor", [(0.0, 1.5), (5.0, 1 / 1.5)])
def test_update_adapts_lr_from_its_second_minibatch(shift, factor):
    """Two minibatches: the first steps at the configured rate, unsteered; the second's KL
    against the behaviour means (small on-policy after one step: lr x 1.5; huge with them
    moved 5 away: lr / 1.5) sets the rate the optimizer reads."""
    cfg = _cfg(desired_kl=0.01, epochs=1, minibatches=2, learning_rate=1e-3)
    ac, batch = _setup(cfg)
    batch = dataclasses.replace(batch, action_mean=batch.action_mean + shift)
    algo = PPO(ac, cfg, CPU)
    algo.update(batch, torch.Generator().manual_seed(0))
    assert algo.lr.item() == pytest.approx(1e-3 * factor, rel=1e-6)
    assert algo.optimizer.param_groups[0]["lr"] is algo.lr


@pytest.mark.parametrize("update_dtype, shift", [("float32", 5.0), ("bfloat16", 0.0)])
def test_first_minibatch_never_steers_the_rate(update_dtype, shift):
    """An update's first minibatch measures its KL before any step: the policy against
    itself, which under bfloat16 is rounding noise above 0 (before 2026-12-04 that grew the
    rate x1.5 at every update); with the behaviour means moved 5 away it is huge. Neither
    may change the rate, and Adam's first step moves each weight by the configured lr."""
    # a narrow policy (std e^-4) makes bfloat16's mean rounding visible in a float32 KL
    cfg = _cfg(desired_kl=0.01, epochs=1, minibatches=1, learning_rate=1e-3,
               update_dtype=update_dtype, init_log_std=-4.0)
    ac, batch = _setup(cfg)
    batch = dataclasses.replace(batch, action_mean=batch.action_mean + shift)
    algo = PPO(ac, cfg, CPU)
    before = ac.actor.mean.weight.detach().clone()
    stats = algo.update(batch, torch.Generator().manual_seed(0))
    assert stats["kl"].item() > 0  # there was a KL to (wrongly) act on
    assert algo.lr.item() == pytest.approx(1e-3, rel=1e-6)
    step = (ac.actor.mean.weight.detach() - before).abs()  # [A, H]
    moved = step[step > 0]
    # Adam's first update is lr * g / (|g| + eps): lr for every weight with a gradient
    assert moved.numel() > 0 and torch.allclose(moved, torch.full_like(moved, 1e-3),
                                                rtol=1e-3)


# ---------------------------------------------------------------------- validation
def test_validate_rejects_non_positive_learning_rate():
    for lr in (0.0, -1.0):
        with pytest.raises(ValueError, match="learning_rate must be > 0"):
            dataclasses.replace(PPOConfig(), learning_rate=lr).validate(64)
        with pytest.raises(ValueError, match="learning_rate"):
            TrainConfig(num_envs=64, agent=dataclasses.replace(PPOConfig(),
                                                               learning_rate=lr)).validate()


def test_validate_rejects_indivisible_batch():
    cfg = dataclasses.replace(PPOConfig(), rollout_steps=8, minibatches=7)
    with pytest.raises(ValueError) as e:
        cfg.validate(64)
    msg = str(e.value)
    assert "512" in msg and "7" in msg and "minibatches" in msg
    with pytest.raises(ValueError, match="512"):
        TrainConfig(num_envs=64, agent=cfg).validate()
    # a2c uses the whole batch as one minibatch: always divisible
    TrainConfig(num_envs=64, agent=cfg, algo="a2c").validate()
    dataclasses.replace(cfg, minibatches=8).validate(64)


def test_validate_rejects_unknown_algo():
    with pytest.raises(ValueError) as e:
        TrainConfig(algo="foo").validate()  # type: ignore[arg-type]
    msg = str(e.value)
    assert "foo" in msg and "ppo" in msg and "a2c" in msg


def test_validate_accepts_defaults():
    PPOConfig().validate(1024)
    TrainConfig().validate()
    TrainConfig(algo="a2c").validate()


@pytest.mark.parametrize("in_features", [5, 48])  # the narrow-input path, and nn.Linear's
def test_linear_gradients_match_plain_linear(in_features):
    torch.manual_seed(0)
    ours = Linear(in_features, 64)
    ref = torch.nn.Linear(in_features, 64)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(300, in_features, dtype=torch.float64)
    ours, ref = ours.double(), ref.double()
    grads = []
    for layer in (ours, ref):
        xi = x.clone().requires_grad_(True)
        (layer(xi).sin().sum()).backward()
        grads.append((xi.grad, layer.weight.grad, layer.bias.grad))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    with torch.no_grad():  # inference and export: the plain graph, same numbers
        torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=0)


def test_sampled_log_probs_are_the_gaussian_log_density():
    torch.manual_seed(0)
    cfg = dataclasses.replace(PPOConfig(), init_log_std=-0.3)
    ac = ActorCritic(7, 7, 3, cfg)
    with torch.no_grad():
        ac.actor.log_std.copy_(torch.tensor([-0.5, 0.0, 0.4]))
        action, log_prob, mean, _ = ac.actor.sample(torch.randn(500, 7))
        dist = ac.actor.dist(torch.zeros(1, 7))  # only for its std
    std = dist.scale[0].double()
    z = (action.double() - mean.double()) / std
    want = (-0.5 * z.square() - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
    torch.testing.assert_close(log_prob.double(), want, rtol=1e-5, atol=1e-5)
    assert 0.8 < z.std().item() < 1.2  # the noise has the policy's std


def test_packed_batch_gathers_and_slices_like_its_fields():
    g = torch.Generator().manual_seed(0)
    parts = [torch.randn(40, *s, generator=g) for s in ((6,), (9,), (2,), (), (2,), (), (), ())]
    b = Batch.packed(*parts)
    idx = torch.randperm(40, generator=g)
    for got, part in zip(b[idx].fields(), parts):
        assert torch.equal(got, part[idx])
    for got, part in zip(b[idx][5:17].fields(), parts):
        assert torch.equal(got, part[idx][5:17])
    assert len(b[idx][5:17]) == 12


def test_gather_into_a_reused_table_matches_the_fields():
    """The update's per-epoch shuffle writes into one reused table. Bugs it catches: rows
    gathered into a buffer of another width (stale columns), or a new table every call."""
    g = torch.Generator().manual_seed(1)
    parts = [torch.randn(40, *s, generator=g) for s in ((6,), (9,), (2,), (), (2,), (), (), ())]
    b = Batch.packed(*parts)
    first = b.gather(torch.randperm(40, generator=g), None)
    idx = torch.randperm(40, generator=g)
    again = b.gather(idx, first.table)
    assert again.table.data_ptr() == first.table.data_ptr()
    for got, part in zip(again.fields(), parts):
        assert torch.equal(got, part[idx])
    wrong = torch.full((40, 3), float("nan"))  # another batch's width: not reused
    for got, part in zip(b.gather(idx, wrong).fields(), parts):
        assert torch.equal(got, part[idx])


@pytest.mark.parametrize("activation", ["elu", "relu"])
def test_in_place_activations_have_the_plain_gradients(activation):
    """mlp's ELU and ReLU run in place, their backward reading their output. Against the
    out-of-place modules: the same values and gradients (float64; a wrong in-place op
    either raises in autograd or changes these)."""
    torch.manual_seed(0)
    ours = mlp(5, (32, 16), activation).double()
    plain = {"elu": torch.nn.ELU, "relu": torch.nn.ReLU}[activation]
    ref = torch.nn.Sequential(*(plain() if isinstance(m, plain) else copy.deepcopy(m)
                                for m in ours)).double()
    x = torch.randn(200, 5, dtype=torch.float64)
    grads = []
    for net in (ours, ref):
        xi = x.clone().requires_grad_(True)
        out = net(xi)
        out.sin().sum().backward()
        grads.append((out.detach(), xi.grad, *(p.grad for p in net.parameters())))
    for a, r in zip(*grads):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)


def test_kl_under_actor_lag_is_against_the_policy_before_this_update():
    """A batch from a policy K updates old (its means moved 5 away): the adaptive rate must
    see the KL between this update's start and now (0 before the first step: lr kept),
    not the distance to the behaviour policy (huge: lr / 1.5, to the floor over time)."""
    cfg = _cfg(desired_kl=0.01, epochs=1, minibatches=1, learning_rate=1e-3)
    ac, batch = _setup(cfg)
    batch = Batch.packed(batch.obs, batch.critic_obs, batch.actions, batch.log_probs,
                         batch.action_mean + 5.0, batch.advantages, batch.returns,
                         batch.values)
    with torch.no_grad():
        before = ac.actor(batch.obs).clone()
    stats = PPO(ac, cfg, CPU).update(batch, torch.Generator().manual_seed(0), lagged=True)
    assert stats["kl"].item() == 0.0
    assert stats["learning_rate"].item() == pytest.approx(1e-3, rel=1e-6)
    assert torch.equal(batch.action_mean, before)  # the reference the KL used
