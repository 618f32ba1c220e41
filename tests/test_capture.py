"""The per-step torch code is ready for graph capture (CUDA graphs, torch.compile with
mode="reduce-overhead"): TorchDynamo traces it as one graph (`fullgraph=True`), so it has no
host sync (`.item()`, `bool(tensor)`), no Python branch on a tensor's value and no call
Dynamo cannot follow. backend="eager" traces without generating code, so the check costs
about a second. trot runs this code eagerly (nothing is compiled or captured yet, on any
device; docs/architecture.md). The learner's act step and minibatch loss are checked the
same way.

What is outside the captured part, by design: the random draws (`torch.Generator`, which
Dynamo does not trace; drawn before, passed in, as `Env.observe(noise)` takes them) and the
physics launch itself (MuJoCo C on the cpu backend, an XLA program on mjx).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch._dynamo

import trot
from trot.agents.config import tuned
from trot.agents.ppo import _sequence_means
from trot.agents.learners import build
from trot.agents.train_config import TrainConfig
from trot.tasks.registry import get_task


def _traced(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="eager")(*args)


@pytest.mark.parametrize("task", ["go1-flat", "g1-flat", "cartpole-balance"])
def test_per_step_torch_code_traces_as_one_graph(task):
    torch.manual_seed(0)
    env = trot.make_env(task, num_envs=4, seed=0)
    env.reset()
    sim, t = env.sim, env.task
    action = torch.rand(4, env.action_dim) * 2 - 1
    env.step(action)  # a state after a step: histories and clocks in use
    noise = env._draw_noise()
    got = _traced(env.observe, noise)
    want = env.observe(noise)
    assert torch.equal(got.policy, want.policy) and torch.equal(got.critic, want.critic)
    assert torch.equal(_traced(t.terminated, sim), t.terminated(sim))
    assert torch.equal(_traced(t.action_to_ctrl, action), t.action_to_ctrl(action))
    _traced(t.reward, sim, action)  # (advances the task's histories: not compared)


def test_a_host_sync_in_the_step_code_is_caught():
    """The check can fail: a reward term that reads a tensor on the host breaks the graph."""
    env = trot.make_env("go1-flat", num_envs=4, seed=0)
    env.reset()

    def synced(sim, action):
        total, terms = env.task.reward(sim, action)
        return total * (2.0 if total.sum().item() > 0 else 1.0), terms

    with pytest.raises(Exception, match="(?i)graph break|item|unsupported"):
        _traced(synced, env.sim, torch.zeros(4, 12))


@pytest.mark.parametrize("rnn", ["none", "gru"])
def test_act_step_and_minibatch_loss_trace_as_one_graph(tmp_path, monkeypatch, rnn):
    """The learner's side: the act step given its noise (`Actor.sample_with`) and the PPO
    minibatch loss (`PPO.loss`, forward and statistics) on a real minibatch of go1-flat,
    with a GRU actor too. What stays outside by design: the noise draw and the minibatch
    shuffle (generators), backward and the optimizer step (autograd and torch.optim,
    which torch.compile wraps with their own machinery)."""
    monkeypatch.chdir(tmp_path)
    agent = dataclasses.replace(tuned(get_task("go1-flat").agent), rollout_steps=4,
                                minibatches=2, actor_hidden=(16,), critic_hidden=(16,),
                                rnn=rnn, rnn_hidden=8)
    trainer = build(TrainConfig(task="go1-flat", num_envs=4, agent=agent,
                                torch_threads=1, update_threads=1))
    actor, algo = trainer.ac.actor, trainer.algo
    obs = trainer.env.obs.policy
    state = actor.initial_state(4)
    eps = torch.randn(4, trainer.env.action_dim)
    with torch.no_grad():
        for got, want in zip(_traced(actor.sample_with, obs, eps, state),
                             actor.sample_with(obs, eps, state)):
            assert torch.equal(got, want)
    batch = algo.prepare(trainer.collect())
    b, seq = (batch[:len(batch) // agent.minibatches], None) if rnn == "none" else \
        next(algo._minibatches(batch, trainer.gen))
    old = actor.log_std.detach().clone()
    loss, stats = _traced(algo.forward_loss, b, seq, old)  # what capture compiles
    mean = actor(b.obs) if seq is None else _sequence_means(actor, b, seq)
    want_loss, want_stats = algo.loss(b, mean, old)
    assert torch.equal(loss, want_loss)
    assert all(torch.equal(stats[k], want_stats[k]) for k in want_stats)


def _three_iterations(capture: str, rnn: str):
    agent = dataclasses.replace(tuned(get_task("go1-flat").agent), rollout_steps=8,
                                minibatches=2, epochs=2, actor_hidden=(32,),
                                critic_hidden=(32,), rnn=rnn, rnn_hidden=8)
    torch._dynamo.reset()
    trainer = build(TrainConfig(task="go1-flat", num_envs=8, agent=agent, capture=capture,
                                torch_threads=1, update_threads=1))
    metrics = [trainer.iterate() for _ in range(3)]
    return trainer, metrics


@pytest.mark.parametrize("rnn", ["none", "gru"])
def test_captured_training_matches_eager(tmp_path, monkeypatch, rnn):
    """TrainConfig.capture through torch.compile (backend aot_eager: Dynamo's trace and
    AOTAutograd's joint graph with its own backward, no generated code, so it fits CI)
    against eager over 3 iterations of go1-flat: parameters, optimizer state, rollout
    statistics and losses to float tolerance. The bugs: a captured piece that keeps a
    stale tensor (an observation history or reward memory not updated under capture), a
    guard that misses the lagged or recurrent state, a loss whose compiled backward differs,
    and a switch that does not reach the env's or the learner's code (the compile counter)."""
    from torch._dynamo.utils import counters

    monkeypatch.chdir(tmp_path)
    eager, want = _three_iterations("off", rnn)
    counters.clear()
    captured, got = _three_iterations("aot_eager", rnn)
    assert counters["stats"]["unique_graphs"] >= 5  # act, observe, reward, done, loss
    for k in ("loss/policy", "loss/value", "kl", "entropy", "grad_norm", "learning_rate"):
        for g, w in zip(got, want):
            assert g[k] == pytest.approx(w[k], rel=1e-4, abs=1e-6), k
    for (name, p), q in zip(captured.ac.named_parameters(), eager.ac.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=name)
    torch.testing.assert_close(captured.env.obs.policy, eager.env.obs.policy, rtol=1e-4,
                               atol=1e-5)


def test_capture_setting_is_checked():
    """An unknown backend or mode names what is accepted, before anything is built."""
    with pytest.raises(ValueError, match="capture must be 'auto', 'off'"):
        TrainConfig(task="go1-flat", capture="fast").validate()
    with pytest.raises(ValueError, match="BACKEND:MODE"):
        TrainConfig(task="go1-flat", capture="inductor:quick").validate()
    TrainConfig(task="go1-flat", capture="inductor:reduce-overhead").validate()
