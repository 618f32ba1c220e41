"""`trot surgery` (agents/surgery.py): a run's networks widened keep its actions and values,
their new units learn, and `trot train --resume` continues the new run. The trained run is
docs/surgery.md's (a blind cartpole, given wider layers and its velocities as new policy
inputs), its commands run as printed (in this process: each new one would import torch
again). About 60 s on 2 busy cores, most of it the page's two short trainings."""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import io
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

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
from trot.agents.surgery_inputs import InputError, check_actions, map_slots, named_slots
from trot.agents.train_config import TrainConfig, to_json
from trot.cli import main as cli_main
from trot.tasks.observation import ObsLayout, ObsSlot, ObsTerm

DOC = REPO / "docs" / "surgery.md"
N_OBS = 1000


def _run_line(line: str, folder: Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(out):
        rc = cli_main(shlex.split(line)[1:])
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, list[str]]:
    """docs/surgery.md's commands as printed, in a fresh folder: a blind cartpole run with
    32 32 hidden layers, its surgery to wider ones that also sees the velocities, and the
    resume of the new run; returns the folder and each command's output."""
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


def _observations(ac: ActorCritic, n: int = N_OBS, critic: bool = False) -> torch.Tensor:
    """n observations [n, P] (critic: [n, C]) around the normalizer's statistics, out to 3
    spreads."""
    norm = ac.critic.normalizer if critic else ac.actor.normalizer
    gen = torch.Generator().manual_seed(7)
    z = torch.rand(n, norm.mean.shape[0], generator=gen, dtype=torch.float64) * 6 - 3
    return (norm.mean + norm.var.sqrt() * z).float()


def _assert_same_outputs(old: ActorCritic, new: ActorCritic, obs: torch.Tensor,
                         cobs: torch.Tensor | None = None, new_obs: torch.Tensor | None = None,
                         new_cobs: torch.Tensor | None = None) -> None:
    """The old networks on obs [B, P] and cobs [B, C] (default obs), the new ones on
    new_obs and new_cobs (default the same)."""
    cobs = obs if cobs is None else cobs
    new_obs = obs if new_obs is None else new_obs
    new_cobs = cobs if new_cobs is None else new_cobs
    with torch.no_grad():
        torch.testing.assert_close(new.actor(new_obs), old.actor(obs), rtol=1e-5, atol=1e-6)
        assert torch.equal(new.actor.log_std, old.actor.log_std)
        torch.testing.assert_close(new.critic(new_cobs), old.critic(cobs), rtol=1e-5,
                                   atol=1e-5)
        torch.testing.assert_close(new.critic.value(new_cobs), old.critic.value(cobs),
                                   rtol=1e-5, atol=1e-5)


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
    obs, cobs = _observations(old.ac), _observations(old.ac, critic=True)
    assert old.ac.actor(obs).std() > 0.01  # the comparison sees the policy's inputs
    _assert_same_outputs(old.ac, new.ac, obs, cobs)
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
def _outputs(ac: ActorCritic, obs: torch.Tensor, cobs: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each hidden layer's outputs [B, H] on obs [B, P] (the actor's) and cobs [B, C] (the
    critic's), the network's own modules."""
    out = {}
    for net, o in (("actor", obs), ("critic", cobs)):
        part = getattr(ac, net)
        x, i = part.normalizer(o), 0
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
    cobs = learner.rollout.critic_obs.flatten(0, 1)  # [T * N, C]: blind, the critic sees more
    on = {k: (v > 0).any(0)[old[k.split(".")[0]][int(k[-1])]:]  # [new units] activated
          for k, v in _outputs(start, obs, cobs).items()}
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
    """docs/surgery.md: the resume of the new run (wider, and seeing the velocities) builds
    the wide networks and the sighted envs from its config.json and trains on from the old
    run's counters, writing metrics rows. The bugs: a config.json that still says the old
    widths or the old task settings (the checkpoint would not load, or load narrow or
    blind), env states of the old observation loaded into the new envs, counters that
    restart, logs that repeat or lose the old run's iterations."""
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
    model = now.model
    assert read_checkpoint(narrow).model["actor.torso.0.weight"].shape == (32, 4)  # blind
    assert model["actor.torso.0.weight"].shape == (64, 6)  # + cart_vel and pole_vel
    assert json.loads((wide_run / "config.json").read_text())["env"]["blind"] is False
    assert model["actor.torso.2.weight"].shape == (48, 64)
    assert model["critic.torso.2.weight"].shape == (32, 128)
    assert _iterations(wide_run / "metrics.csv") == list(range(1, now.counters.iteration + 1))
    assert _iterations(narrow / "metrics.csv") == list(range(1, was.iteration + 1))  # as it was
    record = json.loads((wide_run / "surgery.json").read_text())
    assert record["iteration"] == was.iteration and record["from"] == str(narrow.resolve())
    assert record["env_overrides"] == {"blind": [True, False]}
    assert record["added_inputs"]["policy"] == ["cart_vel", "pole_vel"]
    assert record["added_inputs"]["critic"] == [] and record["envs"].startswith("fresh")
    assert "new inputs: policy ['cart_vel', 'pole_vel']" in outs[1]


@pytest.mark.parametrize("run, flags, message", [
    ("narrow", ["--agent.actor-hidden", "64", "16"],
     r"actor hidden layer 1 \(actor_hidden\[1\]\): 32 -> 16 units is narrower"),
    ("narrow", ["--agent.critic-hidden", "8", "64"],
     r"critic hidden layer 0 \(critic_hidden\[0\]\): 32 -> 8 units is narrower"),
    ("narrow", ["--agent.actor-hidden", "64", "64", "64"],
     r"the run's actor has 2 hidden layers"),
    ("wide", ["--env.blind"], (
        r"policy observation slot 'cart_vel' \(1 value\) of the run is not in the new "
        r"policy observation with --env.blind: removed; .*accepted: overrides that keep "
        r"each of the run's observation slots")),
])
def test_a_request_that_does_not_widen_is_refused_by_name(page, tmp_path, capsys, run, flags,
                                                          message):
    """Narrower or deeper networks, an override that removes an observation term (the
    sighted run made blind) and a flag surgery does not take are refused with the layer or
    slot, its sizes and what is accepted, and nothing is written. The bugs: a narrower
    layer's weights cut (outputs change), a removed input's columns silently dropped (the
    policy acts on other numbers), an error from deep inside torch."""
    out = tmp_path / "refused"
    capsys.readouterr()
    assert cli_main(["surgery", str(page[0] / "runs" / run), *flags,
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


@pytest.fixture(scope="module")
def seeing(page, tmp_path_factory) -> Path:
    """The page's blind run given its velocities and a 2-frame history through the library:
    the policy's 4 old inputs (cart_pos, pole_axis) go to columns 6-9, between new ones
    (the older frame's 6 at 0-5, the velocities at 10-11); the critic is unchanged."""
    narrow = page[0] / "runs" / "narrow"
    env = dataclasses.replace(load_run(narrow, num_envs=1).cfg.env, blind=False, obs_history=2)
    out = tmp_path_factory.mktemp("seeing") / "run"
    surgery(narrow, out, (48, 32), None, env)
    return out


def _placed(x: torch.Tensor, old_env, new_env, history: bool) -> torch.Tensor:
    """x [B, P] of the old layout in a [B, P'] of the new one, placed by slot name from
    the layouts (the newest history frame), the rest N(0, 100^2)."""
    old_l, new_l = (old_env.policy_layout, new_env.policy_layout) if history else \
        (old_env.critic_layout, new_env.critic_layout)
    frame = (new_env.history - 1) * new_l.dim if history else 0  # the newest frame's start
    dim = new_env.obs_dim if history else new_env.critic_obs_dim
    out = 100.0 * torch.randn(x.shape[0], dim, generator=torch.Generator().manual_seed(3))
    new_at = {s.term.name: s.start for s in new_l.slots}
    for s in old_l.slots:
        out[:, frame + new_at[s.term.name]:][:, :s.size] = x[:, s.start:s.start + s.size]
    return out


def test_new_inputs_keep_actions_and_values_whatever_they_hold(page, seeing):
    """1,000 observations of the blind run's own envs (its policy acting), given to the old
    networks as they are and to the new ones placed by the layouts' slot names with values
    of spread 100 in the new inputs: the same means, log_std and values; the normalizers
    keep the old inputs' statistics at their new places and measured ones for the new
    inputs. The bugs: old columns placed at the wrong offset when new inputs sit before
    and between them (the history frame), new columns left random, the normalizer's
    statistics shifted by a slot, new inputs normalized with mean 0 / var 1 placeholders."""
    old, new = load_run(page[0] / "runs" / "narrow", num_envs=100), load_run(seeing, 1)
    obs, cobs, ob = [], [], old.env.reset()
    with torch.no_grad():
        for _ in range(N_OBS // 100):  # [100, P] and [100, C] per step
            obs.append(ob.policy)
            cobs.append(ob.critic)
            ob = old.env.step(old.ac.actor(ob.policy).clamp(-1, 1)).obs
    obs, cobs = torch.cat(obs), torch.cat(cobs)  # [1000, 4], [1000, 6]
    assert obs.shape == (N_OBS, 4) and new.env.obs_dim == 12 and obs[:, 0].std() > 0
    new_obs, new_cobs = _placed(obs, old.env, new.env, True), _placed(cobs, old.env, new.env,
                                                                        False)
    assert torch.equal(new_obs[:, 6:10], obs)  # cart_pos, pole_axis: the newest frame's first
    _assert_same_outputs(old.ac, new.ac, obs, cobs, new_obs, new_cobs)
    was, now = old.ac.actor.normalizer, new.ac.actor.normalizer
    assert torch.equal(now.mean[6:10], was.mean) and torch.equal(now.var[6:10], was.var)
    assert torch.equal(now.count, was.count)  # one count for every input: the run's
    added = torch.tensor([0, 1, 2, 3, 4, 5, 10, 11])
    assert (now.var[added] != 1.0).all() and (now.mean[added] != 0.0).any()  # measured
    assert torch.equal(new.ac.critic.normalizer.mean, old.ac.critic.normalizer.mean)
    w = new.ac.actor.torso[0].weight  # [48, 12]; rows 32-47 the new units' (fresh, unread)
    assert not w[:32, added].any() and torch.equal(
        w[:32, 6:10], old.ac.actor.torso[0].weight)  # the old columns where their inputs went
    record = json.loads((seeing / "surgery.json").read_text())
    assert record["added_inputs"]["policy"] == ["cart_pos@t-1", "pole_axis@t-1",
                                                "cart_vel@t-1", "pole_vel@t-1", "cart_vel",
                                                "pole_vel"]
    assert record["env_overrides"] == {"obs_history": [1, 2], "blind": [True, False]}


def test_one_step_after_surgery_moves_the_new_input_columns(seeing):
    """The run with new inputs resumed (its fresh envs) and trained one iteration: every
    new input column of the actor's first layer (zero before in the old units' rows) whose
    input is not always 0 has moved; the counters go on. The bug: new inputs that never learn
    (columns zeroed in a way the optimizer skips, or inputs clipped to a constant)."""
    learner, _ = resume(seeing)
    added = torch.tensor([0, 1, 2, 3, 4, 5, 10, 11])
    w0 = learner.ac.actor.torso[0].weight[:, added].detach().clone()  # [48, 8]
    assert not w0[:32].any()  # the old units' new columns: zero
    learner.iterate()
    moved = learner.ac.actor.torso[0].weight[:, added].detach() != w0  # [48, 8]
    seen = learner.ac.actor.normalizer(learner.rollout.obs.flatten(0, 1))[:, added]  # [TN, 8]
    live = seen.abs().amax(0) > 0  # [8]: the pole axis's y is 0 on a planar hinge, always
    assert live.sum() >= 6, live
    assert moved[:32, live].any(0).all(), "a new input's column of the old units did not move"
    assert moved[:32, live].float().mean() > 0.5  # most rows: the units the inputs activate
    assert learner.iteration == read_checkpoint(seeing).counters.iteration + 1


def _layout(*terms: tuple[str, int]) -> ObsLayout:
    slots, start = [], 0
    for name, size in terms:
        slots.append(ObsSlot(ObsTerm(name, "command"), start, size))
        start += size
    return ObsLayout(tuple(slots), start)


def test_an_input_whose_size_or_definition_changes_is_refused_by_name():
    """A term whose size changes (a 3-value command made 4) and one read at another scale
    are refused, naming the slot, the sizes and what is accepted; a term moved behind a
    new one is accepted with its columns' new places. The bugs: a resized term's columns
    copied into the wrong places, a rescaled input fed to the old weights."""
    old = named_slots(_layout(("gravity", 3), ("command", 3)))
    with pytest.raises(InputError, match=r"policy observation slot 'command' has 3 values "
                       r"in the run and 4 with --env.x 1: its size changed; accepted"):
        map_slots("policy", old, named_slots(_layout(("gravity", 3), ("command", 4))), 7,
                  {"x": [0, 1]})
    rescaled = named_slots(ObsLayout((ObsSlot(ObsTerm("gravity", "command", scale=2.0), 0,
                                              3), ObsSlot(ObsTerm("command", "command"), 3, 3)), 6))
    with pytest.raises(InputError, match=r"slot 'gravity' reads other numbers .*scale 1.0 "
                       r"-> 2.0"):
        map_slots("critic", old, rescaled, 6, {})
    index, added = map_slots("policy", old, named_slots(
        _layout(("clock", 2), ("command", 3), ("gravity", 3))), 8, {})
    assert index.tolist() == [5, 6, 7, 2, 3, 4] and added == ["clock"]


def test_an_override_that_changes_the_actions_is_refused():
    """An override that changes the action scale (a legged task's --env.action-scale) is
    refused, naming what changed. The bug: a policy whose outputs now mean other motor
    targets, with its outputs 'kept'."""
    def env(scale):
        task = SimpleNamespace(action_scale=torch.tensor(scale), action_offset=torch.zeros(2),
                               action_latency_steps=lambda: 0)
        return SimpleNamespace(action_dim=2, task=task)
    check_actions(env([0.25, 0.25]), env([0.25, 0.25]), {})
    with pytest.raises(InputError, match=r"--env.action-scale 0.5 change the action space's "
                       r"scale per actuator: \[0.25, 0.25\] -> \[0.5, 0.5\]"):
        check_actions(env([0.25, 0.25]), env([0.5, 0.5]), {"action_scale": [0.25, 0.5]})
