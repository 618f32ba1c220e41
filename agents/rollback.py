"""Undoing an update whose parameters came out NaN/Inf, without a deepcopy per iteration."""

from __future__ import annotations

import torch


class Rollback:
    """The learner's tensors (model parameters and buffers, optimizer state, the learning
    rate) as they were before an update, copied into buffers allocated once; `restore`
    copies them back, so a NaN update is undone without a deepcopy every iteration."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 extra: tuple[torch.Tensor, ...] = ()):
        self.model, self.optimizer, self.extra = model, optimizer, extra
        self.saved: list[torch.Tensor] = []

    def _live(self) -> list[torch.Tensor]:
        opt = [v for group in self.optimizer.param_groups for p in group["params"]
               for v in self.optimizer.state.get(p, {}).values() if torch.is_tensor(v)]
        return [*self.model.state_dict().values(), *opt, *self.extra]

    @torch.no_grad()
    def save(self) -> None:
        live = self._live()
        if [t.shape for t in live] != [t.shape for t in self.saved]:  # first call, or the
            self.saved = [t.detach().clone() for t in live]  # optimizer just made its state
        else:
            torch._foreach_copy_(self.saved, live)

    @torch.no_grad()
    def restore(self) -> None:
        live = self._live()
        if len(live) != len(self.saved):  # the optimizer's state was born in this update
            self.optimizer.state.clear()
            live = self._live()
        torch._foreach_copy_(live, self.saved)
