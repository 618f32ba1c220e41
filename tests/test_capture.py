"""The per-step torch code is ready for graph capture (CUDA graphs, torch.compile with
mode="reduce-overhead"): TorchDynamo traces it as one graph (`fullgraph=True`), so it has no
host sync (`.item()`, `bool(tensor)`), no Python branch on a tensor's value and no call
Dynamo cannot follow. backend="eager" traces without generating code, so the check costs
about a second. trot runs this code eagerly (nothing is compiled or captured yet, on any
device; docs/architecture.md).

What is outside the captured part, by design: the random draws (`torch.Generator`, which
Dynamo does not trace; drawn before, passed in, as `Env.observe(noise)` takes them) and the
physics launch itself (MuJoCo C on the cpu backend, an XLA program on mjx).
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import trot


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
