"""The bf16 update (`PPOConfig.update_dtype`): its gradients follow float32's, the weights and
the optimizer stay float32, a recurrent actor and narrow inputs run under it, and 'auto'
picks bf16 only where the device multiplies it natively."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from test_ppo import CPU, _cfg, _reference_a2c_step, _setup
from test_trainer import _isolate  # noqa: F401  (autouse: cwd, threads, RNG restored)
from trot.agents import capture as capture_module
from trot.agents.config import tuned
from trot.agents.capture import native_bf16
from trot.agents.ppo import PPO
from trot.agents.learners import build
from trot.agents.train_config import TrainConfig
from trot.tasks.registry import get_task


def _flat_grads(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in module.parameters()])


def test_bf16_a2c_step_follows_the_float32_reference_and_keeps_float32_weights():
    """One A2C step under bf16 autocast against the textbook float32 step (test_ppo's
    reference): the gradient points the same way to bf16's precision, but is not float32's
    to the bit. Catches a flag that does nothing (equal gradients), a graph cut by the cast
    of the means (a zero actor gradient), and autocast leaking into the weights or Adam."""
    cfg = _cfg(actor_hidden=(64, 64), critic_hidden=(64, 64), max_grad_norm=1e3)
    ac, batch = _setup(cfg)
    ref = copy.deepcopy(ac)
    algo = PPO(ac, dataclasses.replace(cfg, update_dtype="bfloat16").as_a2c(), CPU)
    assert algo.bf16
    algo.update(batch, torch.Generator().manual_seed(0))
    _reference_a2c_step(ref, batch, cfg)

    for part in ("actor", "critic"):
        g, g_ref = _flat_grads(getattr(ac, part)), _flat_grads(getattr(ref, part))
        cos = torch.nn.functional.cosine_similarity(g, g_ref, dim=0).item()
        assert cos > 0.995, f"{part}: bf16 gradient off float32's direction (cos {cos:.4f})"
        rel = ((g - g_ref).norm() / g_ref.norm()).item()
        assert 1e-5 < rel < 0.05, f"{part}: relative gradient error {rel:.2e}"
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32
               for p in ac.parameters())
    assert all(s.dtype == torch.float32 for st in algo.optimizer.state.values()
               for s in st.values() if torch.is_tensor(s) and s.is_floating_point())


def _trained(update_dtype: str, run_dir) -> torch.nn.Module:
    """Two iterations of the blind cartpole (5-number observations: the narrow-input Linear
    path) with a GRU actor, from the same seed."""
    entry = get_task("cartpole-balance-blind")
    agent = dataclasses.replace(tuned(entry.agent), rnn="gru", update_dtype=update_dtype)
    tr = build(TrainConfig(task="cartpole-balance-blind", num_envs=32, seed=0, agent=agent,
                           max_env_steps=10**9, run_dir=str(run_dir)))
    for _ in range(2):
        tr.iterate()
    return tr.ac


def test_bf16_update_runs_a_recurrent_actor_on_narrow_inputs(tmp_path):
    """A GRU actor's truncated-BPTT update and the narrow-input Linear under autocast: the
    narrow path's own backward would meet a bf16 gradient with a float32 weight and fail,
    so autocast takes nn.Linear's. The weights end near float32's, and not on them."""
    bf, fp = _trained("bfloat16", tmp_path / "bf"), _trained("float32", tmp_path / "fp")
    diffs = [(a - b).abs().max().item() for a, b in zip(bf.parameters(), fp.parameters())]
    assert max(diffs) > 0.0
    assert max(diffs) < 0.05


@pytest.mark.parametrize("flags, native", [
    ("flags : fpu sse avx2 avx512f avx512bw avx512_vnni", False),
    ("flags : fpu avx512f avx512_bf16 avx512vl", True),
    ("flags : fpu amx_bf16 amx_tile", True),
    ("", False),
])
def test_auto_uses_bf16_only_where_the_cpu_has_it(monkeypatch, flags, native):
    """'auto' reads the CPU's flags: avx512bw or avx512_vnni alone (bf16 emulated, slower
    than float32) must not count."""
    monkeypatch.setattr(capture_module, "_cpu_flags", lambda: flags)
    assert native_bf16(CPU) is native
    cfg = _cfg(update_dtype="auto")
    ac, _ = _setup(cfg)
    assert PPO(ac, cfg, CPU).bf16 is native
    assert PPO(ac, dataclasses.replace(cfg, update_dtype="float32"), CPU).bf16 is False


def test_unknown_update_dtype_is_refused():
    with pytest.raises(ValueError, match="update_dtype must be float32, bfloat16 or auto"):
        _cfg(update_dtype="float16").validate(num_envs=16)
