"""Collection overlapped with learning (`TrainConfig.async_collect`): Sample Factory's
double buffering, in one process.

While update k runs on rollout k, a worker thread collects rollout k+1 into the other
buffer, acting with the parameters after update k-1. That is exactly the schedule of
`actor_lag=1` (rollout k+1 is collected by the actor of update k-1 there too), so the two
train alike to the bit; only the order in time differs. Nothing is shared between the
threads while they run: the collector owns the env, the behaviour actor (a copy), the
noise generator and the acting memory; the learner owns the actor-critic, the optimizer
and the shuffle generator. The critic's V(s_t) pass over a rollout waits for the learner
(it needs the critic after update k, as in the lagged schedule).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from trot.agents.storage import Rollout

Collect = Callable[[Rollout, dict], Rollout]  # (buffer, actor state) -> the filled buffer


class Prefetch:
    """Two rollout buffers and one collector thread. `begin` hands out rollout k and starts
    collecting k+1; `end` waits for it. Between `end` and the next `begin` (where
    checkpoints are written) the collected rollout is `pending`, saved with the run."""

    def __init__(self, buffers: tuple[Rollout, Rollout], collect: Collect):
        self.buffers, self.collect = buffers, collect
        self.pending: Rollout | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="trot-collect")
        self._future: Future | None = None

    def begin(self, current: dict, newest: dict) -> Rollout:
        """Rollout k (collected by `current`'s actor now if none is pending: the first
        iteration), and rollout k+1 started by `newest`'s (the learner's before update k)."""
        if self._future is not None:
            raise RuntimeError("Prefetch.begin twice without end")
        ro = self.pending or self.collect(self.buffers[0], current)
        spare = self.buffers[1] if ro is self.buffers[0] else self.buffers[0]
        self.pending = None
        self._future = self._pool.submit(self.collect, spare, newest)
        return ro

    def end(self) -> None:
        """Wait for the collector; its errors are raised here, in the learner's thread."""
        future, self._future = self._future, None
        self.pending = future.result()

    def state_dict(self) -> dict | None:
        return None if self.pending is None else self.pending.state_dict()

    def load_state_dict(self, state: dict | None) -> None:
        self.pending = None
        if state is not None:
            self.buffers[0].load_state_dict(state)
            self.pending = self.buffers[0]
