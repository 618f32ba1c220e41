"""V-trace (`trot.agents.vtrace`): on-policy it is GAE; it matches the explicit n-step
formula; tabular V-trace converges to V of pi_rho_bar, not V^pi; and lagged actors in the
trainer (`TrainConfig.actor_lag`) act with the right snapshot, and lag 0 with the current
policy, as a plain acting loop does."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from trot.agents.loop import save
from trot.agents.advantages import compute_gae
from trot.agents.collect import Collector
from trot.agents.config import PPOConfig
from trot.agents.learners import build, resume
from trot.agents.vtrace import vtrace
from trot.agents.modes import Sync
from trot.agents.train_config import TrainConfig, save_json

T, N = 24, 7


def _data(seed: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(T, N, generator=g, dtype=dtype)
    v = torch.randn(T, N, generator=g, dtype=dtype)
    nv = torch.randn(T, N, generator=g, dtype=dtype)
    term = torch.rand(T, N, generator=g) < 0.12
    trunc = (torch.rand(T, N, generator=g) < 0.12) & ~term
    term[-1, 0], trunc[-1, 1] = True, True  # episode ends exactly at the rollout's end
    term[5, 2], trunc[5, 2] = True, True  # both flags at once: termination wins
    log_rhos = 0.7 * torch.randn(T, N, generator=g, dtype=dtype)
    return r, v, nv, term, trunc, log_rhos


@pytest.mark.parametrize("lam", [0.0, 0.7, 0.95, 1.0])
@pytest.mark.parametrize("bars", [(1.0, 1.0), (2.0, 1.5)])
def test_on_policy_vtrace_is_gae(lam, bars):
    r, v, nv, term, trunc, _ = _data(0)
    vs, adv = vtrace(r, v, nv, term, trunc, torch.zeros_like(r), 0.97, lam, *bars)
    gae_adv, gae_ret = compute_gae(r, v, nv, term, trunc, 0.97, lam)
    assert (vs - gae_ret).abs().max() <= 1e-10
    # the pg advantage is the one-step advantage on the V-trace target
    nxt = torch.where(~(term | trunc)[:-1], vs[1:], nv[:-1])
    one_step = r[:-1] + 0.97 * (~term[:-1]).double() * nxt - v[:-1]
    assert (adv[:-1] - one_step).abs().max() <= 1e-12


def _reference(r, v, nv, term, trunc, log_rhos, gamma, lam, rho_bar, c_bar):
    """n-step V-trace with explicit products of traces, one (s, env) at a time."""
    r, v, nv, term, trunc, lr = (x.numpy() for x in (r, v, nv, term, trunc, log_rhos))
    rho = np.minimum(rho_bar, np.exp(lr))
    c = lam * np.minimum(c_bar, np.exp(lr))
    delta = rho * (r + gamma * (1.0 - term) * nv - v)
    vs = np.empty_like(v)
    adv = np.empty_like(v)
    for n in range(r.shape[1]):
        for s in range(r.shape[0]):
            total = 0.0
            for t in range(s, r.shape[0]):
                total += gamma ** (t - s) * np.prod(c[s:t, n]) * delta[t, n]
                if term[t, n] or trunc[t, n]:  # the episode ends at t
                    break
            vs[s, n] = v[s, n] + total
    for n in range(r.shape[1]):
        for s in range(r.shape[0]):
            ended = term[s, n] or trunc[s, n] or s == r.shape[0] - 1
            nxt = nv[s, n] if ended else vs[s + 1, n]
            adv[s, n] = rho[s, n] * (r[s, n] + gamma * (1.0 - term[s, n]) * nxt - v[s, n])
    return torch.from_numpy(vs), torch.from_numpy(adv)


@pytest.mark.parametrize("bars", [(1.0, 1.0), (1.5, 0.8), (0.5, 2.0)])
def test_vtrace_matches_explicit_trace_products(bars):
    r, v, nv, term, trunc, lr = _data(1)
    vs, adv = vtrace(r, v, nv, term, trunc, lr, 0.95, 0.9, *bars)
    ref_vs, ref_adv = _reference(r, v, nv, term, trunc, lr, 0.95, 0.9, *bars)
    assert (vs - ref_vs).abs().max() <= 1e-10
    assert (adv - ref_adv).abs().max() <= 1e-10
    _, unweighted = vtrace(r, v, nv, term, trunc, lr, 0.95, 0.9, *bars,
                           weight_advantages=False)
    rho = lr.exp().clamp(max=bars[0])
    assert (rho * unweighted - adv).abs().max() <= 1e-12


def test_vtrace_rejects_bad_shapes():
    r, v, nv, term, trunc, lr = _data(2)
    with pytest.raises(ValueError, match="log_rhos"):
        vtrace(r, v, nv, term, trunc, lr[:-1], 0.9, 0.9, 1.0, 1.0)
    with pytest.raises(ValueError, match="terminated"):
        vtrace(r, v, nv, term.double(), trunc, lr, 0.9, 0.9, 1.0, 1.0)


# ---------------------------------------------------------------------- tabular
def _value(P, R, pi, gamma):
    """Exact V^pi: solve (I - gamma P_pi) V = r_pi. P [S, A, S], R [S, A], pi [S, A]."""
    p_pi = np.einsum("sa,sat->st", pi, P)
    r_pi = (pi * R).sum(1)
    return np.linalg.solve(np.eye(len(R)) - gamma * p_pi, r_pi)


def test_tabular_vtrace_converges_to_value_of_pi_rho_bar_not_pi():
    S, A, gamma, rho_bar = 6, 3, 0.9, 1.0
    rng = np.random.default_rng(2)
    P = rng.dirichlet(np.ones(S), size=(S, A))  # [S, A, S]
    R = rng.normal(size=(S, A))
    mu = rng.dirichlet(3 * np.ones(A), size=S)  # behaviour: spread out
    pi = rng.dirichlet(0.3 * np.ones(A), size=S)  # target: peaked, pi/mu up to ~5
    assert (pi / mu).max() > 2 * rho_bar
    pi_bar = np.minimum(rho_bar * mu, pi)
    pi_bar /= pi_bar.sum(1, keepdims=True)
    v_pi, v_bar = _value(P, R, pi, gamma), _value(P, R, pi_bar, gamma)
    gap = np.abs(v_pi - v_bar).max()
    assert gap > 1.0, gap  # the two fixed points are far apart

    # sample continuing chains from mu (inverse CDF); V-trace targets regressed into a table
    g = torch.Generator().manual_seed(0)
    n_chains, steps, iters = 512, 16, 200
    cum_mu = torch.from_numpy(mu).cumsum(1)  # [S, A]
    cum_p = torch.from_numpy(P).cumsum(2)  # [S, A, S]
    Rt = torch.from_numpy(R)
    log_ratio = torch.from_numpy(np.log(pi) - np.log(mu))  # [S, A]
    table = torch.zeros(S, dtype=torch.float64)
    state = torch.randint(S, (n_chains,), generator=g)
    no = torch.zeros(steps, n_chains, dtype=torch.bool)
    for it in range(iters):
        u = torch.rand(steps, 2, n_chains, 1, generator=g, dtype=torch.float64)
        states = torch.empty(steps + 1, n_chains, dtype=torch.long)
        actions = torch.empty(steps, n_chains, dtype=torch.long)
        states[0] = state
        for t in range(steps):
            a = (u[t, 0] > cum_mu[states[t]]).sum(1).clamp(max=A - 1)
            actions[t] = a
            states[t + 1] = (u[t, 1] > cum_p[states[t], a]).sum(1).clamp(max=S - 1)
        state = states[-1]
        s, a = states[:-1], actions
        vs, _ = vtrace(Rt[s, a], table[s], table[states[1:]], no, no, log_ratio[s, a],
                       gamma, 1.0, rho_bar, 1.0)
        # tabular regression step: move each state toward its mean V-trace target
        err = torch.zeros(S, dtype=torch.float64).index_add_(0, s.flatten(),
                                                            (vs - table[s]).flatten())
        count = torch.bincount(s.flatten(), minlength=S).clamp(min=1)
        step = 1.0 if it < 50 else 50.0 / it  # decaying step size
        table += step * err / count
    d_bar = np.abs(table.numpy() - v_bar).max()
    d_pi = np.abs(table.numpy() - v_pi).max()
    assert d_bar < 0.05 * gap and d_bar < 0.1 * d_pi, (d_bar, d_pi, gap)


# ---------------------------------------------------------------------- lagged actors
def _cfg(tmp_path, lag: int = 0, algo: str = "ppo", **agent_kw) -> TrainConfig:
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(16, 16), critic_hidden=(16, 16),
                                rollout_steps=8, **agent_kw)
    return TrainConfig(task="cartpole-balance", num_envs=16, agent=agent, algo=algo,
                       max_env_steps=10**7, mode=Sync(actor_lag=lag),
                       run_dir=str(tmp_path / "run"))


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    torch.set_num_threads(1)  # tiny ops: more threads only contend (20x slower here)
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)


def _run(cfg, iters=3):
    tr = build(cfg)
    ms = [{k: v for k, v in tr.iterate().items() if k not in ("wall_s", "steps_per_s")}
          for _ in range(iters)]
    return tr, ms


def test_actor_lag_zero_acts_with_the_current_policy(tmp_path):
    """actor_lag=0's rollouts are the trajectory of a plain loop, with no lag machinery,
    that acts with a copy of the learner's actor taken before each iteration, in a twin env
    with its own copy of the noise stream; and lag 0 builds no behaviour actor."""
    cfg = _cfg(tmp_path, lag=0)
    tr = build(cfg)
    twin = build(cfg)  # only its env and its noise generator are used: the same start
    env, gen = twin.env, twin.collector.noise_gen
    actors = []
    for it in range(3):
        actors.append(copy.deepcopy(tr.ac.actor))  # the policy this iteration must act with
        tr.iterate()
        ro = tr.collector.storage  # [T, N, ...]
        with torch.no_grad():
            for t in range(cfg.agent.rollout_steps):
                obs = env.obs.policy  # [N, P]
                action, log_prob, mean, _ = actors[-1].sample(obs, gen)
                for name, want in (("obs", obs), ("actions", action),
                                   ("log_probs", log_prob), ("action_mean", mean)):
                    assert torch.equal(getattr(ro, name)[t], want), (it, t, name)
                assert torch.equal(ro.rewards[t], env.step(action).reward), (it, t)
    # the updates moved the policy, so acting with an older one would have shown
    assert not torch.equal(actors[0].mean.weight, actors[2].mean.weight)
    assert type(tr.collector) is Collector  # no behaviour actor, no snapshots
    assert "actor_snapshots" not in tr.state_dict()


def test_lagged_actor_acts_with_the_snapshot_k_updates_old(tmp_path):
    K = 2
    tr = build(_cfg(tmp_path, lag=K, off_policy="vtrace"))
    seen, after = [], [{k: v.clone() for k, v in tr.ac.actor.state_dict().items()}]
    orig_act = tr.algo.act

    def spy(obs, actor=None, gen=None, state=None):
        seen.append({k: v.clone() for k, v in actor.state_dict().items()})
        return orig_act(obs, actor, gen, state)

    tr.algo.act = spy
    for _ in range(5):
        tr.iterate()
        after.append({k: v.clone() for k, v in tr.ac.actor.state_dict().items()})
    steps = tr.cfg.agent.rollout_steps
    for i in range(5):  # iteration i acts with the params after update max(0, i - K)
        want = after[max(0, i - K)]
        for k in want:
            assert torch.equal(seen[i * steps][k], want[k]), (i, k)
    assert not torch.equal(after[0]["mean.weight"], after[3]["mean.weight"])
    # the behaviour log-probs in the rollout are the snapshot's
    ro = tr.collector.storage
    lp = tr.collector.behaviour_actor.dist(ro.obs).log_prob(ro.actions).sum(-1)
    assert torch.allclose(lp, ro.log_probs, atol=1e-5)


@pytest.mark.parametrize("off_policy,clip", [("ignore", False), ("vtrace", False),
                                             ("vtrace", True), ("ratio", True)])
def test_lagged_resume_is_bitwise(tmp_path, off_policy, clip):
    cfg = _cfg(tmp_path, lag=3, off_policy=off_policy, clip=clip)
    straight, m_straight = _run(cfg, 6)
    first = build(cfg)
    m_split = [first.iterate() for _ in range(3)]
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    save_json(run_dir / "config.json", cfg)
    save(first, run_dir)
    torch.manual_seed(1)
    second = resume(run_dir)[0]
    m_split += [second.iterate() for _ in range(3)]
    strip = lambda m: {k: v for k, v in m.items() if k not in ("wall_s", "steps_per_s")}  # noqa
    assert [strip(m) for m in m_split] == m_straight
    for k, v in straight.ac.state_dict().items():
        assert torch.equal(v, second.ac.state_dict()[k]), k


def test_validate_rejects_ignore_with_clip_and_negative_lag():
    with pytest.raises(ValueError, match="clip=False"):
        PPOConfig(off_policy="ignore").validate(64)
    with pytest.raises(ValueError, match="actor_lag"):
        TrainConfig(mode=Sync(actor_lag=-1)).validate()
