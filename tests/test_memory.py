"""Policies with memory: recurrent actors (GRU, LSTM) and observation history, in the
learner, the env, the export and the torch-free runner."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from contract_edit import edited_export

from trot.agents.loop import train
from trot.agents.config import PPOConfig
from trot.agents.networks import Acting, Actor, reset_state
from trot.agents.ppo import PPO, _sequence_means
from trot.agents.storage import Batch, Sequences
from trot.agents.learners import build, start
from trot.agents.train_config import TrainConfig
from trot.export.onnx import ExportError, export_run
from trot.export.runner import ContractError, OnnxPolicy
from trot.agents.runs import load_run
from trot.tasks.registry import get_task, make_env

TASK = "cartpole-balance"


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)


def _actor(rnn: str, obs: int = 5, act: int = 2) -> Actor:
    torch.manual_seed(0)
    cfg = dataclasses.replace(PPOConfig(), rnn=rnn, rnn_hidden=8, actor_hidden=(16,))
    actor = Actor(obs, act, cfg)
    with torch.no_grad():  # a normalizer that is not the identity
        actor.normalizer.mean.copy_(torch.randn(obs, dtype=torch.float64))
        actor.normalizer.var.copy_(torch.rand(obs, dtype=torch.float64) + 0.5)
    return actor


def _segments_loop(actor: Actor, obs: torch.Tensor, state0: torch.Tensor,
                   starts: torch.Tensor) -> torch.Tensor:
    """The reference: each env's rollout cut into its episodes, each run by torch's
    multi-step nn.GRU / nn.LSTM (the cell's weights) from its own start: the rollout's
    stored state for the first piece, zeros after an episode start."""
    cell, h = actor.memory.cell, actor.memory.hidden
    lstm = actor.memory.kind == "lstm"
    net = (torch.nn.LSTM if lstm else torch.nn.GRU)(cell.input_size, h)
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        setattr(net, f"{name}_l0", getattr(cell, name))  # the same parameters
    t_len, n = starts.shape
    out = torch.zeros(t_len, n, actor.mean.out_features)
    for i in range(n):
        cuts = [0] + [t for t in range(1, t_len) if starts[t, i]] + [t_len]
        for a, b in zip(cuts[:-1], cuts[1:]):
            s = state0[i] if a == 0 else torch.zeros(actor.state_size)
            init = (s[:h][None, None], s[h:][None, None]) if lstm else s[None, None]
            y, _ = net(actor.normalizer(obs[a:b, i])[:, None], init)  # [b - a, 1, H]
            out[a:b, i] = actor.mean(actor.torso(y[:, 0]))
    return out


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_truncated_bptt_gradient_is_the_plain_loop_gradient(rnn):
    """Actor.sequence (masked steps along the rollout) against episodes run separately by
    nn.GRU / nn.LSTM: the same means and the same gradient of every parameter. The bugs:
    a reset one step late or early, a state carried across an episode start, the
    rollout's first piece not started from its stored state."""
    actor = _actor(rnn)
    g = torch.Generator().manual_seed(1)
    t, n = 12, 6
    obs = torch.randn(t, n, 5, generator=g)
    state0 = torch.randn(n, actor.state_size, generator=g)  # stored: no graph behind it
    starts = torch.zeros(t, n, dtype=torch.bool)
    starts[3, 0] = starts[4, 1] = starts[1, 2] = starts[9, 2] = starts[11, 3] = True
    w = torch.randn(t, n, 2, generator=g)

    def grads(fn):
        actor.zero_grad()
        (fn(actor, obs, state0, starts) * w).sum().backward()
        return {k: p.grad.clone() for k, p in actor.named_parameters() if p.grad is not None}

    got, want = grads(Actor.sequence), grads(_segments_loop)
    assert got.keys() == want.keys() and "memory.cell.weight_hh" in got
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=1e-5, rtol=1e-5, msg=k)
    late = starts.roll(1, 0)  # the same resets a step late: a different function
    assert not torch.allclose(Actor.sequence(actor, obs, state0, late),
                              _segments_loop(actor, obs, state0, starts))


def test_hidden_state_resets_exactly_at_episode_ends():
    """Handcrafted ends: Rollout.starts marks the step after each end (terminated or
    truncated), and collection zeroes the state exactly there: a real env's rollout, whose
    episodes are 0.2 s long, replayed through Actor.sequence from the stored start state
    gives the collection's means bitwise. The bugs: the state carried across a
    truncation, reset on the ending step instead of the next, or state0 not stored."""
    from trot.agents.storage import Rollout

    ro = Rollout.allocate(5, 3, 1, 1, 1, torch.device("cpu"))
    ro.terminated[1, 0] = True
    ro.truncated[3, 1] = True
    ro.terminated[4, 2] = True  # the last step's end restarts the next rollout instead
    want = torch.zeros(5, 3, dtype=torch.bool)
    want[2, 0] = want[4, 1] = True
    assert torch.equal(ro.starts(), want)

    env_cfg = dataclasses.replace(get_task(TASK).config, episode_seconds=0.2)
    agent = dataclasses.replace(PPOConfig(), rnn="gru", rnn_hidden=8, rollout_steps=16,
                                minibatches=2)
    tr = build(TrainConfig(task=TASK, num_envs=8, seed=3, agent=agent, env=env_cfg))
    for _ in range(2):  # the second rollout starts from a carried, non-zero state
        ro = tr.collect()
    assert ro.state0.abs().sum() > 0 and (ro.terminated | ro.truncated).any()
    with torch.no_grad():
        mean = tr.ac.actor.sequence(ro.obs, ro.state0, ro.starts())
        assert torch.equal(mean, ro.action_mean)
        wrong = tr.ac.actor.sequence(ro.obs, ro.state0, torch.zeros_like(ro.starts()))
        assert not torch.equal(wrong, ro.action_mean)  # the resets matter


def test_recurrent_minibatches_are_whole_rollouts_of_their_envs():
    """Each minibatch of a recurrent update holds whole rollouts of N / minibatches envs,
    env-major, with those envs' start states and starts; every env once per epoch; its
    means are the full batch's means of those rows. The bugs: rows of one env split
    between minibatches, or a minibatch's state0 from other envs than its rows."""
    t, n = 4, 6
    actor = _actor("gru", obs=2)
    cfg = dataclasses.replace(PPOConfig(), rnn="gru", rnn_hidden=8, minibatches=3)
    algo = PPO(torch.nn.ModuleDict({"actor": actor}), cfg, torch.device("cpu"))
    tt, nn_ = torch.meshgrid(torch.arange(t), torch.arange(n), indexing="ij")
    obs = torch.stack([tt, nn_], -1).float().flatten(0, 1)  # row t * n + i holds (t, i)
    zeros = torch.zeros(t * n)
    batch = Batch.packed(obs, obs, zeros[:, None], zeros, zeros[:, None], zeros, zeros, zeros)
    g = torch.Generator().manual_seed(0)
    starts = torch.rand(t, n, generator=g) < 0.3
    batch.sequences = Sequences(torch.randn(n, 8, generator=g), starts)
    with torch.no_grad():
        full = _sequence_means(actor, batch, batch.sequences)  # [T * N, A] t-major
    seen = []
    for b, seq in algo._minibatches(batch, torch.Generator().manual_seed(5)):
        envs = b.obs.view(2, t, 2)[:, 0, 1].long()  # env-major: [e, T, (t, i)]
        assert torch.equal(b.obs.view(2, t, 2)[..., 0], torch.arange(t).float().expand(2, t))
        assert torch.equal(b.obs.view(2, t, 2)[..., 1], envs[:, None].float().expand(2, t))
        assert torch.equal(seq.state0, batch.sequences.state0[envs])
        assert torch.equal(seq.starts, starts[:, envs])
        with torch.no_grad():
            mine = _sequence_means(actor, b, seq).view(2, t, -1)
        rows = (torch.arange(t)[None] * n + envs[:, None])  # [e, T]
        torch.testing.assert_close(mine, full[rows], atol=1e-6, rtol=0)
        seen += envs.tolist()
    assert sorted(seen) == list(range(n))


def test_history_is_oldest_first_and_starts_filled_with_the_first_frame():
    """--env.obs-history 3 against the same env without history, stepped alike: the policy
    observation is the last 3 frames, oldest first, a new episode's K copies of its first
    frame; final_obs ends with the episode's last frame. The bugs: newest first, zeros or
    the old episode's frames after a reset, the critic given the history."""
    cfg = dataclasses.replace(get_task(TASK).config, episode_seconds=0.1, obs_noise=False)
    plain = make_env(TASK, 4, seed=2, config=cfg)
    hist = make_env(TASK, 4, seed=2, config=dataclasses.replace(cfg, obs_history=3))
    p = plain.frame_dim
    assert hist.obs_dim == 3 * p and hist.critic_obs_dim == plain.critic_obs_dim
    frames = [plain.reset().policy]
    obs = hist.reset()
    assert torch.equal(obs.policy, frames[0].repeat(1, 3))
    started = torch.zeros(4, dtype=torch.long)  # the step each env's episode began
    g = torch.Generator().manual_seed(0)
    for step in range(1, 12):
        a = torch.rand(4, 1, generator=g) * 2 - 1
        rp, rh = plain.step(a), hist.step(a)
        assert torch.equal(rh.final_obs.policy[:, -p:], rp.final_obs.policy)
        done = rp.terminated | rp.truncated
        started = torch.where(done, step, started)
        frames.append(rp.obs.policy)
        for i in range(4):
            want = [frames[max(step - k, int(started[i]))][i] for k in (2, 1, 0)]
            assert torch.equal(rh.obs.policy[i], torch.cat(want)), (step, i)
        assert torch.equal(rh.obs.critic, rp.obs.critic)
    assert int(started.max()) > 0  # episodes ended and restarted along the way


def _trained(tmp: Path, agent: dict, env: dict, steps: int = 64 * 16 * 3) -> Path:
    cfg = TrainConfig(task=TASK, num_envs=64, max_env_steps=steps, seed=0,
                      run_dir=str(tmp), agent=dataclasses.replace(PPOConfig(), **agent),
                      env=dataclasses.replace(get_task(TASK).config, **env))
    trainer, run_dir = start(cfg)
    train(trainer, run_dir, quiet=True)
    export_run(run_dir, quiet=True)
    return run_dir


VARIANTS = {"gru": ({"rnn": "gru", "rnn_hidden": 16}, {}),
            "lstm": ({"rnn": "lstm", "rnn_hidden": 16}, {}),
            "history3": ({}, {"obs_history": 3})}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_runner_and_torch_agree_across_resets(variant, tmp_path):
    """The torch-free runner keeps the state and history itself (act per step, reset per
    robot): along a rollout of 16 robots that reset at random steps, its actions are the
    trained actor's (through Acting, which the evaluation uses) within 1e-5. The bugs: the
    runner's state not fed back, not zeroed on reset, a history in the wrong order or not
    refilled, a reset of the wrong rows."""
    agent, env = VARIANTS[variant]
    run_dir = _trained(tmp_path / variant, agent, env)
    policy = OnnxPolicy(run_dir)
    c = policy.contract
    assert c.obs_history.length == env.get("obs_history", 1)
    names = [s.input for s in c.recurrent_state]
    assert names == {"gru": ["h"], "lstm": ["h", "c"]}.get(variant, [])
    run = load_run(run_dir, num_envs=16, seed=4)
    acting = Acting(run.ac.actor, 16, torch.device("cpu"))
    hist = run.env.history
    g = torch.Generator().manual_seed(0)
    frames = torch.randn(40, 16, run.env.frame_dim, generator=g)
    window = frames[0].repeat(1, hist)
    empty = 0
    for t in range(40):
        restart = torch.rand(16, generator=g) < 0.1 if t else torch.ones(16, dtype=torch.bool)
        if t:  # the rows as a bool mask, or as a list of indices (empty where none ended)
            acting.ended(restart)
            rows = np.flatnonzero(restart.numpy()).tolist()
            policy.reset(restart.numpy() if t % 2 else rows)
            empty += t % 2 == 0 and not rows
        shifted = torch.cat([window[:, run.env.frame_dim:], frames[t]], 1)
        window = torch.where(restart[:, None], frames[t].repeat(1, hist), shifted)
        want = acting(window).numpy()
        got = policy.act(frames[t].numpy())
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"step {t}")
    assert empty  # reset([]) was called, and changed nothing
    one = OnnxPolicy(run_dir)  # a single robot: [obs_dim] in, [action_dim] out
    assert one.act(frames[0, 0].numpy()).shape == (c.action_dim,)
    with pytest.raises(ValueError, match="reset"):
        one.act(frames[1].numpy())  # 16 robots where its memory holds one


def test_a_contract_whose_memory_is_not_the_graphs_is_refused(tmp_path):
    """A state size, a state name, a missing state or a history length that the ONNX graph
    does not have, or a reset rule the runner does not implement: refused at load, naming
    the input or the field."""
    run_dir = _trained(tmp_path / "gru", *VARIANTS["gru"])
    edits = {
        "shape": (lambda c: c["recurrent_state"][0].update(shape=[32]), "h has shape"),
        "name": (lambda c: c["recurrent_state"][0].update(input="hidden"), "inputs"),
        "missing": (lambda c: c.update(recurrent_state=[]), "inputs"),
        "history": (lambda c: c["obs_history"].update(length=2, input_dim=2 * c["obs_dim"]),
                    "obs has shape"),
        "input_dim": (lambda c: c["obs_history"].update(length=2), "input_dim"),
        "reset": (lambda c: c["recurrent_state"][0].update(reset="last_value"),
                  r"recurrent_state\[0\].reset is 'last_value'"),
    }
    for name, (edit, match) in edits.items():
        with pytest.raises(ContractError, match=match):
            OnnxPolicy(edited_export(run_dir, tmp_path / name, edit))


def test_recurrent_parity_failure_writes_nothing(tmp_path, monkeypatch):
    """The export's sequence check compares the states too: a graph whose state output is
    off is refused. The bug: checking the first step's action only."""
    import trot.export.onnx as export_onnx

    run_dir = _trained(tmp_path / "gru", *VARIANTS["gru"])
    original = export_onnx.DeployedPolicy.forward

    def drift(self, obs, *state):  # torch's reference carries a slightly different state
        action, *nxt = original(self, obs, *state)
        return (action, *(s * (1 + 1e-3) for s in nxt))

    write = export_onnx.write_onnx

    def write_then_drift(*args):  # the graph is exact; the reference drifts after it
        write(*args)
        monkeypatch.setattr(export_onnx.DeployedPolicy, "forward", drift)

    out = tmp_path / "out"
    monkeypatch.setattr(export_onnx, "write_onnx", write_then_drift)
    with pytest.raises(ExportError, match="parity"):
        export_run(run_dir, out, quiet=True)
    assert not out.exists() or not any(out.iterdir())
    assert reset_state(torch.ones(2, 3), torch.tensor([True, False])).sum() == 3
