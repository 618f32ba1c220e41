"""K seeds trained in one process as one batched program: `trot train TASK --seeds 0 1 2`.

Each seed is a whole one-seed learner, a `Trainer` (agents/trainer.py): its env on its own
block of rows of one shared sim (sim/rows.py), its actor-critic, Adam, KL-adaptive learning
rate, observation normalizers, PopArt statistics, noise and shuffle generators, NaN
rollback and checkpoint. What makes the K of them one program: their actor-critics'
tensors live in stacked storage [K, ...] (each seed's parameters and buffers are views of
its slice), and the networks run once for every seed under `torch.func.vmap`:
- each control step, the actor's sampling (`_sample`);
- each iteration, the critic's values of the rollout and of the states it reached;
- each minibatch, `PPO.forward_loss` and its backward pass.
The iteration is the one-seed learner's, not a copy: the collector's step loop (agents/
collect.py) steps the blocks as one env (tasks/blocks.py) with the vmapped sampling as its
acting; each seed's advantages and PopArt are its Trainer's `prepare`; the update is
agents/ppo.py's `epochs` with the vmapped minibatch step. The physics is one call for all
K x N envs. Per seed remain the work that is a seed's own:
its task's torch code (its random draws come from its env's generator), its action-noise
and shuffle draws, GAE and PopArt's move, the normalizers' update, and the optimizer step
(torch's fused Adam takes one learning rate per call). A seed's NaN update is undone for
that seed alone.

The run directory holds `seed_S/` for each seed S, a plain one-seed run directory that
eval, export, play and sim2sim load (and `trot train --resume` continues alone), written
after each checkpoint, plus `seeds.csv` (median and range across seeds per iteration) and
the combined checkpoint that `trot train --resume RUN_DIR` continues every seed from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_map

from trot.agents.checkpoint import Checkpoint, Counters, require_keys, save_checkpoint
from trot.agents.collect import Collector
from trot.agents.distributed import ENV_STREAM, ONE_PROCESS, rank_seed
from trot.agents.loop import CHECKPOINT, OneRun
from trot.agents.networks import ActorCritic
from trot.agents.ppo import epochs, normalize_advantages
from trot.agents.runs import read_checkpoint, write_config
from trot.agents.seed_logs import SeedLogs, seeds_progress_line, summarize
from trot.agents.storage import Batch, Rollout
from trot.agents.modes import Sync
from trot.agents.train_config import TrainConfig, to_json
from trot.agents.trainer import Trainer, TrainingDiverged
from trot.sim.rows import load_blocks
from trot.tasks.blocks import Blocks
from trot.tasks.registry import make_block_envs


def seed_dir(run_dir: Path, seed: int) -> Path:
    return Path(run_dir) / f"seed_{seed}"


def seed_config(cfg: TrainConfig, run_dir: Path, seed: int) -> TrainConfig:
    """The one-seed run that seed `seed` of `cfg` is, in its own directory."""
    return dataclasses.replace(cfg, seed=seed, mode=Sync(),
                               run_dir=str(seed_dir(run_dir, seed)))


def stack_modules(modules: list[nn.Module]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Move the tensors of K modules of one architecture into stacked storage: returns
    their parameters [K, ...] (leaves that require grad, so their .grad is [K, ...]) and
    buffers [K, ...] by name, and makes module k's own parameters and buffers views of
    slice k, so that whatever updates a module in place (its optimizer, PopArt, a
    normalizer, a checkpoint load) updates the stack."""
    named = [(dict(m.named_parameters()), dict(m.named_buffers())) for m in modules]
    params = {n: torch.stack([p[n].detach() for p, _ in named]).requires_grad_()
              for n in named[0][0]}
    buffers = {n: torch.stack([b[n] for _, b in named]) for n in named[0][1]}
    for k, m in enumerate(modules):
        for n, stacked in params.items():
            owner, attr = _owner(m, n)
            owner._parameters[attr] = nn.Parameter(stacked.detach()[k])  # shares storage
        for n, stacked in buffers.items():
            owner, attr = _owner(m, n)
            owner._buffers[attr] = stacked[k]
    return params, buffers


def _owner(m: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (m.get_submodule(path) if path else m), attr


def stacked(template: nn.Module, params: dict[str, Tensor], buffers: dict[str, Tensor],
            fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn(template, *args) for every slice k of the stacked tensors at once: a function of
    args [K, ...] whose outputs are [K, ...]. Runs `template`'s own code under vmap with
    the stack's tensors in place of its own (torch.func.functional_call)."""
    call = _Call(template, fn)
    p = {f"m.{n}": t for n, t in params.items()}
    b = {f"m.{n}": t for n, t in buffers.items()}
    program = vmap(lambda pk, bk, *a: functional_call(call, (pk, bk), a))
    return lambda *args: program(p, b, *args)


class _Call(nn.Module):
    """A module whose forward is fn(module, *args): functional_call's way into any method."""

    def __init__(self, module: nn.Module, fn: Callable[..., Any]):
        super().__init__()
        self.m, self.fn = module, fn

    def forward(self, *args: Any) -> Any:
        return self.fn(self.m, *args)


class StackedActing:
    """The collector's acting step for K seeds (agents/collect.py's `algo.act`): the
    observations [K N, P] of the blocks, each seed's noise from its own generator, one
    vmapped actor pass."""

    def __init__(self, sample: Callable[..., Any], trainers: list[Trainer], n: int):
        self.sample, self.trainers, self.n = sample, trainers, n
        self.no_state = torch.zeros(len(trainers), n, 0, device=trainers[0].device)

    def act(self, obs: Tensor, actor: nn.Module | None, gen: torch.Generator | None,
            state: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        eps = torch.stack([tr.noise(self.n) for tr in self.trainers])  # [K, N, A]
        action, log_prob, mean, _ = self.sample(obs.view(len(self.trainers), self.n, -1),
                                                eps, self.no_state)  # [K, N, A], ...
        return action.flatten(0, 1), log_prob.flatten(), mean.flatten(0, 1), state


class StackedSeeds(OneRun):
    """K one-seed learners (the Seeds mode's seeds) stepped, acted and updated as one
    program (agents/loop.py's `Learner`)."""

    kind: ClassVar[str] = "ppo-seeds"

    def __init__(self, cfg: TrainConfig, run_dir: Path):
        cfg.validate()
        self.cfg, self.run_dir, self.comm = cfg, Path(run_dir), ONE_PROCESS
        seeds = cfg.mode.seeds
        a, k, n = cfg.agent_effective, len(seeds), cfg.num_envs
        self.envs = make_block_envs(cfg.task, n, cfg.sim, cfg.device,
                                    [rank_seed(s + ENV_STREAM, 0) for s in seeds], cfg.env)
        env = self.envs[0]
        self.device = env.device
        acs = []
        for s in seeds:  # each initialised as its one-seed run's
            torch.manual_seed(s)
            acs.append(ActorCritic(env.obs_dim, env.critic_obs_dim, env.action_dim, a)
                       .to(env.device))
        self.params, self.buffers = stack_modules(acs)
        storage = Rollout.allocate(a.rollout_steps, k * n, env.obs_dim, env.critic_obs_dim,
                                   env.action_dim, env.device)
        self.trainers = [Trainer(seed_config(cfg, run_dir, s), e, ac=ac,
                                 storage=_block(storage, i, n))
                         for i, (s, e, ac) in enumerate(zip(seeds, self.envs, acs))]
        template, loss = acs[0], self.trainers[0].algo.forward_loss
        sample = stacked(template, self.params, self.buffers,
                         lambda m, obs, eps, st: m.actor.sample_with(obs, eps, st))
        self.collector = Collector(cfg, Blocks(self.envs), StackedActing(sample, self.trainers,
                                                                         n), template, storage, 0)
        self._value = stacked(template, self.params, self.buffers,
                              lambda m, obs: m.critic.value(obs))
        self._loss = stacked(template, self.params, self.buffers, lambda m, table, ls: loss(
            Batch._from_table(table, self._like), None, ls))
        self._like: tuple[Tensor, ...] = ()  # a batch's fields: the loss's table layout
        self._shuffled: Tensor | None = None  # [K, B, W] the epoch's shuffled batches
        self._linked = False  # whether each seed's .grad are views of the stack's
        self.last: list[dict[str, float]] = []  # each seed's metrics of the last iteration

    # ------------------------------------------------------------------ counters
    @property
    def iteration(self) -> int:
        return self.trainers[0].iteration

    @iteration.setter
    def iteration(self, i: int) -> None:
        for tr in self.trainers:
            tr.iteration = i

    @property
    def env_steps(self) -> int:
        """Each seed's own (the budget is per seed, as for K one-seed runs)."""
        return self.trainers[0].env_steps

    @env_steps.setter
    def env_steps(self, n: int) -> None:
        for tr in self.trainers:
            tr.env_steps = n

    # ------------------------------------------------------------------ one iteration
    def iterate(self) -> dict[str, float]:
        """Every seed's iteration as the one-seed Trainer's, with one host sync for all;
        returns the summary across seeds (each seed's own metrics: `last`)."""
        trs = self.trainers
        for tr in trs:
            tr.rollback.save()
        ro = self.collector.collect()
        next_values = self.fill_values(ro)
        batches = [tr.algo.prepare(tr.rollout, nv) for tr, nv in zip(trs, next_values)]
        stats = self.update(batches)
        measured = [tr.measure(b, s, tr.comm.total(ro.steps * self.cfg.num_envs,
                                                    self.device))
                    for tr, b, s in zip(trs, batches, stats)]
        flat = torch.cat([v for _, v in measured]).tolist()  # the one host sync
        self.last, at = [], 0
        for seed, tr, (names, v) in zip(self.cfg.mode.seeds, trs, measured):
            try:
                self.last.append(tr.account(dict(zip(names, flat[at:at + len(v)]))))
            except TrainingDiverged as e:
                raise TrainingDiverged(f"seed {seed}: {e}") from None
            at += len(v)
        return summarize(self.last)

    @torch.no_grad()
    def fill_values(self, ro: Rollout) -> list[Tensor]:
        """V(s_t) into the rollout, in one vmapped critic pass with the values of the states
        each step reached; returns those, per seed [T, N]."""
        k, n, t = len(self.envs), self.cfg.num_envs, ro.steps
        per_seed = lambda x: x.view(t, k, n, -1).transpose(0, 1).reshape(k, t * n, -1)  # noqa: E731
        v = self._value(torch.cat([per_seed(ro.critic_obs), per_seed(ro.final_critic_obs)],
                                  1))  # [K, 2 T N]
        values, next_values = v.view(k, 2, t, n).unbind(1)  # [K, T, N] each
        ro.values.view(t, k, n).copy_(values.transpose(0, 1))
        return list(next_values.unbind())

    def update(self, batches: list[Batch]) -> list[dict[str, Tensor]]:
        """`PPO.update` for every seed at once (memoryless, unlagged): agents/ppo.py's
        `epochs`, each seed shuffling with its own generator, the minibatch loss stacked.
        Returns each seed's statistics (0-d tensors)."""
        cfg, trs = self.trainers[0].algo.cfg, self.trainers
        old_log_std = self.params["actor.log_std"].detach().clone()  # [K, A]
        if cfg.advantage_norm == "batch":
            for b in batches:
                b.advantages.copy_(normalize_advantages(b.advantages))
        self._like = batches[0].fields()
        if self._shuffled is None or self._shuffled.shape[1:] != batches[0].table.shape:
            self._shuffled = torch.empty(len(batches), *batches[0].table.shape,
                                         device=self.device)
        sums = epochs(cfg, [b.table for b in batches], [tr.gen for tr in trs], self._shuffled,
                      lambda mb, adapt: self._minibatch(mb, old_log_std, adapt))
        return [{name: v[i] for name, v in sums.items()} for i in range(len(trs))]

    def _minibatch(self, table: Tensor, old_log_std: Tensor, adapt: bool
                   ) -> dict[str, Tensor]:
        """One SGD step of every seed on its minibatch (table [K, B, W]); statistics [K]."""
        loss, stats = self._loss(table, old_log_std)  # [K]
        for p in self.params.values():
            if p.grad is not None:
                p.grad.zero_()
        loss.sum().backward()  # seed k's loss reaches only slice k of the stack
        if not self._linked:
            self._link_grads()
        kl = stats["kl"]
        steps = [tr.algo.apply_gradients(kl[i], adapt) for i, tr in enumerate(self.trainers)]
        return stats | {name: torch.stack([s[name] for s in steps]) for name in steps[0]}

    def _link_grads(self) -> None:
        """Each seed's parameters get their slice of the stack's gradients as .grad, which
        its own clip and Adam step then read."""
        for i, tr in enumerate(self.trainers):
            for name, p in tr.ac.named_parameters():
                p.grad = self.params[name].grad[i]
        self._linked = True

    # ------------------------------------------------------------------ the run
    def policy(self) -> None:
        return None  # RULES refuse eval_every: each seed is evaluated in its directory

    def open_logger(self, run_dir: Path, at: Counters) -> SeedLogs:
        return SeedLogs([seed_dir(run_dir, s) for s in self.cfg.mode.seeds],
                        Path(run_dir) / "seeds.csv", at.iteration, at.env_steps,
                        lambda: self.last)

    def progress(self, m: dict[str, float]) -> str:
        return seeds_progress_line(m, len(self.trainers), self.cfg)

    def run_dirs(self, run_dir: Path) -> list[Path]:
        return [seed_dir(run_dir, s) for s in self.cfg.mode.seeds]

    def write_views(self, run_dir: Path, checkpoint: Checkpoint) -> None:
        """Each seed's one-seed run (config.json and checkpoint), after the combined
        checkpoint: a seed's own is never ahead of it, unless the seed was continued on
        its own, which `load_state_dict` then refuses."""
        for tr, state in zip(self.trainers, checkpoint.state["seeds"]):
            own = Path(tr.cfg.run_dir)
            write_config(own, dataclasses.replace(tr.cfg, max_env_steps=self.cfg.max_env_steps,
                                                  minutes=self.cfg.minutes))
            save_checkpoint(own / CHECKPOINT, Checkpoint(
                Trainer.kind, to_json(tr.cfg), checkpoint.counters, state))

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Each seed's one-seed learner state (compact copies)."""
        return {"seeds": [_compact(tr.state_dict()) for tr in self.trainers]}

    def load_state_dict(self, state: dict) -> None:
        require_keys(state, ("seeds",), "the seeds checkpoint's state")
        seeds = self.cfg.mode.seeds
        if len(state["seeds"]) != len(self.trainers):
            raise ValueError(f"the checkpoint holds {len(state['seeds'])} seeds, this run "
                             f"{len(self.trainers)} ({list(seeds)})")
        for s in seeds:
            own = seed_dir(self.run_dir, s)
            if (own / CHECKPOINT).is_file() and \
                    read_checkpoint(own).counters.iteration > self.iteration:
                raise ValueError(f"{own} was continued on its own past the seeds' iteration "
                                 f"{self.iteration}: they can no longer be resumed together "
                                 "(resume each seed's directory alone)")
        for tr, s in zip(self.trainers, state["seeds"]):
            tr.load_state_dict(s)  # each block's sim state is held until ...
        load_blocks(self.collector.env.sim, [e.sim for e in self.envs])  # ... the whole
        # sim is restored


def _block(ro: Rollout, i: int, n: int) -> Rollout:
    """Seed i's envs [i n, (i + 1) n) of a rollout of K blocks: views."""
    cols = slice(i * n, (i + 1) * n)
    return Rollout(*(getattr(ro, f.name)[cols] if f.name == "state0" else
                     getattr(ro, f.name)[:, cols] for f in dataclasses.fields(ro)))


def _compact(tree: Any) -> Any:
    """Copies of the tensors of a state: a view would be saved with its whole storage."""
    return tree_map(lambda x: x.clone() if isinstance(x, Tensor) else x, tree)
