"""TRPO (agents/trpo.py) and PPO's KL penalty (agents/ppo.py, agents/sgd.py): the natural
step against a direct solve with the Fisher matrix built from its closed form, the line
search's two conditions checked from outside, a rejected step, the penalty's weight, and
a logged run whose every accepted step holds the KL."""

from __future__ import annotations

import csv
import dataclasses

import pytest
import torch

from trot.agents.config import PPOConfig
from trot.agents.networks import Actor, ActorCritic
from trot.agents.ppo import PPO
from trot.agents.sgd import adapt_beta
from trot.agents.storage import Batch
from trot.agents.trpo import conjugate_gradient, fisher_product, natural_policy_step

OBS, ACT, B = 3, 2, 40


def _cfg(**kw) -> PPOConfig:
    return dataclasses.replace(PPOConfig(actor_hidden=(6,), critic_hidden=(6,),
                                         init_log_std=-0.4, advantage_norm="none"), **kw)


def _batch(actor: Actor, seed: int = 0, adv_scale: float = 1.0) -> Batch:
    """An on-policy batch of the actor's own actions, with random advantages."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(B, OBS, generator=g, dtype=torch.float64) * 1.5
    with torch.no_grad():
        dist = actor.dist(obs)
        actions = dist.mean + dist.stddev * torch.randn(B, ACT, generator=g,
                                                        dtype=torch.float64)
        log_probs = dist.log_prob(actions).sum(-1)
        mean = dist.mean.clone()
    adv = torch.randn(B, generator=g, dtype=torch.float64) * adv_scale
    z = torch.zeros(B, dtype=torch.float64)
    return Batch(obs, obs, actions, log_probs, mean, adv, z, z)


def _actor(seed: int = 0, **kw) -> Actor:
    torch.manual_seed(seed)
    return Actor(OBS, ACT, _cfg(obs_norm=False, **kw)).double()


def _fisher(actor: Actor, obs: torch.Tensor) -> torch.Tensor:
    """The Gaussian policy's Fisher matrix [D, D] from its closed form, not from a KL:
    mean over samples of J^T diag(1/sigma^2) J for the mean's parameters, 2 I for the
    log-std's (their cross terms vanish)."""
    names, params = zip(*actor.named_parameters())
    sizes = [p.numel() for p in params]
    theta = torch.cat([p.detach().reshape(-1) for p in params])

    def means(th: torch.Tensor) -> torch.Tensor:  # [D] -> [B * A]
        parts = dict(zip(names, (c.view_as(p) for c, p in zip(th.split(sizes), params))))
        return torch.func.functional_call(actor, parts, (obs,)).reshape(-1)

    jac = torch.autograd.functional.jacobian(means, theta).view(B, ACT, -1)  # [B, A, D]
    inv_var = (-2 * actor.log_std.detach()).exp()  # [A]
    f = torch.einsum("bad,a,bae->de", jac, inv_var, jac) / B
    at = sum(sizes[:names.index("log_std")])
    f[at:at + ACT, at:at + ACT] += 2.0 * torch.eye(ACT, dtype=f.dtype)
    return f


def test_natural_direction_matches_a_direct_solve_with_the_fisher_matrix():
    """Catches a Fisher-vector product that is not the KL's Hessian (a missing damping,
    a first-order product, a wrong sign) and a conjugate gradient that does not solve."""
    actor = _actor()
    b = _batch(actor)
    d = sum(p.numel() for p in actor.parameters())
    damping = 0.1
    f = _fisher(actor, b.obs) + damping * torch.eye(d, dtype=torch.float64)
    fvp = fisher_product(actor, b, actor.log_std.detach().clone(), damping)
    v = torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(fvp(v), f @ v, rtol=1e-9, atol=1e-10)
    x = conjugate_gradient(fvp, v, iters=3 * d)
    torch.testing.assert_close(x, torch.linalg.solve(f, v), rtol=1e-6, atol=1e-8)


def _surrogate_and_kl(actor: Actor, b: Batch, old_std: torch.Tensor) -> tuple[float, float]:
    """Measured from outside with torch.distributions: E[pi/mu A] and mean KL(old||new)."""
    with torch.no_grad():
        new = actor.dist(b.obs)
        old = torch.distributions.Normal(b.action_mean, old_std.expand_as(b.action_mean))
        ratio = (new.log_prob(b.actions).sum(-1) - b.log_probs).exp()
        kl = torch.distributions.kl_divergence(old, new).sum(-1).mean()
    return float((ratio * b.advantages).mean()), float(kl)


@pytest.mark.parametrize("delta", [0.01, 0.001])
def test_accepted_step_improves_the_surrogate_within_the_kl(delta: float):
    """Catches a line search that accepts a step beyond delta or one that loses."""
    actor = _actor()
    b = _batch(actor)
    old_std = actor.log_std.detach().exp().clone()
    before, _ = _surrogate_and_kl(actor, b, old_std)
    stats = natural_policy_step(actor, b, actor.log_std.detach().clone(),
                                _cfg(desired_kl=delta, cg_iters=20))
    after, kl = _surrogate_and_kl(actor, b, old_std)
    assert 0 < kl <= delta and after > before
    assert float(stats["kl"]) == pytest.approx(kl, rel=1e-9)
    assert float(stats["surrogate_gain"]) == pytest.approx(after - before, rel=1e-9)
    assert kl > delta / 4 ** (float(stats["backtracks"]) + 1)  # not needlessly short


def test_rejected_step_leaves_the_parameters_unchanged():
    """With no advantage no step can improve the surrogate: the search must reject them
    all and leave every parameter bitwise as it was. Catches a search that applies its
    last (smallest) candidate when none passed."""
    actor = _actor()
    b = _batch(actor, adv_scale=0.0)
    before = [p.detach().clone() for p in actor.parameters()]
    stats = natural_policy_step(actor, b, actor.log_std.detach().clone(),
                                _cfg(backtracks=4))
    for p, q in zip(actor.parameters(), before):
        assert torch.equal(p, q)
    assert float(stats["backtracks"]) == 4 and float(stats["kl"]) == 0.0


def test_kl_penalty_weight_doubles_and_halves_at_the_paper_thresholds():
    """Catches thresholds swapped or set at 2x and /2 (rsl_rl's learning-rate rule)."""
    beta, d = torch.tensor(1.0), 0.01
    for kl, want in [(0.0151, 2.0), (0.0149, 1.0), (0.0067, 1.0), (0.0066, 0.5)]:
        assert float(adapt_beta(beta, torch.tensor(kl), d)) == want, kl


def test_kl_penalty_update_moves_beta_by_the_batch_kl():
    """A PPO update under the penalty: beta doubles after an update whose KL, measured
    from outside over the batch, is above 1.5x the target, and the penalty enters the
    loss (a larger beta gives a smaller KL from the same start). Catches a beta that is
    never adapted, adapted on a stale KL, or never reaches the loss."""
    def run(beta0: float) -> tuple[float, float]:
        cfg = _cfg(kl_penalty=beta0, desired_kl=1e-4, epochs=4, minibatches=2,
                   learning_rate=3e-3, clip=False, obs_norm=False, popart=False)
        torch.manual_seed(0)
        ac = ActorCritic(OBS, OBS, ACT, cfg).double()
        b = _batch(ac.actor, adv_scale=3.0)
        old_std = ac.actor.log_std.detach().exp().clone()
        algo = PPO(ac, cfg, torch.device("cpu"))
        stats = algo.update(b, torch.Generator().manual_seed(0))
        _, kl = _surrogate_and_kl(ac.actor, b, old_std)
        assert kl > 1.5e-4 and float(stats["kl_beta"]) == 2 * beta0
        return kl, float(algo.beta)

    small, big = run(0.1), run(100.0)
    assert big[0] < small[0]


@torch.no_grad()
def test_normalizer_move_kept_out_of_the_policy_under_the_trust_region():
    """keep_policy: after a second batch moves the observation statistics, the actor's
    means on fresh inputs are those measured before the move; without it they are not (so
    the test can fail). The first fold sets the scale and is not absorbed. Catches an
    absorbed shift with the wrong sign or scale, or one that freezes the first fold."""
    torch.manual_seed(0)
    ac = ActorCritic(OBS, OBS, ACT, _cfg(actor_hidden=(8, 8)))
    g = torch.Generator().manual_seed(3)
    x0 = torch.randn(256, OBS, generator=g) * 3.0 + 2.0
    probe = torch.randn(100, OBS, generator=g) * 2.0 + 1.0
    raw = ac.actor(probe)
    ac.update_normalizers(x0, x0, keep_policy=True)
    first = ac.actor(probe)
    moved = lambda a, b: float((a - b).abs().max()) > 0.1 * float(b.abs().max())
    assert moved(first, raw)  # the first fold normalizes
    x1 = torch.randn(256, OBS, generator=g) * 0.5 - 1.0
    plain = ActorCritic(OBS, OBS, ACT, _cfg(actor_hidden=(8, 8)))
    plain.load_state_dict(ac.state_dict())
    ac.update_normalizers(x1, x1, keep_policy=True)
    plain.update_normalizers(x1, x1)
    torch.testing.assert_close(ac.actor(probe), first, rtol=1e-5, atol=1e-5)
    assert moved(plain.actor(probe), first)


def test_trpo_refuses_what_it_cannot_honour():
    """Catches a setting --algo trpo would ignore: a recurrent actor, a shared torso,
    stacked seeds, several processes."""
    from trot.cli_train import parse_train
    for flags, named in [(["--agent.rnn", "gru"], "--algo trpo does not take agent.rnn"),
                         (["--agent.share-torso"], "agent.share_torso True"),
                         (["--nproc", "2"], "mode.nproc 2"),
                         (["--seeds", "0", "1"], "does not take algo 'trpo'")]:
        with pytest.raises(ValueError, match=named):
            parse_train(["cartpole-balance", "--algo", "trpo", *flags]).validate()


def test_logged_trpo_run_holds_the_kl_on_every_iteration(tmp_path):
    """`trot train --algo trpo` on cartpole: every logged iteration's accepted step has a
    KL <= desired_kl, steps are taken, and the return grows. Catches a KL bound that holds
    in the unit case but not in a run (a stale reference mean, a normalizer in between)."""
    from trot.cli import main as cli_main
    delta = 0.005
    run = tmp_path / "trpo"
    assert cli_main(["train", "cartpole-balance", "--algo", "trpo", "--num-envs", "128",
                     "--max-env-steps", "60000", "--agent.desired-kl", str(delta),
                     "--run-dir", str(run), "--no-export"]) == 0
    rows = list(csv.DictReader((run / "metrics.csv").read_text().splitlines()))
    kls = [float(r["kl"]) for r in rows]
    assert len(rows) > 20 and max(kls) <= delta and sum(k > 0 for k in kls) > len(kls) / 2
    assert all(0 <= float(r["backtracks"]) <= PPOConfig().backtracks for r in rows)
    ret = [float(r["episode_return"]) for r in rows if r["episode_return"]]
    assert sum(ret[-5:]) / 5 > 2 * sum(ret[:5]) / 5


@pytest.mark.parametrize("flags", [["--algo", "trpo"], ["--agent.kl-penalty", "0.3"]])
def test_resume_continues_bitwise(tmp_path, flags):
    """8 iterations straight against 4, then a resume to 8: the checkpoints agree bitwise
    (the weights, the critic's Adam, beta). Catches state left out of the checkpoint: the
    KL penalty's beta restarting from its initial value, an optimizer over other params."""
    from trot.agents.runs import read_checkpoint
    from trot.cli import main as cli_main
    base = ["cartpole-balance", *flags, "--num-envs", "64", "--no-export"]
    steps = 64 * 16
    assert cli_main(["train", *base, "--max-env-steps", str(8 * steps),
                     "--run-dir", str(tmp_path / "a")]) == 0
    assert cli_main(["train", *base, "--max-env-steps", str(4 * steps),
                     "--run-dir", str(tmp_path / "b")]) == 0
    assert cli_main(["train", "--resume", str(tmp_path / "b"),
                     "--max-env-steps", str(8 * steps)]) == 0
    a, b = (read_checkpoint(tmp_path / r).state for r in "ab")
    for key in ("model", "algo"):
        flat_a, flat_b = (torch.utils._pytree.tree_leaves(s[key]) for s in (a, b))
        assert len(flat_a) == len(flat_b)
        for x, y in zip(flat_a, flat_b):
            assert (torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y), key
    if "--agent.kl-penalty" in flags:
        assert float(a["algo"]["beta"]) != 0.3  # beta moved, and the resume kept it
