"""Reading a run back (trot/runs.py) for export, eval and play: a run trained on the mjx
backend exports (and, with --sim cpu, evaluates and plays) without importing JAX."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from trot.agents.config import PPOConfig
from trot.agents.trainer import start_run
from trot.config import TrainConfig
from trot.export.onnx import FILES


@pytest.fixture(scope="module")
def mjx_run(tmp_path_factory) -> Path:
    """A tiny cartpole run trained on cpu whose config then says sim=mjx: the commands under
    test read only the config's `sim`, and training on MJX here would take minutes."""
    base = tmp_path_factory.mktemp("mjx_run")
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    agent = PPOConfig(actor_hidden=(16,), critic_hidden=(16,))
    cfg = TrainConfig(task="cartpole-balance", num_envs=16, max_env_steps=16 * 16, seed=0,
                      run_dir=str(base / "run"), agent=agent)
    trainer, run_dir = start_run(cfg)
    trainer.train(run_dir, quiet=True)
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)
    path = Path(run_dir) / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"sim": "mjx"}))
    return Path(run_dir)


def _can_render() -> bool:
    """Probed in a child: a failed GL import leaves PyOpenGL half-initialized."""
    p = subprocess.run([sys.executable, "-c", "from trot.play import probe_gl; probe_gl()"],
                       capture_output=True, text=True, timeout=120, check=False)
    return p.returncode == 0


def test_mjx_run_exports_evaluates_and_plays_without_jax(mjx_run, tmp_path):
    """Export never builds the run's mjx sim (MuJoCo C gives the model and observations);
    eval and play take --sim cpu. Play runs where OpenGL loads."""
    play = _can_render()
    code = textwrap.dedent(f"""
        import json, sys
        from trot.cli import main
        run, out = {str(mjx_run)!r}, {str(tmp_path / "out")!r}
        assert json.load(open(run + "/config.json"))["sim"] == "mjx"
        assert main(["export", run, "--out", out]) == 0
        assert main(["eval", run, "--sim", "cpu", "--episodes", "2", "--json"]) == 0
        if {play}:
            assert main(["play", run, "--sim", "cpu", "--seconds", "0.1", "--gif",
                         out + "/play.gif"]) == 0
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "jax"
                                or "mjx" in m)))
    """)
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [], "JAX was imported"
    written = {f.name for f in (tmp_path / "out").iterdir()}
    assert written >= set(FILES) and (not play or "play.gif" in written)
