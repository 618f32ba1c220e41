"""The export path (`trot.export`): ONNX/torch parity, the torch-free runner and its
observation builder against the training env, contract checks and clear errors, atomic and
reproducible exports, sim2sim against eval, and the `trot export` / `trot sim2sim` CLI."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import mujoco
import numpy as np
import onnx
import pytest
import torch
from contract_edit import edited_export

import trot.export.onnx as export_onnx
from trot.agents.loop import train
from trot.agents.checkpoint import load_checkpoint
from trot.agents.config import PPOConfig
from trot.agents.evaluate import evaluate
from trot.agents.learners import start
from trot.cli import main as cli_main
from trot.agents.train_config import TrainConfig
from trot.export.onnx import FILES, OPSET, ExportError, export_run
from trot.export.runner import ContractError, ObservationBuilder, OnnxPolicy
from trot.export.schema import Contract
from trot.export.sim2sim import run_sim2sim
from trot.agents.runs import CHECKPOINT, load_run

TASK = "cartpole-balance"
TOL = 1e-5
FULL = mujoco.mjtState.mjSTATE_INTEGRATION  # the cpu backend's state rows


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    """MuJoCo may write MUJOCO_LOG.TXT into the cwd; training sets torch's thread count and
    seeds the global RNG: keep both from leaking into other tests."""
    monkeypatch.chdir(tmp_path)
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)


def _train(run_dir: Path, num_envs: int, steps: int, agent: PPOConfig, seed: int = 0):
    cfg = TrainConfig(task=TASK, num_envs=num_envs, max_env_steps=steps, seed=seed,
                      run_dir=str(run_dir), agent=agent)
    trainer, run_dir = start(cfg)
    train(trainer, run_dir, quiet=True)
    return trainer, run_dir


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A briefly trained cartpole run (quality irrelevant), exported into its own directory."""
    base = tmp_path_factory.mktemp("small")
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)
        agent = dataclasses.replace(PPOConfig(), actor_hidden=(32, 32), critic_hidden=(32, 32))
        _, run_dir = _train(base / "run", 64, 64 * 16 * 3, agent)
        export_run(run_dir, quiet=True)
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)
    return run_dir


def _copy_export(run_dir: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy2(run_dir / name, dst / name)
    return dst


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------- 1. parity
@torch.no_grad()
def test_onnx_matches_torch_on_rollout_observations(small_run):
    run = load_run(small_run, num_envs=16, seed=7)
    actor = run.ac.actor
    obs = run.env.reset()
    recorded = []
    for _ in range(60):
        recorded.append(obs.policy.clone())
        obs = run.env.step(actor(obs.policy).clamp(-1.0, 1.0)).obs
    x = torch.cat(recorded)  # [960, P]
    want = actor(x).clamp(-1.0, 1.0).numpy()

    policy = OnnxPolicy(small_run)
    got = policy.act(x.numpy())
    assert got.shape == want.shape == (len(x), run.env.action_dim)
    assert got.dtype == np.float32
    assert np.abs(got - want).max() <= TOL
    got64 = policy.act(x.numpy().astype(np.float64))  # float64 input is accepted too
    assert np.abs(got64 - want).max() <= TOL
    for i in range(0, len(x), 97):  # single-observation form: [P] -> [A]
        one = policy.act(x[i].numpy())
        assert one.shape == (run.env.action_dim,)
        assert np.abs(one - want[i]).max() <= TOL
    assert np.all(np.abs(got) <= 1.0)


def test_runner_never_imports_torch(small_run, tmp_path):
    code = textwrap.dedent(f"""
        import sys
        import mujoco
        import numpy as np
        from trot.export.runner import OnnxPolicy, ObservationBuilder
        p = OnnxPolicy({str(small_run)!r})
        m = mujoco.MjModel.from_xml_path(str(p.model_xml))
        d = mujoco.MjData(m)
        mujoco.mj_forward(m, d)
        a = p.act(ObservationBuilder(p.contract, m).build(d))
        assert a.shape == (p.action_dim,), a.shape
        d.ctrl[:] = p.ctrl(a)
        assert 'torch' not in sys.modules, sorted(k for k in sys.modules if 'torch' in k)
        print('ok')
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


# ---------------------------------------------------------------------------- 2. builder
@torch.no_grad()
def test_observation_builder_reproduces_training_obs(small_run):
    run = load_run(small_run, num_envs=8, seed=3)  # load_run turns observation noise off
    env, actor = run.env, run.ac.actor
    assert not env.noise
    policy = OnnxPolicy(small_run)
    model = mujoco.MjModel.from_xml_path(str(policy.model_xml))
    data = mujoco.MjData(model)
    builder = ObservationBuilder(policy.contract, model)
    substeps = int(policy.contract.substeps)
    assert substeps == env.sim.substeps
    scale = np.asarray(policy.contract.action_scale, dtype=np.float32)
    offset = np.asarray(policy.contract.action_offset, dtype=np.float32)

    # At reset: sensors come from mj_forward of the reset state.
    obs = env.reset()
    state = env.sim.state_dict()["state"].numpy()  # [N, INTEGRATION] float64
    for i in range(env.num_envs):
        mujoco.mj_resetData(model, data)
        mujoco.mj_setState(model, data, state[i], FULL)
        mujoco.mj_forward(model, data)
        builder.last_action[:] = 0.0
        assert np.abs(builder.build(data) - obs.policy[i].numpy()).max() <= TOL

    # After steps: replay each env's pre-step state with the same control for `substeps`
    # plain mj_steps and compare with the observation of the reached state (before reset).
    checked = 0
    for t in range(40):
        pre = env.sim.state_dict()["state"].numpy().copy()
        action = actor(obs.policy).clamp(-1.0, 1.0)
        res = env.step(action)
        obs = res.obs
        if t % 5:
            continue
        a = action.numpy()
        for i in range(env.num_envs):
            mujoco.mj_resetData(model, data)
            mujoco.mj_setState(model, data, pre[i], FULL)
            data.ctrl[:] = (offset + scale * a[i]).astype(np.float64)  # as the env: float32
            for _ in range(substeps):
                mujoco.mj_step(model, data)
            builder.last_action[:] = a[i]
            diff = np.abs(builder.build(data) - res.final_obs.policy[i].numpy()).max()
            assert diff <= TOL, (t, i, diff)
            checked += 1
    assert checked == 8 * env.num_envs


# ---------------------------------------------------------------------------- 3. errors
@pytest.mark.parametrize("missing", FILES)
def test_missing_file_is_named(small_run, tmp_path, missing):
    d = _copy_export(small_run, tmp_path / "exp")
    (d / missing).unlink()
    with pytest.raises(ContractError, match=missing.replace(".", r"\.")):
        OnnxPolicy(d)


def test_renamed_file_is_named(small_run, tmp_path):
    d = _copy_export(small_run, tmp_path / "exp")
    (d / "model.xml").rename(d / "cartpole.xml")
    with pytest.raises(ContractError, match=r"model\.xml"):
        OnnxPolicy(d)


def test_json_that_disagrees_with_onnx(small_run, tmp_path):
    for field, value in (("obs_dim", 99), ("action_dim", 3), ("model_xml_sha256", "0" * 64)):
        d = _copy_export(small_run, tmp_path / field)
        c = json.loads((d / "policy.json").read_text())
        c[field] = value
        (d / "policy.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
        with pytest.raises(ContractError, match="does not match"):
            OnnxPolicy(d)
    d = _copy_export(small_run, tmp_path / "garbage")
    (d / "policy.json").write_text("{not json")
    with pytest.raises(ContractError, match="not valid JSON"):
        OnnxPolicy(d)


def test_each_contract_check_fires_on_its_own(small_run, tmp_path):
    """json and onnx metadata edited together: the graph-shape and hash checks still catch it."""
    c = Contract.from_json(json.loads((small_run / "policy.json").read_text()))
    for field, value, pattern in (("obs_dim", c.obs_dim + 1, "obs_dim"),
                                  ("action_dim", c.action_dim + 1, "action_dim"),
                                  ("model_xml_sha256", "0" * 64, "hash")):
        d = edited_export(small_run, tmp_path / field, lambda c: c.update({field: value}))
        with pytest.raises(ContractError, match=pattern):
            OnnxPolicy(d)
    OnnxPolicy(edited_export(small_run, tmp_path / "untouched", lambda c: None))  # harmless


def test_modified_model_xml_fails_hash(small_run, tmp_path):
    d = _copy_export(small_run, tmp_path / "exp")
    xml = (d / "model.xml").read_bytes()
    (d / "model.xml").write_bytes(xml.replace(b'gear="10"', b'gear="20"', 1) if b'gear="10"'
                                  in xml else xml + b"\n")
    assert (d / "model.xml").read_bytes() != xml
    with pytest.raises(ContractError, match="hash"):
        OnnxPolicy(d)


def test_nonexistent_directory_is_named(tmp_path):
    with pytest.raises(ContractError, match="missing policy.onnx"):
        OnnxPolicy(tmp_path / "nope")


def test_nonexistent_directory_error_names_it(tmp_path):
    with pytest.raises(ContractError, match="nope"):
        OnnxPolicy(tmp_path / "nope")


def test_corrupt_onnx_is_a_contract_error(small_run, tmp_path):
    d = _copy_export(small_run, tmp_path / "exp")
    (d / "policy.onnx").write_bytes(b"not an onnx model")
    with pytest.raises(ContractError, match=r"policy\.onnx"):
        OnnxPolicy(d)


def test_bad_observations(small_run):
    p = OnnxPolicy(small_run)
    n = p.obs_dim
    for shape in ((n + 1,), (n - 1,), (4, n + 1), (2, 3, n), ()):
        with pytest.raises(ValueError, match="shape"):
            p.act(np.zeros(shape, dtype=np.float32))
    for dtype in (np.int64, np.int32, np.float16, bool):
        with pytest.raises(TypeError, match="dtype"):
            p.act(np.zeros(n, dtype=dtype))
    with pytest.raises(TypeError):
        p.act([0] * n)  # a list of ints is int64 too


def test_non_finite_observations(small_run):
    """act refuses NaN and Inf (they would reach a policy's memory for good); the builder
    reads a faulty sensor as 0, as training's build_obs reads a diverged env's values."""
    p = OnnxPolicy(small_run)
    for bad in (np.nan, np.inf, -np.inf):
        x = np.zeros((2, p.obs_dim), np.float32)
        x[1, 1] = bad
        with pytest.raises(ValueError, match=re.escape("NaN or Inf values at [1]")):
            p.act(x)
    builder = ObservationBuilder(p.contract, p.model)
    data = mujoco.MjData(p.model)
    mujoco.mj_forward(p.model, data)
    assert p.model.nsensordata > 0 and any(t.kind == "sensor"
                                           for t in p.contract.observation)
    data.sensordata[:] = np.nan
    faulty = builder.build(data)
    data.sensordata[:] = 0.0
    assert np.array_equal(faulty, builder.build(data))


def test_failed_parity_writes_nothing(small_run, tmp_path, monkeypatch):
    monkeypatch.setattr(export_onnx, "PARITY_TOL", -1.0)
    out = tmp_path / "out"
    with pytest.raises(ExportError, match="parity"):
        export_run(small_run, out, quiet=True)
    assert list(out.iterdir()) == []  # no trio, no leftover .export-* temp dir

    # An existing good export is left byte-identical.
    good = _copy_export(small_run, tmp_path / "good")
    before = _files(good)
    with pytest.raises(ExportError):
        export_run(small_run, good, quiet=True)
    assert _files(good) == before
    assert sorted(p.name for p in good.iterdir()) == sorted(FILES)


# ---------------------------------------------------------------------------- 4. contract
def test_exports_are_reproducible(small_run, tmp_path):
    """A second export of the fixture's checkpoint, into another directory, is identical
    (the whole onnx file too: no timestamps or random names in it)."""
    a, b = small_run, tmp_path / "b"
    export_run(small_run, b, quiet=True)
    for name in ("policy.json", "model.xml"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ga = onnx.load(str(a / "policy.onnx")).graph.SerializeToString()
    gb = onnx.load(str(b / "policy.onnx")).graph.SerializeToString()
    assert ga == gb
    assert (a / "policy.onnx").read_bytes() == (b / "policy.onnx").read_bytes()


def test_contract_content(small_run):
    text = (small_run / "policy.json").read_text()
    c = Contract.from_json(json.loads(text))  # every key there, none unknown
    run = load_run(small_run, num_envs=1)
    env = run.env

    assert c.task == TASK
    assert c.training_env_steps == load_checkpoint(small_run / CHECKPOINT).counters.env_steps > 0
    assert c.opset == OPSET
    assert c.control_dt == pytest.approx(0.02) and c.physics_dt == pytest.approx(0.01)
    assert c.substeps == 2
    assert c.obs_dim == env.obs_dim and c.action_dim == env.action_dim == 1
    assert c.model_xml == "model.xml"

    layout = c.observation
    start = 0
    for entry, slot in zip(layout, env.policy_layout.slots, strict=True):
        assert entry.name == slot.term.name
        assert entry.start == start and entry.size == slot.size
        assert entry.scale == slot.term.scale
        assert len(entry.offset) == entry.size
        assert entry.kind == "sensor"
        assert entry.source["sensors"] == list(slot.term.sensors)
        start += entry.size
    assert start == c.obs_dim
    assert [e.name for e in layout] == ["cart_pos", "pole_axis", "cart_vel", "pole_vel"]

    model = mujoco.MjModel.from_xml_path(str(small_run / "model.xml"))
    assert [a.name for a in c.actions] == [
        mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) for i in range(model.nu)]
    assert c.actions[0].name == "push" and c.actions[0].joint == "slider"
    assert c.actions[0].type == "motor" and c.actions[0].gear == 10.0
    scale, offset = env.task.action_affine(env.sim.model)
    assert c.action_scale == tuple(scale) and c.action_offset == tuple(offset)
    assert c.action_clip == (-1.0, 1.0)

    m = onnx.load(str(small_run / "policy.onnx"))
    meta = {p.key: p.value for p in m.metadata_props}
    assert meta["trot"] == text
    assert {o.domain: o.version for o in m.opset_import}[""] == OPSET
    assert [i.name for i in m.graph.input] == ["obs"]
    assert [o.name for o in m.graph.output] == ["action"]


# ---------------------------------------------------------------------------- 5. sim2sim
def test_sim2sim_agrees_with_eval(tmp_path):
    """A trained balance policy scores the same in a plain MjData as in the batched env.
    Training stops as soon as the deterministic policy balances (usually after 100k steps)."""
    cfg = TrainConfig(task=TASK, num_envs=256, max_env_steps=100_000, seed=0,
                      run_dir=str(tmp_path / "run"))
    trainer, run_dir = start(cfg)
    for budget in range(100_000, 300_001, 25_000):
        trainer.cfg = dataclasses.replace(trainer.cfg, max_env_steps=budget)
        train(trainer, run_dir, quiet=True)
        ev = evaluate(run_dir, episodes=16)
        if ev["mean_return"] >= 0.95 * ev["max_return"]:
            break
    export_run(run_dir, quiet=True)
    s2s = run_sim2sim(run_dir, episodes=8)
    assert s2s["mean_return"] == pytest.approx(ev["mean_return"], rel=0.05), (s2s, ev)
    assert ev["mean_return"] >= 0.8 * ev["max_return"], f"training did not balance: {ev}"
    assert s2s["max_return"] == ev["max_return"] == 500.0
    assert s2s["env_steps"] == ev["env_steps"]
    assert s2s.keys() == ev.keys()  # docs/export.md: the same keys as trot eval


# ---------------------------------------------------------------------------- 6. CLI
def test_cli_export_and_sim2sim(small_run, tmp_path, capsys):
    out = tmp_path / "cli-out"
    assert cli_main(["export", str(small_run), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert (out / "policy.json").read_bytes() == (small_run / "policy.json").read_bytes()
    OnnxPolicy(out)
    capsys.readouterr()

    assert cli_main(["sim2sim", str(small_run), "--episodes", "2", "--json"]) == 0
    s2s = json.loads(capsys.readouterr().out)
    assert cli_main(["eval", str(small_run), "--episodes", "2", "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)

    run = load_run(small_run, num_envs=1)
    second_halves = {f"{k}_second_half" for k in run.env.task.eval_metrics(run.env.sim)}
    assert second_halves  # cartpole reports "upright"
    assert set(s2s) == set(ev) >= second_halves  # the task's metrics, their second halves
    assert set(s2s) >= {"mean_return", "std_return", "episodes", "mean_length", "env_steps",
                        "max_return"}
    assert s2s["episodes"] == 2.0 and s2s["env_steps"] == ev["env_steps"]
    assert s2s["max_return"] == ev["max_return"] == 500.0


def test_cli_export_without_checkpoint_is_an_error_message(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli_main(["export", str(tmp_path / "empty")]) == 2
    assert "checkpoint" in capsys.readouterr().err


def test_an_export_prints_no_exporter_noise_but_keeps_other_warnings(small_run, tmp_path,
                                                                     monkeypatch):
    """torch's exporter logs four 'torchvision is not installed' lines and torch raises a
    FutureWarning from its own pytree at every export: noise no user can act on (issue 73).
    Both are gone, and a warning of another kind raised during the export still shows.
    The bugs: the noise back, or every warning silenced with it."""
    import warnings

    graph = export_onnx._write_graph

    def with_a_warning(*args, **kwargs):
        graph(*args, **kwargs)
        warnings.warn("a warning a user should see", UserWarning, stacklevel=1)

    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "trot", "export", str(small_run), "--out",
                           str(tmp_path / "quiet")], capture_output=True, text=True,
                          timeout=300, check=False)  # a new process: warnings not yet shown
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torchvision" not in done.stderr + done.stdout, done.stderr
    assert "FutureWarning" not in done.stderr, done.stderr
    monkeypatch.setattr(export_onnx, "_write_graph", with_a_warning)
    with pytest.warns(UserWarning, match="a warning a user should see"):
        export_run(small_run, tmp_path / "loud", quiet=True)
