"""Random draws for per-step task code, made in blocks.

A task that samples every control step (start states for the envs that reset) pays one RNG
call per step; on the CPU at a few thousand envs that call costs more than the numbers it
draws. `UniformBank` draws `block` steps' worth at once and hands out one step's slice.
The draws stay a deterministic function of the env's generator, the bank is part of the
task's checkpoint state (a resumed run draws what a straight run would), and a task clears
it in `Task.restart`, so that a full reset after a reseed draws what a fresh env would.
"""

from __future__ import annotations

import torch
from torch import Tensor


class UniformBank:
    """Uniform [0, 1) draws [N, K], made `block` steps at a time from the given generator."""

    def __init__(self, n: int, k: int, device: torch.device, block: int = 32):
        if block <= 0:
            raise ValueError(f"block must be a positive number of steps, got {block}")
        self.buf = torch.empty(block, n, k, device=device)  # [B, N, K]
        self.next_row = block  # empty: the first call draws

    def draw(self, gen: torch.Generator) -> Tensor:
        """[N, K]: this step's draws (a view: valid until the next call)."""
        if self.next_row == self.buf.shape[0]:
            torch.rand(self.buf.shape, generator=gen, device=self.buf.device, out=self.buf)
            self.next_row = 0
        row = self.buf[self.next_row]
        self.next_row += 1
        return row

    def clear(self) -> None:
        """Drop the draws made ahead: the next call draws from the generator as it is then
        (after a reseed, `Env.reset` -> `Task.restart`)."""
        self.next_row = self.buf.shape[0]

    def state_dict(self) -> dict[str, Tensor]:
        return {"buf": self.buf.clone(), "next_row": torch.tensor(self.next_row)}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.buf.copy_(state["buf"])
        self.next_row = int(state["next_row"])
