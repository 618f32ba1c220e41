"""Sebulba mode (tasks/hosted.py): MuJoCo C on the host, results on the learner's device.

On this CPU the wrapper runs with a cpu learner (`HostedEnv(env, "cpu")`), which takes the
same pack-copy-split path as on a GPU except for the pinned memory;
`TROT_TEST_DEVICE=cuda` (benchmarks/gpu_check.sh) runs it against a GPU through
`make_env(sim="cpu", device="cuda")`.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

import trot
from trot.agents.config import tuned
from trot.agents.trainer import Trainer
from trot.agents.train_config import TrainConfig
from trot.tasks.env import Env
from trot.tasks.hosted import HostedEnv
from trot.tasks.registry import get_task

DEV = torch.device(os.environ.get("TROT_TEST_DEVICE", "cpu"))


def _pair(task: str, n: int, **config):
    """(the host env, the same env seen from DEV), same seed."""
    cfg = dataclasses.replace(get_task(task).config, **config)
    plain = trot.make_env(task, num_envs=n, seed=3, config=cfg)
    if DEV.type == "cpu":
        hosted = HostedEnv(trot.make_env(task, num_envs=n, seed=3, config=cfg), DEV)
    else:
        hosted = trot.make_env(task, num_envs=n, sim="cpu", device=DEV, seed=3, config=cfg)
    assert isinstance(plain, Env) and isinstance(hosted, HostedEnv)
    return plain, hosted


def _same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert b.device == DEV and a.dtype == b.dtype and a.shape == b.shape, what
    assert torch.equal(a, b.cpu()), what


def test_hosted_env_returns_exactly_what_the_host_env_does(tmp_path, monkeypatch):
    """go1-flat with a 2-frame history (policy and critic observations differ in width),
    1 s episodes and large random actions, so that envs fall and time out within the 60
    steps. Every result is kept and compared at the end. The bugs: a column block put
    in the wrong place or width, terminated/truncated mis-decoded, a result that aliases
    the reused buffer (overwritten by later steps), a metric that changes dtype."""
    monkeypatch.chdir(tmp_path)
    plain, hosted = _pair("go1-flat", 8, obs_history=2, episode_seconds=1.0)
    o_p, o_h = plain.reset(), hosted.reset()
    _same(o_p.policy, o_h.policy, "reset policy")
    gen = torch.Generator().manual_seed(0)
    got, want = [], []
    for _ in range(60):
        action = 2 * torch.rand(8, plain.action_dim, generator=gen) - 1  # [N, A]
        want.append(plain.step(action))
        got.append(hosted.step(action.to(DEV)))
    assert any(bool(r.terminated.any()) for r in want)  # both kinds of episode end
    assert any(bool(r.truncated.any()) for r in want)
    for t, (a, b) in enumerate(zip(want, got)):
        for part in ("obs", "final_obs"):
            for side in ("policy", "critic"):
                _same(getattr(getattr(a, part), side), getattr(getattr(b, part), side),
                      f"step {t} {part}.{side}")
        for k in ("reward", "terminated", "truncated"):
            _same(getattr(a, k), getattr(b, k), f"step {t} {k}")
        assert a.metrics.keys() == b.metrics.keys()
        for k in a.metrics:
            _same(a.metrics[k], b.metrics[k], f"step {t} metric {k}")
    _same(plain.obs.policy, hosted.obs.policy, "env.obs")


def test_hosted_env_refuses_an_action_on_another_device():
    _, hosted = _pair("cartpole-balance", 2)
    hosted.reset()
    other = "meta" if DEV.type == "cpu" else "cpu"
    with pytest.raises(ValueError, match="action must be a tensor on"):
        hosted.step(torch.zeros(2, hosted.action_dim, device=other))


def test_training_through_the_host_env_is_bitwise_the_host_training(tmp_path, monkeypatch):
    """Two PPO iterations on g1-flat with symmetry augmentation (the mirror maps cross to
    the learner's device), then a checkpoint loaded into a new hosted trainer: the weights
    and metrics are those of training on the host env directly, and the loaded trainer's
    observation is the checkpoint's (not the one its own reset left). On a GPU learner
    the weights are compared within float tolerance (other kernels)."""
    monkeypatch.chdir(tmp_path)
    agent = dataclasses.replace(tuned(get_task("g1-flat").agent), rollout_steps=4,
                                minibatches=2, epochs=1, actor_hidden=(16,),
                                critic_hidden=(16,), symmetry="augment")
    cfg = TrainConfig(task="g1-flat", num_envs=4, agent=agent, device=str(DEV),
                      torch_threads=1, update_threads=1)
    plain, hosted = _pair("g1-flat", 4)
    a = Trainer(dataclasses.replace(cfg, device="cpu"), plain)
    b = Trainer(cfg, hosted)
    ma = [a.iterate() for _ in range(2)]
    mb = [b.iterate() for _ in range(2)]
    exact = DEV.type == "cpu"
    for x, y in zip(ma, mb):
        for k in x.keys() - {"wall_s", "steps_per_s"}:
            assert x[k] == y[k] if exact else x[k] == pytest.approx(y[k], rel=1e-3), k
    for k, v in a.ac.state_dict().items():
        w = b.ac.state_dict()[k].cpu()
        assert torch.equal(v, w) if exact else torch.allclose(v, w, atol=1e-5), k
    state = b.state_dict()
    _, fresh = _pair("g1-flat", 4)
    c = Trainer(cfg, fresh)
    c.load_state_dict(state)
    _same(b.env.inner.obs.policy, c.env.obs.policy, "loaded obs")
    assert c.env.obs.policy.device == DEV


def test_cuda_without_an_index_resolves_to_the_current_device(monkeypatch):
    """'cuda' resolves to 'cuda:K', the device every CUDA tensor reports. Kept as given,
    torch.device('cuda') != torch.device('cuda:0'): on the H200 (2026-12-04) the Sebulba
    env built with device='cuda' refused its own learner's actions as off-device."""
    from trot.sim import resolve_device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device(torch.device("cuda")) == torch.device("cuda", 1)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    assert resolve_device("cpu") == torch.device("cpu")
