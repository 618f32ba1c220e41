"""The XLA options of the mjx backend's programs, and what crosses DLPack (issue 47).

On CUDA, XLA's command buffers failed every MJX step program on the first H200 run, so trot
compiles its programs with them off, per program (never through XLA_FLAGS). No GPU is here:
these tests check the arguments trot hands to `jax.jit` for a CUDA device, and that CPU
programs get none. And no empty buffer crosses DLPack in either direction."""

from __future__ import annotations

import os

import mujoco
import pytest
import torch
from extras import need

jax = need("jax")
need("mujoco.mjx")

from trot.sim import jax_bridge  # noqa: E402
from trot.sim.mjx import COMMAND_BUFFER_ENV, MjxSim  # noqa: E402
from trot.sim.mjx_programs import _broadcaster, _programs, compiler_options  # noqa: E402

OFF = {"xla_gpu_enable_command_buffer": ""}
# no actuator activations, no mocap bodies, no user data: empty MjData fields
XML = """<mujoco><worldbody><body><freejoint/><geom size='0.1' mass='1'/></body>
<body pos='1 0 0'><joint name='hinge' type='hinge'/><geom size='0.1' mass='1'/></body></worldbody>
<actuator><motor joint='hinge'/></actuator></mujoco>"""


def _watch_jit(mp: pytest.MonkeyPatch) -> list[dict]:
    """The keyword arguments of every jax.jit call while `mp` holds."""
    calls, real = [], jax.jit

    def spy(fn, **kw):
        calls.append(kw)
        return real(fn, **kw)

    mp.setattr(jax, "jit", spy)
    return calls


@pytest.fixture
def jit_calls(monkeypatch) -> list[dict]:
    return _watch_jit(monkeypatch)


def test_cuda_programs_compile_without_command_buffers(jit_calls, monkeypatch):
    """The bug: the option forgotten on one program (reset, the batch broadcast), or passed
    as XLA_FLAGS, which would change every JAX program of the process."""
    monkeypatch.delenv(COMMAND_BUFFER_ENV, raising=False)
    gpu = compiler_options("gpu")
    _programs.__wrapped__(3, (), False, None, gpu)  # step and reset, as built for a GPU
    _broadcaster.__wrapped__(gpu)
    assert [c["compiler_options"] for c in jit_calls] == [OFF, OFF, OFF]
    assert "command_buffer" not in os.environ.get("XLA_FLAGS", "")


def test_the_switch_turns_command_buffers_back_on(monkeypatch):
    monkeypatch.delenv(COMMAND_BUFFER_ENV, raising=False)
    assert compiler_options("gpu", command_buffers=True) == ()
    monkeypatch.setenv(COMMAND_BUFFER_ENV, "1")
    assert compiler_options("gpu") == ()
    assert compiler_options("gpu", command_buffers=False) == tuple(OFF.items())


@pytest.fixture(scope="module")
def cpu_sim():
    """A CPU sim built and stepped with jax.jit watched: (sim, model, jit keyword args)."""
    model = mujoco.MjModel.from_xml_string(XML)
    _broadcaster.cache_clear()  # built afresh here, whatever ran before
    with pytest.MonkeyPatch.context() as mp:
        calls = _watch_jit(mp)
        mp.setenv(COMMAND_BUFFER_ENV, "0")
        sim = MjxSim(model, 3, substeps=5, device="cpu")  # substeps: a program cache miss
        sim.step(torch.zeros(3, model.nu))
    return sim, model, calls


def test_cpu_programs_get_no_gpu_option(cpu_sim):
    """A CPU sim, built and stepped: none of its programs carries an option (the CPU
    compiler must not be handed GPU settings)."""
    sim, _, calls = cpu_sim
    assert sim.xla_options == ()
    assert len(calls) >= 3 and all(c.get("compiler_options") is None for c in calls)


def test_no_empty_buffer_crosses_dlpack(cpu_sim, monkeypatch):
    """MJX data has empty fields here (act, mocap, userdata, ...). A step, a reset and a
    state round trip hand no zero-size buffer to DLPack either way; the empty fields still
    arrive with their shapes (a zero-length copy is one CUDA refuses in a command buffer)."""
    crossed = []
    real_in, real_out = jax.dlpack.from_dlpack, torch.from_dlpack

    def into_jax(x, *a, **kw):
        crossed.append(("to_jax", tuple(x.shape)))
        return real_in(x, *a, **kw)

    def into_torch(x, *a, **kw):
        crossed.append(("to_torch", tuple(x.shape)))
        return real_out(x, *a, **kw)

    sim, model, _ = cpu_sim
    monkeypatch.setattr(jax_bridge.jax.dlpack, "from_dlpack", into_jax)
    monkeypatch.setattr(jax_bridge.torch, "from_dlpack", into_torch)
    sim.step(torch.ones(3, model.nu))
    sim.reset(torch.tensor([True, False, True]), torch.zeros(3, model.nq),
              torch.zeros(3, model.nv))
    state = sim.state_dict()
    sim.load_state_dict(state)
    assert crossed and not [c for c in crossed if 0 in c[1]], crossed
    empty = {k: v.shape for k, v in state.items() if v.numel() == 0}
    assert "act" in empty and empty["act"] == (3, 0)
    after = sim.state_dict()
    assert {k: v.shape for k, v in after.items()} == {k: v.shape for k, v in state.items()}
    for k in state:
        torch.testing.assert_close(after[k], state[k], rtol=0, atol=0)
