"""The episode statistics the env loop keeps on the device: sums of finished episodes'
return, length and reward terms, drained once per iteration (tasks/env.py)."""

from __future__ import annotations

import torch
from torch import Tensor


class EpisodeStats:
    """Device-side accumulators of finished episodes, drained once per iteration.
    Columns of `running` and `sums`: a constant 1 (so that `sums[0]` counts the finished
    episodes), return, length, then one per reward term."""

    def __init__(self, n: int, k: int, device: torch.device):
        self.running = torch.zeros(n, 3 + k, device=device)  # [N, 3 + K] episodes in progress
        self.running[:, 0] = 1.0
        self.sums = torch.zeros(3 + k, device=device)  # [3 + K] over finished episodes
        self.unstable = torch.zeros((), device=device)  # count of envs the NaN guard reset
        # [N] 1.0 where this env's episode started at step 0, 0.0 for a staggered start
        self.counted = torch.ones(n, device=device)
        self.all_counted = True  # counted is all ones (Env.reset(stagger=True) clears it)
        # [2 + K] what an unstable env's step records: (0, 1, 0...), its length only
        self.unstable_step = torch.zeros(2 + k, device=device)
        self.unstable_step[1] = 1.0
        self._tail = self.running[:, 1:]  # views made once: the per-episode columns ...
        self._running_t = self.running.T  # ... and the transpose the sums multiply

    def record(self, step: Tensor, done: Tensor, n_unstable: Tensor | None) -> None:
        """step: [N, 2 + K] this step's (reward, 1, terms); done: [N] bool; n_unstable: []
        envs reset by the NaN guard at this step (None: none)."""
        self._tail += step
        if self.all_counted:  # host flag: no staggered first episode is still running
            d = done.float()
        else:
            d = done * self.counted  # [N] a staggered first episode is partial: skip it
            self.counted.masked_fill_(done, 1.0)
        self.sums.addmv_(self._running_t, d)
        if n_unstable is not None:
            self.unstable += n_unstable
        self._tail.masked_fill_(done[:, None], 0.0)

    def take(self) -> Tensor:
        """[4 + K]: the finished episodes' sums and the unstable count since the last take
        or pop, then zeroed (a remote actor's, for the learner's `add`)."""
        out = torch.cat([self.sums, self.unstable[None]])
        self.sums.zero_()
        self.unstable.zero_()
        return out

    def add(self, taken: Tensor) -> None:
        """Fold another env's `take` [4 + K] in, as if its episodes had finished here."""
        self.sums += taken[:-1]
        self.unstable += taken[-1]

    def restart(self, counted: Tensor | None = None) -> None:
        """Every env starts a new episode: drop the running ones. counted: [N] bool, which
        envs' new episodes count (False: a staggered, partial one); None: all."""
        self._tail.zero_()
        if counted is None:
            self.counted.fill_(1.0)
        else:
            self.counted.copy_(counted)
        self.all_counted = counted is None

    def pop(self, term_names: tuple[str, ...]) -> tuple[list[str], Tensor]:
        """Means over the episodes finished since the last pop, as one device vector (no
        host sync), and zero the accumulators. Means read 0 when no episode finished."""
        names = ["episodes", "unstable_envs", "episode_return", "episode_length"]
        names += [f"reward/{k}" for k in term_names]
        episodes = self.sums[0]
        vals = torch.cat([torch.stack([episodes, self.unstable]),
                          self.sums[1:] / episodes.clamp(min=1.0)])
        for t in (self.sums, self.unstable):
            t.zero_()
        return names, vals

    def drain(self, term_names: tuple[str, ...]) -> dict[str, float]:
        """`pop` with the host sync: plain floats; means only when an episode finished."""
        names, vals = self.pop(term_names)
        out = dict(zip(names, vals.tolist()))
        if out["episodes"] == 0:
            out = {k: out[k] for k in ("episodes", "unstable_envs")}
        return out
