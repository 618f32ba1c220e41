"""`trot export RUN_DIR`: policy.onnx + policy.json + model.xml, checked before they land.

The graph is action = clip(actor_mean(normalize(obs)), -1, 1), normalizer inside; a
recurrent actor's graph also maps its state h (and c) to the next. Every export runs
onnxruntime against torch on >= 10,000 observations (rollout, random and +-10 std
extremes), along sequences with episode restarts for a recurrent actor; a max abs
difference above 1e-5 fails the export and nothing is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from trot.export.checks import ContractError, check_model
from trot.export.contract import STATE_NAMES, build_contract, sha256
from trot.export.schema import Contract
from trot.core.files import temp_prefix
from trot.agents.runs import load_run
from trot.tasks.env import Env

OPSET = 18
PARITY_TOL = 1e-5
FILES = ("policy.onnx", "policy.json", "model.xml")


class ExportError(RuntimeError):
    pass


class DeployedPolicy(nn.Module):
    """The exact function the robot runs: (obs, *state) -> (action, *next state), the state
    h (GRU) or h and c (LSTM) of a recurrent actor, none for an MLP."""

    def __init__(self, actor: nn.Module):
        """actor: obs [B, K * P] -> mean [B, A]; a recurrent one has `memory` (kind, hidden
        size) and `step(obs, state)`. A module without `memory` is a memoryless one."""
        super().__init__()
        self.actor = actor
        memory = getattr(actor, "memory", None)
        self.memory = None if memory is None else (memory.kind, memory.hidden)
        self.state_names = () if memory is None else STATE_NAMES[:2 if memory.kind == "lstm"
                                                                  else 1]

    def forward(self, obs: Tensor, *state: Tensor):  # [B, K * P], each [B, H]
        if self.memory is None:
            return self.actor(obs).clamp(-1.0, 1.0)  # [B, A]
        mean, nxt = self.actor.step(obs, torch.cat(state, 1))
        return (mean.clamp(-1.0, 1.0), *nxt.split(self.memory[1], dim=1))


@dataclass(frozen=True)
class ParityReport:
    observations: int
    max_abs_diff: float


@torch.no_grad()
def parity_sequences(env: Env, policy: DeployedPolicy, steps: int = 100, extra: int = 32,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Observation sequences [T, B, K * P] float32 and episode starts [T, B] bool: a
    rollout of the env's own episodes (with its resets) acted by `policy`, then sequences
    of random and +-10 std extreme observations that restart at random steps."""
    obs = env.reset()
    width = 0 if policy.memory is None else policy.memory[1]
    state = [torch.zeros(env.num_envs, width) for _ in policy.state_names]
    recorded, starts = [], [torch.zeros(env.num_envs, dtype=torch.bool)]
    for _ in range(steps):
        recorded.append(obs.policy.clone())
        out = policy(obs.policy, *state)
        action, state = (out[0], list(out[1:])) if state else (out, [])
        res = env.step(action)
        done = res.terminated | res.truncated
        state = [s.masked_fill(done[:, None], 0.0) for s in state]  # a new episode's is 0
        starts.append(done.clone())
        obs = res.obs
    rec = torch.stack(recorded)  # [T, N, K * P]
    flat = rec.flatten(0, 1)
    mean, std = flat.mean(0), flat.std(0).clamp(min=1e-3)
    gen = torch.Generator().manual_seed(seed)
    shape = (steps, extra, rec.shape[2])
    rand = mean + std * torch.randn(shape, generator=gen)
    extreme = mean + 10.0 * std * (torch.randint(0, 2, shape, generator=gen) * 2 - 1)
    restarts = torch.rand(steps, 2 * extra, generator=gen) < 0.05
    restarts[0] = False
    seq = torch.cat([rec, rand, extreme], 1)
    return seq.numpy().astype(np.float32), torch.cat([torch.stack(starts[:-1]), restarts],
                                                     1).numpy()


def check_parity(onnx_path: Path, policy: DeployedPolicy, obs: np.ndarray,
                 starts: np.ndarray) -> ParityReport:
    """onnxruntime against torch along the sequences obs [T, B, D] (starts [T, B]: the
    state restarts from zero there), on the actions and the next states."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = policy.state_names
    if not names:  # no memory: the steps are independent, one batch
        obs, starts = obs.reshape(1, -1, obs.shape[-1]), starts.reshape(1, -1)
    t, b = starts.shape
    width = 0 if policy.memory is None else policy.memory[1]
    state = [np.zeros((b, width), np.float32) for _ in names]
    diff = 0.0
    for i in range(t):
        state = [np.where(starts[i][:, None], 0.0, s).astype(np.float32) for s in state]
        got = sess.run(["action", *(f"{n}_out" for n in names)],
                       {"obs": obs[i], **dict(zip(names, state))})
        with torch.no_grad():
            want = policy(torch.from_numpy(obs[i]), *map(torch.from_numpy, state))
        want = [x.numpy() for x in (want if names else (want,))]
        diff = max([diff] + [float(np.abs(g - w).max()) if g.shape == w.shape else np.inf
                             for g, w in zip(got, want)])
        state = want[1:]  # both sides continue from torch's state
    report = ParityReport(t * b, diff)
    if not diff <= PARITY_TOL:
        raise ExportError(f"ONNX/torch parity failed: max |diff| = {diff:.3g} over "
                          f"{t * b} observations (tolerance {PARITY_TOL})")
    return report


class _Quiet(logging.Filter):
    """torch's exporter logs that torchvision's ops are skipped, four lines per export: a
    policy never holds them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("torchvision is not installed")


@contextlib.contextmanager
def _exporter_noise_off():
    """The export without the exporter's own noise, which no user can act on: torchvision's
    skipped ops, and torch's FutureWarning from its own pytree (treespec). Every other
    warning shows."""
    log = logging.getLogger("torch.onnx._internal.exporter._registration")
    quiet = _Quiet()
    log.addFilter(quiet)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`",
                                    category=FutureWarning)
            yield
    finally:
        log.removeFilter(quiet)


def write_onnx(policy: DeployedPolicy, obs_dim: int, path: Path, metadata: str) -> None:
    """obs_dim: the width of the graph's obs input (history included)."""
    import onnx

    with _exporter_noise_off():
        _write_graph(policy, obs_dim, path)
    model = onnx.load(str(path))
    entry = model.metadata_props.add()
    entry.key, entry.value = "trot", metadata
    onnx.save(model, str(path))


def _write_graph(policy: DeployedPolicy, obs_dim: int, path: Path) -> None:
    batch = torch.export.Dim("batch")
    width = 0 if policy.memory is None else policy.memory[1]
    example = (torch.zeros(2, obs_dim), *(torch.zeros(2, width) for _ in policy.state_names))
    outputs = ["action", *(f"{n}_out" for n in policy.state_names)]
    program = torch.onnx.export(
        policy, example, input_names=["obs", *policy.state_names], output_names=outputs,
        dynamic_shapes=({0: batch}, *(() if policy.memory is None else  # *state: a tuple
                                      (tuple({0: batch} for _ in policy.state_names),))),
        opset_version=OPSET,
        dynamo=True, verbose=False)
    program.save(str(path))


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


def check_written_model(contract: Contract, xml: str, files: dict[str, bytes]) -> None:
    """The checks the runner makes at load (checks.check_model), on the model.xml about to
    be written: an export the robot side would refuse is never written."""
    import mujoco


    try:
        check_model(contract, mujoco.MjModel.from_xml_string(xml, assets=files))
    except ContractError as e:
        raise ExportError(f"the contract fails its own load check: {e}") from None


def export_run(run_dir: Path, out: Path | None = None, quiet: bool = False) -> ParityReport:
    """Export a run's last checkpoint into `out` (default: the run directory)."""
    require_export_deps()
    run_dir = Path(run_dir)
    # The export needs the task's model and terms, and observations to check the graph on:
    # MuJoCo C gives both for a run trained on any backend (an mjx run compiles no MJX here).
    run = load_run(run_dir, num_envs=64, sim="cpu")
    return export_policy(run.env, DeployedPolicy(run.ac.actor), run.env.task.config,
                         run.checkpoint.counters.env_steps, run_dir if out is None else Path(out), quiet)


def export_policy(env: Env, policy: DeployedPolicy, task_config: Any, env_steps: int,
                  out: Path, quiet: bool = False) -> ParityReport:
    """Write policy.onnx, policy.json and model.xml (and the files it reads) for `policy`
    acting in `env` (a noise-free env of the trained task, cpu backend) into `out`, after
    the contract's load check and the ONNX/torch parity check; nothing lands if one fails."""
    require_export_deps()
    policy = policy.eval()
    spec = env.task.build()
    xml, files = spec.to_xml(), dict(spec.assets)  # files: what model.xml reads (terrains)
    contract = build_contract(env, task_config, env_steps, OPSET, sha256(xml.encode()),
                              files, policy.memory)
    check_written_model(contract, xml, files)
    text = contract.dumps()  # policy.json, and the graph's "trot" metadata
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix("export"), suffix=".tmp", dir=out))
    try:
        (tmp / "model.xml").write_text(xml)
        for name, blob in files.items():
            (tmp / name).write_bytes(blob)
        (tmp / "policy.json").write_text(text)
        write_onnx(policy, env.obs_dim, tmp / "policy.onnx", text)
        report = check_parity(tmp / "policy.onnx", policy, *parity_sequences(env, policy))
        # each rename is atomic, model files first; the runner checks that all agree
        for name in (*files, *FILES):
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        print(f"exported {out / 'policy.onnx'} (parity: max |diff| {report.max_abs_diff:.2e} "
              f"over {report.observations} observations)")
    return report
