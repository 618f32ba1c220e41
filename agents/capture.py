"""One switch for graph capture, `TrainConfig.capture`: the per-step torch code and the
PPO minibatch's forward and loss run through `torch.compile`, or eagerly (the reference).

What is captured (each a pure function of tensors, traced as one graph by
tests/test_capture.py):
- the act step given its noise (`Actor.sample_with`);
- the observation, reward and termination of a step (`Env.observe`, `Task.reward`,
  `Task.terminated`);
- a minibatch's forward and loss (`PPO.forward_loss`).
What stays eager by design: the random draws (generators), the physics launch (MuJoCo C or
an XLA program), resets, backward (AOTAutograd runs the compiled graph's own backward) and
the fused Adam step.

Settings:
- "auto": on CUDA, inductor's default mode (kernel fusion: each piece becomes a few fused
  kernels instead of dozens of launches); off on the CPU, where per-op dispatch is cheap
  next to MuJoCo's step and compiling costs seconds per piece.
- "off": eager everywhere.
- "BACKEND" or "BACKEND:MODE": that torch.compile backend (and mode) on any device, e.g.
  "inductor", "aot_eager" (the CPU test's: traced and decomposed, no code generated), or
  "inductor:reduce-overhead" (CUDA graphs).
"auto" does not pick reduce-overhead: a CUDA graph's outputs are overwritten by its next
replay, and the env keeps a step's observation into the next (history stacking, the
rollout's obs), so every kept output would need a copy; that trade is for a GPU window to
measure (docs/benchmarks.md, "GPU").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)
AUTO_ON_CUDA = ("inductor", None)  # backend, mode (None: the default mode)
EAGER = ("auto", "off")


def check_setting(setting: str) -> None:
    """A ValueError naming the accepted values unless `setting` is one."""
    if setting in EAGER:
        return
    backend, _, mode = setting.partition(":")
    import torch._dynamo  # only for an explicit backend: importing Dynamo costs a second

    modes = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
    if backend not in torch._dynamo.list_backends(exclude_tags=()) or \
            (mode and mode not in modes):  # the message lists the usual ones, not debug
        usual = ", ".join([*torch._dynamo.list_backends(), "aot_eager", "eager"])
        raise ValueError(f"capture must be 'auto', 'off', a torch.compile backend "
                         f"({usual}) or BACKEND:MODE with a mode of {', '.join(modes)}; "
                         f"got {setting!r}")


def compiler(setting: str, device: torch.device) -> Callable[[F], F]:
    """fn -> fn run as `setting` says on `device`: itself (eager) or torch.compile(fn)."""
    check_setting(setting)
    if setting == "off" or (setting == "auto" and torch.device(device).type != "cuda"):
        return lambda fn: fn
    backend, mode = AUTO_ON_CUDA if setting == "auto" else setting.partition(":")[::2]
    return lambda fn: torch.compile(fn, backend=backend, mode=mode or None, dynamic=False)


@functools.cache
def _cpu_flags() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: no flags to read, so no claim of native bf16
        return ""


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 natively: a CUDA GPU that says so, or a CPU whose
    flags list avx512_bf16 or amx_bf16. Elsewhere bf16 products are emulated and slower
    than float32, so update_dtype='auto' keeps float32 there."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and re.search(r"\b(avx512_bf16|amx_bf16)\b",
                                              _cpu_flags()) is not None
