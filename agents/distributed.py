"""Data-parallel training on torch.distributed, in the synchronous DD-PPO style.

Each rank simulates its own envs on its own device and holds a full replica of the learner.
Replicas stay bitwise identical because every quantity that steers an update is merged across
ranks and every merge gives all ranks the same bits:

- gradients, and the minibatch KL that drives the adaptive learning rate, travel together in
  one flattened all-reduce bucket per optimizer step;
- batch moments (observation normalizer, PopArt targets, advantage normalization) are
  all-gathered as (count, mean, var) and merged in rank order with Chan's formula, so the
  result is the moments of the union of all ranks' data.

`Comm()` (one process) is the identity for all of this, so the learner has one code path.
Launch with `torchrun --nproc_per_node=K -m trot train TASK` or `trot train TASK --nproc K`.
"""

from __future__ import annotations

import datetime
import math
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from trot.core import faults
from trot.agents.normalization import masked_moments, merge_moments


class DistributedError(RuntimeError):
    """A collective failed or timed out: another rank died or hangs."""


@dataclass(frozen=True)
class Comm:
    """This process's place in the job. The default is a job of one process."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    timeout_s: float = 0.0
    ragged: bool = False
    """the ranks' batches may differ in size (preemption): gradients are averaged weighted
    by each rank's samples rather than per rank"""

    @property
    def is_main(self) -> bool:
        """Rank 0 alone logs, checkpoints and exports."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    # ------------------------------------------------------------------ statistics
    def moments(self, x: Tensor, keep: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Moments of x: [B, *S] over B (the rows where keep [B] is true, if given) and over
        every rank's B (float64).

        Returns mean [*S], population var [*S] and the total count (0-d)."""
        mean, var, n = masked_moments(x.detach(), keep)  # [*S], [*S], [] float64
        if not self.distributed:
            return mean, var, n
        shape = mean.shape
        rows = self._gather(torch.cat([n[None], mean.flatten(), var.flatten()]))  # [W, 1+2S]
        k = mean.numel()
        m, v, c = rows[0, 1:1 + k], rows[0, 1 + k:], rows[0, 0]
        for r in rows[1:]:  # rank order: every rank does the same float ops
            m, v, c = merge_moments(m, v, c, r[1:1 + k], r[1 + k:], r[0])
        return m.view(shape), v.view(shape), c

    def mean(self, x: Tensor) -> Tensor:
        """The mean over ranks of x (any shape), identical on every rank."""
        return self._gather(x.detach().flatten()).mean(0).view_as(x) if self.distributed \
            else x

    def any(self, flag: bool, device: torch.device) -> bool:
        """True on every rank if `flag` is true on any rank (one host sync; per iteration)."""
        if not self.distributed:
            return flag
        return bool(self._gather(torch.tensor([float(flag)], device=device)).max() > 0)

    def total(self, n: int, device: torch.device) -> Tensor:
        """[1] float64: every rank's n summed (their env steps: under preemption they
        differ), for the iteration's one host sync."""
        if not self.ragged:
            return torch.tensor([float(n * self.world_size)], dtype=torch.float64,
                                device=device)
        x = torch.tensor([float(n)], dtype=torch.float64, device=device)
        self._checked(dist.all_reduce, x)
        return x

    def merge_episode_stats(self, vals: Tensor) -> Tensor:
        """EpisodeStats.pop's vector [episodes, unstable, means...] over all ranks: counts
        add up, means are weighted by each rank's episode count."""
        if not self.distributed:
            return vals
        rows = self._gather(vals)  # [W, K]
        eps = rows[:, 0]  # [W]
        means = (rows[:, 2:] * eps[:, None]).sum(0) / eps.sum().clamp(min=1.0)
        return torch.cat([rows[:, :2].sum(0), means])

    # ------------------------------------------------------------------ replicas
    def average_gradients(self, params: Iterable[torch.nn.Parameter],
                          extra: Tensor | None = None, samples: int = 1) -> Tensor | None:
        """Average every parameter's .grad over ranks, in place, as one flattened bucket;
        `extra` (a small tensor, e.g. the minibatch KL) rides in the same bucket and is
        returned averaged. `ragged`: each rank's share weighted by its `samples`."""
        if not self.distributed:
            return extra
        grads = [p.grad for p in params if p.grad is not None]
        parts = [g.reshape(-1) for g in grads] + ([] if extra is None else
                                                  [extra.detach().reshape(-1).to(grads[0])])
        if self.ragged:  # sum(samples_r * x_r) / sum(samples_r): the mean over all samples
            parts = [x * samples for x in parts] + [grads[0].new_full((1,), samples)]
        bucket = torch.cat(parts)
        self._checked(dist.all_reduce, bucket)
        if self.ragged:
            bucket = bucket[:-1] / bucket[-1]
        else:
            bucket /= self.world_size
        offset = 0
        for g in grads:
            g.copy_(bucket[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        return None if extra is None else bucket[offset:].view_as(extra).to(extra.dtype)

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers to every rank (at start: identical replicas)."""
        if self.distributed:
            for t in module.state_dict().values():
                self._checked(dist.broadcast, t, 0)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's picklable object, on every rank (e.g. the run directory)."""
        if not self.distributed:
            return obj
        box = [obj]
        self._checked(dist.broadcast_object_list, box, 0)
        return box[0]

    def gather_objects(self, obj: Any) -> list[Any] | None:
        """Every rank's object, as a list on rank 0 (None elsewhere). Checkpoint time only."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size if self.is_main else None
        self._checked(dist.gather_object, obj, out, 0)
        return out

    # ------------------------------------------------------------------ plumbing
    def _gather(self, x: Tensor) -> Tensor:  # [K] -> [W, K], rows in rank order
        out = [torch.empty_like(x) for _ in range(self.world_size)]
        self._checked(dist.all_gather, out, x.contiguous())
        return torch.stack(out)

    def _checked(self, fn, *args) -> None:
        try:
            fn(*args)
        except (RuntimeError, dist.DistError) as e:
            raise DistributedError(
                f"rank {self.rank}/{self.world_size}: a collective failed or timed out "
                f"(timeout {self.timeout_s:.0f} s); another rank has probably died or hangs. "
                f"The last checkpoint on disk is intact. Cause: {e}") from e


ONE_PROCESS = Comm()
"""A job of one process: every merge is the identity."""


class Preemption:
    """DD-PPO's straggler preemption (Wijmans et al., 2020): once `need` = ceil(F x ranks)
    ranks have collected their whole rollout, the others stop at their next step, with a
    shorter rollout. The count is a key in the job's own store (the TCPStore torchrun's
    rendezvous made), one key per rollout: one add per step on a rank still collecting."""

    def __init__(self, comm: Comm, fraction: float):
        self.store = dist.distributed_c10d._get_default_store()
        self.need = math.ceil(fraction * comm.world_size)
        self.round = 0

    def begin(self) -> None:
        """A new rollout on every rank (they collect in lockstep, one per iteration)."""
        self.round += 1
        if self.round > 2:  # every rank has passed the update after rollout round - 2
            self.store.delete_key(f"trot/preempt/{self.round - 2}")

    def finished(self) -> None:
        """This rank collected its whole rollout."""
        self.store.add(f"trot/preempt/{self.round}", 1)

    def preempted(self) -> bool:
        """Whether enough ranks have finished that this one stops collecting."""
        return self.store.add(f"trot/preempt/{self.round}", 0) >= self.need


ENV_STREAM, SHUFFLE_STREAM, NOISE_STREAM = 0, 1, 2
"""A run's random streams, each seeded rank_seed(run seed + stream, rank): the env's
(start states, commands, randomization, observation noise), the minibatch shuffles, and
the action noise. Distinct seeds: no stream re-reads another's numbers."""


def rank_seed(seed: int, rank: int) -> int:
    """A distinct env seed per rank from the one run seed (rank 0 keeps the run seed, so a
    one-process run is unchanged)."""
    return seed + 100_003 * rank


def pin_gpu(local_rank: int, visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for one rank: its own GPU out of those visible to the job.
    Set before torch or JAX initialize CUDA, both then see one GPU, as cuda:0."""
    ids = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    if local_rank >= len(ids):
        raise ValueError(f"local rank {local_rank} has no GPU: {len(ids)} visible ({ids}); "
                         "start at most one process per GPU")
    return ids[local_rank]


def pin_cpus(local_rank: int, local_world: int) -> None:
    """Give each local rank an equal share of this process's cores (the cpu sim sizes its
    thread pool from the affinity), so ranks do not fight over cores. With more ranks than
    cores, the ranks take the cores in turn (rank r: core r mod cores)."""
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // local_world)
    start = local_rank * share % len(cores)
    os.sched_setaffinity(0, cores[start:start + share])


def init_from_env(device: str, timeout_s: float) -> tuple[Comm, str]:
    """Join the job torchrun describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR/PORT); without it, a job of one. Returns the comm and this rank's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Comm(), device
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if device.startswith("cuda"):
        os.environ["CUDA_VISIBLE_DEVICES"] = pin_gpu(local, os.environ.get(
            "CUDA_VISIBLE_DEVICES"))
        device, backend = "cuda:0", "nccl"
        torch.cuda.set_device(0)
    else:
        pin_cpus(local, local_world)
        backend = "gloo"
    if not dist.is_initialized():
        # torch.distributed.nn.functional binds group.WORLD as a default argument when it
        # is imported; imported after init (torch.optim pulls it in through torch._dynamo)
        # it holds the group, destroy_process_group cannot free it and gloo's threads
        # outlive shutdown() into interpreter exit (see shutdown). Imported now, it binds None.
        from torch.distributed.nn import functional  # noqa: F401

        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return Comm(rank, world, local, timeout_s), device


def shutdown() -> None:
    """Leave the job, on every rank, once its last collective has returned.

    A barrier (the job's timeout) first: no rank tears down its connections while a peer
    still has gloo work in flight, and while it waits (the GIL released) gloo's worker
    threads finish releasing the tensors of the last collectives. Then the process group
    is destroyed, which joins those threads: a thread still alive at interpreter exit that
    drops a tensor with a Python object attached needs the GIL, is killed by the exiting
    interpreter, and takes the process down with SIGABRT ("terminate called without an
    active exception"). `init_from_env` makes sure nothing else keeps the group alive."""
    faults.point("before-shutdown")
    if not dist.is_initialized():
        return
    try:  # the default timeout: the job's, given to init_process_group
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(wait_all_ranks=True)  # names a rank that never came
        else:
            dist.barrier()
    except (RuntimeError, dist.DistError) as e:
        # after the last checkpoint: nothing is lost, leave anyway (torchrun reports the
        # rank that died)
        print(f"trot: warning: rank {dist.get_rank()}: not every rank reached the end of "
              f"the job: {e}", file=sys.stderr, flush=True)
    dist.destroy_process_group()
