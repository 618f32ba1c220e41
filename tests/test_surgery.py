"""`trot surgery` (agents/surgery.py): a run's networks widened keep its actions and values,
their new units learn, and `trot train --resume` continues the new run. The trained run is
docs/surgery.md's, its commands run as printed (in this process: each new one would import
torch again). About 30 s on 2 cores, most of it the page's two short trainings."""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import re
import shlex
from pathlib import Path

import pytest
import torch
from test_docs import REPO, _shell_lines

from trot.agents.checkpoint import Checkpoint, Counters
from trot.agents.config import PPOConfig
from trot.agents.learners import resume
from trot.agents.modes import Seeds
from trot.agents.networks import ActorCritic
from trot.agents.runs import load_run, read_checkpoint
from trot.agents.surgery import SurgeryError, check_supported, surgery, widen_checkpoint
from trot.agents.train_config import TrainConfig, to_json
from trot.cli import main as cli_main

DOC = REPO / "docs" / "surgery.md"
N_OBS = 1000


def _run_line(line: str, folder: Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(out):
        rc = cli_main(shlex.split(line)[1:])
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, list[str]]:
    """docs/surgery.md's commands as printed, in a fresh folder: a cartpole run with 32 32
    hidden layers, its surgery to wider ones, and the resume of the wide run; returns the
    folder and each command's output."""
    folder = tmp_path_factory.mktemp("surgery")
    lines = _shell_lines(DOC)
    assert [shlex.split(ln)[:2] for ln in lines] == [["trot", "train"], ["trot", "surgery"],
                                                      ["trot", "train"]]
    outs = []
    for line in lines:
        rc, out = _run_line(line, folder)
        assert rc == 0, f"{line}\n{out[-1500:]}"
        outs.append(out)
    return folder, outs


@pytest.fixture(scope="module")
def wide(page, tmp_path_factory) -> Path:
    """The page's trained run widened again through the library, to other widths (every
    layer of the actor; the critic's first layer only, its second reading wider inputs)."""
    out = tmp_path_factory.mktemp("wide") / "run"
    surgery(page[0] / "runs" / "narrow", out, (64, 48), (128, 32))
    return out


def _observations(ac: ActorCritic, n: int = N_OBS) -> torch.Tensor:
    """n observations [n, P] around the normalizer's statistics, out to 3 spreads."""
    norm = ac.actor.normalizer
    gen = torch.Generator().manual_seed(7)
    z = torch.rand(n, norm.mean.shape[0], generator=gen, dtype=torch.float64) * 6 - 3
    return (norm.mean + norm.var.sqrt() * z).float()


def _assert_same_outputs(old: ActorCritic, new: ActorCritic, obs: torch.Tensor) -> None:
    with torch.no_grad():
        torch.testing.assert_close(new.actor(obs), old.actor(obs), rtol=1e-5, atol=1e-6)
        assert torch.equal(new.actor.log_std, old.actor.log_std)
        torch.testing.assert_close(new.critic(obs), old.critic(obs), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(new.critic.value(obs), old.critic.value(obs), rtol=1e-5,
                                   atol=1e-5)


def test_a_trained_runs_actions_and_values_are_kept(page, wide):
    """The old run's networks, as trot loads them, against the widened run's, as trot
    loads them (its config.json's widths), on 1,000 observations: the mean, log_std, the
    normalized value and the value in reward units. The bugs: a block of weights copied to
    the wrong place, new columns left random, a normalizer or PopArt statistics reset."""
    old = load_run(page[0] / "runs" / "narrow", num_envs=1)
    new = load_run(wide, num_envs=1)
    assert old.ac.actor.normalizer.count > 0 and old.ac.critic.popart.count > 0
    assert float(old.ac.critic.popart.std) != pytest.approx(1.0, abs=0.05)  # not trivial
    assert [m.out_features for m in new.ac.actor.torso if hasattr(m, "out_features")] == \
        [64, 48]
    assert [m.out_features for m in new.ac.critic.torso if hasattr(m, "out_features")] == \
        [128, 32]
    obs = _observations(old.ac)
    assert old.ac.actor(obs).std() > 0.01  # the comparison sees the policy's inputs
    _assert_same_outputs(old.ac, new.ac, obs)
    was, now = read_checkpoint(page[0] / "runs" / "narrow"), read_checkpoint(wide)
    assert now.counters == was.counters and now.state["ranks"][0]["torch_rng"].equal(
        was.state["ranks"][0]["torch_rng"])
    torch.testing.assert_close(now.state["algo"]["lr"], was.state["algo"]["lr"])


def test_a_shared_torso_keeps_its_outputs_and_adams_moments(tmp_path):
    """A shared torso of tanh units with hand-set statistics (normalizer, PopArt) and a
    populated Adam: outputs kept on 1,000 observations, and each moment's old entries kept
    where its parameter's old entries went, the new ones zero. The bugs: moments of one
    parameter padded onto another's, moments left in the old shape (the step fails)."""
    agent = PPOConfig(actor_hidden=(8, 8), critic_hidden=(8, 8), share_torso=True,
                      activation="tanh")
    cfg = TrainConfig(agent=agent)
    torch.manual_seed(0)
    ac = ActorCritic(5, 5, 2, agent)
    with torch.no_grad():
        ac.actor.normalizer.mean.copy_(torch.randn(5) * 3)
        ac.actor.normalizer.var.copy_(torch.rand(5) * 4 + 0.1)
        ac.actor.normalizer.count.fill_(500.0)
        ac.critic.popart.mu.fill_(20.0)
        ac.critic.popart.nu.fill_(500.0)  # std 10
        for p in ac.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    opt = torch.optim.Adam(ac.parameters(), lr=1e-3)
    obs = _observations(ac)
    (ac.actor(obs).square().mean() + ac.critic(obs).square().mean()
     + ac.actor.log_std.square().sum()).backward()  # every parameter gets Adam's moments
    opt.step()
    ckpt = Checkpoint("ppo", to_json(cfg), Counters(3, 96, 1.0),
                      {"model": ac.state_dict(), "algo": {"optimizer": opt.state_dict(),
                                                          "lr": torch.tensor(1e-3)}})
    wider = TrainConfig(agent=PPOConfig(actor_hidden=(16, 12), critic_hidden=(8, 8),
                                        share_torso=True, activation="tanh"))
    new_ckpt, _ = widen_checkpoint(cfg, wider, ckpt)
    new = ActorCritic(5, 5, 2, wider.agent)
    new.load_state_dict(new_ckpt.model)
    _assert_same_outputs(ac, new, obs)
    moments = new_ckpt.state["algo"]["optimizer"]["state"]
    old_moments = opt.state_dict()["state"]
    for i, (name, p) in enumerate(new.named_parameters()):
        m, old_m = moments[i]["exp_avg"], old_moments[i]["exp_avg"]
        assert m.shape == p.shape, name
        block = tuple(slice(0, n) for n in old_m.shape)
        assert torch.equal(m[block], old_m), name
        rest = m.clone()
        rest[block] = 0.0
        assert not rest.any(), name  # the new entries' moments zero
    fresh = torch.optim.Adam(new.parameters(), lr=1e-3)
    fresh.load_state_dict(new_ckpt.state["algo"]["optimizer"])
    (new.actor(obs).square().mean()).backward()
    fresh.step()  # the padded moments fit their parameters


def _new_units(ac: ActorCritic, old: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """Each widened layer's new units' incoming weights (rows) and the next layer's columns
    reading them (outgoing), cloned; `old`: each net's old hidden sizes."""
    out = {}
    for net, widths in old.items():
        part = getattr(ac, net)
        linears = [m for m in part.torso if hasattr(m, "weight")] + [
            part.mean if net == "actor" else part.head]
        for i, h in enumerate(widths):
            if linears[i].out_features > h:
                out[f"{net}.{i}.in"] = linears[i].weight[h:].detach().clone()
                out[f"{net}.{i}.out"] = linears[i + 1].weight[:, h:].detach().clone()
    return out


@torch.no_grad()
def _outputs(ac: ActorCritic, obs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each hidden layer's outputs [B, H] on obs [B, P] (the network's own modules)."""
    out = {}
    for net in ("actor", "critic"):
        part = getattr(ac, net)
        x, i = part.normalizer(obs), 0
        for m in part.torso:
            x = m(x)
            if not hasattr(m, "weight"):  # an activation: layer i's outputs
                out[f"{net}.{i}"], i = x.clone(), i + 1
    return out


def test_the_new_units_learn(wide):
    """The widened run resumed and trained one iteration (5 epochs x 4 minibatches of
    Adam): every new unit that its inputs activate (cartpole's units are ReLUs: a few are
    off on every input, as in any new ReLU network) has both its incoming and its
    outgoing weights moved. The bugs: new units whose incoming weights are zero (their
    output is 0 and no gradient ever reaches them), new columns of the output layers that
    stay zero (never trained)."""
    learner, _ = resume(wide)
    old = {"actor": (32, 32), "critic": (32, 32)}
    before, start = _new_units(learner.ac, old), copy.deepcopy(learner.ac)
    assert sorted(before) == ["actor.0.in", "actor.0.out", "actor.1.in", "actor.1.out",
                              "critic.0.in", "critic.0.out"]
    for k, w in before.items():
        assert (w.abs().sum() > 0) == k.endswith(".in"), k  # outgoing: zero until trained
    learner.iterate()
    obs = learner.rollout.obs.flatten(0, 1)  # [T * N, P]: what the update learned on
    assert torch.equal(learner.rollout.critic_obs.flatten(0, 1), obs)  # cartpole: one obs
    on = {k: (v > 0).any(0)[old[k.split(".")[0]][int(k[-1])]:]  # [new units] activated
          for k, v in _outputs(start, obs).items()}
    after = _new_units(learner.ac, old)
    for k, w in before.items():
        active = on[k.rsplit(".", 1)[0]]
        assert active.float().mean() >= 0.75, k  # most are: the check means something
        moved = (after[k] - w).abs().sum(1 if k.endswith(".in") else 0).gt(0)
        assert moved[active].all(), f"{k}: a new unit that its inputs activate is dead"
    assert learner.iteration == read_checkpoint(wide).counters.iteration + 1


def _iterations(path: Path) -> list[int]:
    with open(path, newline="") as f:
        return [int(float(r["iteration"])) for r in csv.DictReader(f)]


def test_the_surgered_run_resumes_as_printed(page):
    """docs/surgery.md: the resume of the new run builds the wide networks from its
    config.json and trains on from the old run's counters. The bugs: a config.json that
    still says the old widths (the checkpoint would not load, or load narrow), counters
    that restart, logs that repeat or lose the old run's iterations."""
    folder, outs = page
    narrow, wide_run = folder / "runs" / "narrow", folder / "runs" / "wide"
    was = read_checkpoint(narrow).counters
    change = re.search(r"values are the old run's to (\S+) \(relative\)", outs[1])
    assert change and float(change[1]) < 1e-6, outs[1]
    assert f"resuming runs/wide at iteration {was.iteration}" in outs[2]
    cfg = json.loads((wide_run / "config.json").read_text())["agent"]
    assert cfg["actor_hidden"] == [64, 48] and cfg["critic_hidden"] == [128, 32]
    now = read_checkpoint(wide_run)
    assert now.counters.iteration > was.iteration and now.counters.env_steps >= 16384
    model, obs_dim = now.model, read_checkpoint(narrow).model["actor.torso.0.weight"].shape[1]
    assert model["actor.torso.0.weight"].shape == (64, obs_dim)
    assert model["actor.torso.2.weight"].shape == (48, 64)
    assert model["critic.torso.2.weight"].shape == (32, 128)
    assert _iterations(wide_run / "metrics.csv") == list(range(1, now.counters.iteration + 1))
    assert _iterations(narrow / "metrics.csv") == list(range(1, was.iteration + 1))  # as it was
    record = json.loads((wide_run / "surgery.json").read_text())
    assert record["iteration"] == was.iteration and record["from"] == str(narrow.resolve())


@pytest.mark.parametrize("flags, message", [
    (["--agent.actor-hidden", "64", "16"],
     r"actor hidden layer 1 \(actor_hidden\[1\]\): 32 -> 16 units is narrower"),
    (["--agent.critic-hidden", "8", "64"],
     r"critic hidden layer 0 \(critic_hidden\[0\]\): 32 -> 8 units is narrower"),
    (["--agent.actor-hidden", "64", "64", "64"], r"the run's actor has 2 hidden layers"),
    (["--env.obs-history", "2"], r"adding observation terms \(--env.FIELD\) is not supported"),
])
def test_a_request_that_does_not_widen_is_refused_by_name(page, tmp_path, capsys, flags,
                                                          message):
    """Narrower or deeper networks, and new observation inputs, are refused with the
    layer, its sizes and what is accepted, and nothing is written. The bug: a narrower
    layer's weights cut (outputs change) or an error from deep inside torch."""
    out = tmp_path / "refused"
    capsys.readouterr()
    assert cli_main(["surgery", str(page[0] / "runs" / "narrow"), *flags,
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trot: error:") and "Traceback" not in err
    assert re.search(message, err), err
    assert not out.exists()


@pytest.mark.parametrize("cfg, learner, message", [
    (TrainConfig(agent=PPOConfig(rnn="gru")), "ppo", "recurrent"),
    (TrainConfig(mode=Seeds(seeds=(0, 1))), "seeds", "seeds"),
])
def test_a_run_surgery_does_not_widen_is_refused_by_name(cfg, learner, message):
    with pytest.raises(SurgeryError, match=message):
        check_supported(cfg, learner)
