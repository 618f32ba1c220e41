"""`trot export RUN_DIR`: policy.onnx + policy.json + model.xml, checked before they land.

The graph is action = clip(actor_mean(normalize(obs)), -1, 1), normalizer inside. Every
export runs onnxruntime against torch on >= 10,000 observations (rollout, random and
+-10 std extremes); a max abs difference above 1e-5 fails the export and nothing is written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from trot.agents.checkpoint import temp_prefix
from trot.export.contract import build_contract, dumps, sha256
from trot.runs import LoadedRun, load_run

OPSET = 18
PARITY_TOL = 1e-5
FILES = ("policy.onnx", "policy.json", "model.xml")


class ExportError(RuntimeError):
    pass


class DeployedPolicy(nn.Module):
    """The exact function the robot runs."""

    def __init__(self, actor: nn.Module):
        super().__init__()
        self.actor = actor

    def forward(self, obs: Tensor) -> Tensor:  # [B, P] -> [B, A]
        return self.actor(obs).clamp(-1.0, 1.0)


@dataclass(frozen=True)
class ParityReport:
    observations: int
    max_abs_diff: float


@torch.no_grad()
def parity_observations(run: LoadedRun, steps: int = 100, extra: int = 2000,
                        seed: int = 0) -> np.ndarray:
    """Recorded rollout observations plus random and +-10 std extremes: [M, P] float32."""
    env, policy = run.env, DeployedPolicy(run.ac.actor)
    obs = env.reset()
    recorded = []
    for _ in range(steps):
        recorded.append(obs.policy.clone())
        obs = env.step(policy(obs.policy)).obs
    rec = torch.cat(recorded)  # [steps * N, P]
    mean, std = rec.mean(0), rec.std(0).clamp(min=1e-3)
    gen = torch.Generator().manual_seed(seed)
    rand = mean + std * torch.randn(extra, rec.shape[1], generator=gen)
    signs = torch.randint(0, 2, (extra, rec.shape[1]), generator=gen) * 2 - 1
    extreme = mean + 10.0 * std * signs
    return torch.cat([rec, rand, extreme]).numpy().astype(np.float32)


def check_parity(onnx_path: Path, policy: nn.Module, obs: np.ndarray) -> ParityReport:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = sess.run(["action"], {"obs": obs})[0]
    with torch.no_grad():
        want = policy(torch.from_numpy(obs)).numpy()
    diff = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
    report = ParityReport(len(obs), diff)
    if not diff <= PARITY_TOL:
        raise ExportError(f"ONNX/torch parity failed: max |diff| = {diff:.3g} over "
                          f"{len(obs)} observations (tolerance {PARITY_TOL})")
    return report


def write_onnx(policy: nn.Module, obs_dim: int, path: Path, metadata: str) -> None:
    import onnx

    example = torch.zeros(2, obs_dim)
    program = torch.onnx.export(
        policy, (example,), input_names=["obs"], output_names=["action"],
        dynamic_shapes=({0: torch.export.Dim("batch")},), opset_version=OPSET,
        dynamo=True, verbose=False)
    program.save(str(path))
    model = onnx.load(str(path))
    entry = model.metadata_props.add()
    entry.key, entry.value = "trot", metadata
    onnx.save(model, str(path))


EXPORT_DEPS = ("onnx", "onnxruntime", "onnxscript")  # the `export` extra


def require_export_deps() -> None:
    """Raise ExportError naming the export extra's missing packages and the install."""
    missing = []
    for name in EXPORT_DEPS:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ExportError(f"exporting needs the export extra ({', '.join(missing)} not "
                          "installed): pip install 'trot[export]'")


def check_written_model(contract: dict, xml: str, files: dict[str, bytes]) -> None:
    """The checks the runner makes at load (runner.check_model), on the model.xml about to
    be written: an export the robot side would refuse is never written."""
    import mujoco

    from trot.export.runner import ContractError, check_model

    try:
        check_model(contract, mujoco.MjModel.from_xml_string(xml, assets=files))
    except ContractError as e:
        raise ExportError(f"the contract fails its own load check: {e}") from None


def export_run(run_dir: Path, out: Path | None = None, quiet: bool = False) -> ParityReport:
    """Export a run's last checkpoint into `out` (default: the run directory)."""
    require_export_deps()
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir
    # The export needs the task's model and terms, and observations to check the graph on:
    # MuJoCo C gives both for a run trained on any backend (an mjx run compiles no MJX here).
    run = load_run(run_dir, num_envs=64, sim="cpu")
    policy = DeployedPolicy(run.ac.actor).eval()
    spec = run.env.task.build()
    xml, files = spec.to_xml(), dict(spec.assets)  # files: what model.xml reads (terrains)
    contract = build_contract(run.env, run.env.task.config, run.state["env_steps"], OPSET,
                              sha256(xml.encode()), files)
    check_written_model(contract, xml, files)
    text = dumps(contract)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix("export"), suffix=".tmp", dir=out))
    try:
        (tmp / "model.xml").write_text(xml)
        for name, blob in files.items():
            (tmp / name).write_bytes(blob)
        (tmp / "policy.json").write_text(text)
        write_onnx(policy, run.env.obs_dim, tmp / "policy.onnx", text)
        report = check_parity(tmp / "policy.onnx", policy, parity_observations(run))
        # each rename is atomic, model files first; the runner checks that all agree
        for name in (*files, *FILES):
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        print(f"exported {out / 'policy.onnx'} (parity: max |diff| {report.max_abs_diff:.2e} "
              f"over {report.observations} observations)")
    return report
