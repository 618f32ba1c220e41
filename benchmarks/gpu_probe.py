"""Where does MJX on this GPU break? Four stages, each a few steps, each reported OK or with
its error's first line, from plain JAX up to trot's own mjx env:

  1. jax          a jitted program on JAX-made arrays
  2. mjx          jit(vmap(mjx.step)) of a pendulum on JAX-made arrays
  3. mjx+dlpack   the same with the state imported from torch (DLPack) and read back
  4. trot         make_env(TASK, NUM_ENVS, sim="mjx") stepping with torch actions, its
                  programs as trot compiles them (on CUDA: XLA's command buffers off)
  5. trot+cb      the same with the command buffers on (TROT_XLA_COMMAND_BUFFERS=1)

Stages 2 and 3 run with XLA's defaults (command buffers on). On the H200 (2026-12-04, JAX
0.11.2, CUDA 13, torch 2.11) trot's step program failed with "CUDA error: Failed to set
memcpy D2D node params: CUDA_ERROR_INVALID_VALUE" (XLA's command buffers: CUDA graphs);
stage 5 says whether they still cause it. benchmarks/gpu_check.sh runs this first.

    python benchmarks/gpu_probe.py -- cartpole-balance --num-envs 64 --device cuda

It exits 0 iff stage 4 ran. It takes no flags of its own; after `--` come `trot train`'s
(default `cartpole-balance --num-envs 64 --device cuda`): the task and the env count of
stages 4 and 5, `--env.FIELD V`, and the torch device (cuda or cpu).
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass

import numpy as np

from trot.agents.train_config import TrainConfig
from trot.benchmark import main

PENDULUM = """<mujoco><worldbody><body><joint name="h" type="hinge" axis="0 1 0"/>
<geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05"/></body></worldbody>
<actuator><motor joint="h"/></actuator></mujoco>"""


def _jax(jdev) -> str:
    import jax
    import jax.numpy as jnp
    x = jax.device_put(jnp.arange(1024.0), jdev)
    y = jax.jit(lambda a: (a * 2.0).sum())(x)
    return f"sum {float(y):.0f}"


def _mjx_batch(jdev, n: int):
    import jax
    import mujoco
    from mujoco import mjx
    m = mujoco.MjModel.from_xml_string(PENDULUM)
    mx = jax.device_put(mjx.put_model(m), jdev)
    d = jax.device_put(mjx.make_data(m), jdev)
    batch = jax.vmap(lambda q: d.replace(qpos=q))(jax.device_put(
        np.linspace(-1, 1, n, dtype=np.float32)[:, None], jdev))
    return mx, batch, jax.jit(jax.vmap(lambda dd: mjx.step(mx, dd)))


def _mjx(jdev) -> str:
    _, d, step = _mjx_batch(jdev, 64)
    for _ in range(10):
        d = step(d)
    return f"qpos[0] {float(d.qpos[0, 0]):+.4f}"


def _mjx_dlpack(jdev, device) -> str:
    import torch
    from trot.sim.jax_bridge import to_jax, to_torch
    _, d, step = _mjx_batch(jdev, 64)
    q = torch.linspace(-1, 1, 64, device=device)[:, None].contiguous()
    d = d.replace(qpos=to_jax(q))
    for _ in range(10):
        d = step(d)
        q = to_torch(d.qpos)  # read back each step, as the env loop does
    return f"qpos[0] {float(q[0, 0]):+.4f}"


def _trot(cfg: TrainConfig, device) -> str:
    import torch
    import trot
    env = trot.make_env(cfg.task, num_envs=cfg.num_envs, sim="mjx", device=device, seed=0,
                        config=cfg.env)
    env.reset()
    gen = torch.Generator(device=env.device).manual_seed(0)
    for _ in range(10):
        a = torch.rand(env.num_envs, env.action_dim, generator=gen, device=env.device) * 2 - 1
        res = env.step(a)
    return (f"impl {env.sim.impl}, XLA options {dict(env.sim.xla_options)}, reward mean "
            f"{float(res.reward.mean()):.4f}")


def _trot_command_buffers(cfg: TrainConfig, device) -> str:
    from trot.sim.mjx import COMMAND_BUFFER_ENV
    saved = os.environ.get(COMMAND_BUFFER_ENV)
    os.environ[COMMAND_BUFFER_ENV] = "1"  # read when the sim is built: its programs only
    try:
        return _trot(cfg, device)
    finally:
        if saved is None:
            os.environ.pop(COMMAND_BUFFER_ENV)
        else:
            os.environ[COMMAND_BUFFER_ENV] = saved


@dataclass(frozen=True)
class Settings:
    """The probe has no settings of its own: the task, env count and device are the train
    arguments' (after --)."""


def run(s: Settings, cfg: TrainConfig) -> int:
    import torch
    from trot.sim import resolve_device
    from trot.sim.jax_bridge import jax_device
    device = resolve_device(cfg.device)
    jdev = jax_device(device)
    print(f"probe on {device} / {jdev}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    stages = [("jax", lambda: _jax(jdev)), ("mjx", lambda: _mjx(jdev)),
              ("mjx+dlpack", lambda: _mjx_dlpack(jdev, device)),
              ("trot", lambda: _trot(cfg, device)),
              ("trot+cb", lambda: _trot_command_buffers(cfg, device))]
    ok = {}
    for name, stage in stages:
        try:
            ok[name] = True
            print(f"  {name:11s} OK   {stage()}", flush=True)
        except Exception as e:  # noqa: BLE001 (the point is to report any failure)
            ok[name] = False
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print(f"  {name:11s} FAIL {type(e).__name__}: {first[:300]}", flush=True)
            traceback.print_exc(limit=3)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return 0 if ok["trot"] else 1


if __name__ == "__main__":
    sys.exit(main(Settings, run, ("cartpole-balance", "--num-envs", "64", "--device", "cuda")))
