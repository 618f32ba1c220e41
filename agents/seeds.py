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
The physics is one call for all K x N envs. Per seed remain the work that is a seed's own:
its task's torch code (its random draws come from its env's generator), its action-noise
and shuffle draws, GAE and PopArt's move, the normalizers' update, and the optimizer step
(torch's fused Adam takes one learning rate per call). A seed's NaN update is undone for
that seed alone.

The run directory holds `seed_S/` for each seed S, a plain one-seed run directory that
eval, export, play and sim2sim load (and `trot train --resume` continues alone), plus
`seeds.csv` (median and range across seeds per iteration) and the combined checkpoint that
`trot train --resume RUN_DIR` continues every seed from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.utils._pytree import tree_map

from trot.agents.checkpoint import require_keys, save_checkpoint
from trot.agents.collect import set_threads
from trot.agents.distributed import ENV_STREAM, ONE_PROCESS, rank_seed
from trot.agents.seed_logs import SeedLogs, seeds_progress_line, summarize
from trot.agents.loop import TrainingLoop
from trot.agents.networks import ActorCritic
from trot.agents.ppo import normalize_advantages
from trot.agents.storage import Batch, Rollout
from trot.agents.trainer import Trainer, TrainingDiverged
from trot.config import TrainConfig, to_json
from trot.runs import CHECKPOINT, new_run_dir, read_checkpoint, run_config, write_config
from trot.sim.rows import load_blocks
from trot.tasks.registry import make_block_envs

def seed_dir(run_dir: Path, seed: int) -> Path:
    return Path(run_dir) / f"seed_{seed}"


def seed_config(cfg: TrainConfig, run_dir: Path, seed: int) -> TrainConfig:
    """The one-seed run that seed `seed` of `cfg` is, in its own directory."""
    return dataclasses.replace(cfg, seed=seed, seeds=(), run_dir=str(seed_dir(run_dir, seed)))


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


class _Stop:
    """The loop's stop flag holder (`TrainingLoop.collector`): nothing acts apart here."""

    interrupted: Callable[[], bool] = staticmethod(lambda: False)

    def close(self) -> None:
        pass


class Seeds(TrainingLoop):
    """K one-seed learners (cfg.seeds) stepped, acted and updated as one program."""

    def __init__(self, cfg: TrainConfig, run_dir: Path):
        cfg.validate()
        self.cfg, self.comm, self.collector = cfg, ONE_PROCESS, _Stop()
        a, k = cfg.agent_effective, len(cfg.seeds)
        self.envs = make_block_envs(cfg.task, cfg.num_envs, cfg.sim, cfg.device,
                                    [rank_seed(s + ENV_STREAM, 0) for s in cfg.seeds], cfg.env)
        env, n = self.envs[0], cfg.num_envs
        acs = []
        for s in cfg.seeds:  # each initialised as its one-seed run's
            torch.manual_seed(s)
            acs.append(ActorCritic(env.obs_dim, env.critic_obs_dim, env.action_dim, a)
                       .to(env.device))
        self.params, self.buffers = stack_modules(acs)
        self.storage = Rollout.allocate(a.rollout_steps, k * n, env.obs_dim,
                                        env.critic_obs_dim, env.action_dim, env.device)
        self.trainers = [Trainer(seed_config(cfg, run_dir, s), e, ac=ac,
                                 storage=_block(self.storage, i, n))
                         for i, (s, e, ac) in enumerate(zip(cfg.seeds, self.envs, acs))]
        self.sim = env.sim.parent
        self.ctrl = torch.zeros(k * n, self.sim.model.nu, device=env.device)
        self._like: tuple[Tensor, ...] = ()  # a batch's fields: the loss's table layout
        self._shuffled: Tensor | None = None  # [K, B, W] the epoch's shuffled batches
        self._linked = False  # whether each seed's .grad are views of the stack's
        template, loss = acs[0], self.trainers[0].algo.forward_loss
        self._sample = stacked(template, self.params, self.buffers,
                               lambda m, obs, eps, st: m.actor.sample_with(obs, eps, st))
        self._value = stacked(template, self.params, self.buffers,
                              lambda m, obs: m.critic.value(obs))
        self._loss = stacked(template, self.params, self.buffers, lambda m, table, ls: loss(
            Batch._from_table(table, self._like), None, ls))
        self.last: list[dict[str, float]] = []  # each seed's metrics of the last iteration

    # ------------------------------------------------------------------ counters
    @property
    def device(self) -> torch.device:
        return self.envs[0].device

    @property
    def iteration(self) -> int:
        return self.trainers[0].iteration

    @property
    def env_steps(self) -> int:
        """Each seed's own (the budget is per seed, as for K one-seed runs)."""
        return self.trainers[0].env_steps

    @property
    def wall_s(self) -> float:
        return self.trainers[0].wall_s

    @wall_s.setter
    def wall_s(self, s: float) -> None:
        for tr in self.trainers:
            tr.wall_s = s

    # ------------------------------------------------------------------ one iteration
    def iterate(self) -> dict[str, float]:
        """Every seed's iteration as the one-seed Trainer's, with one host sync for all;
        returns the summary across seeds (each seed's own metrics: `last`)."""
        trs = self.trainers
        for tr in trs:
            tr.rollback.save()
        self.collect()
        set_threads(self.cfg.update_threads)
        next_values = self.fill_values()
        batches = [tr.algo.prepare(tr.collector.storage, nv)
                   for tr, nv in zip(trs, next_values)]
        stats = self.update(batches)
        dev, n = self.device, self.cfg.num_envs
        measured = [tr.measure(b, s, tr.comm.total(self.storage.steps * n, dev))
                    for tr, b, s in zip(trs, batches, stats)]
        flat = torch.cat([v for _, v in measured]).tolist()  # the one host sync
        self.last, at = [], 0
        for seed, tr, (names, v) in zip(self.cfg.seeds, trs, measured):
            try:
                self.last.append(tr.account(dict(zip(names, flat[at:at + len(v)]))))
            except TrainingDiverged as e:
                raise TrainingDiverged(f"seed {seed}: {e}") from None
            at += len(v)
        return summarize(self.last)

    @torch.no_grad()
    def collect(self) -> None:
        """T steps of every seed's envs into the stacked rollout: one vmapped actor pass
        and one physics call per step."""
        set_threads(self.cfg.torch_threads)  # MuJoCo's threads own the cores to step
        ro, trs, envs, k, n = self.storage, self.trainers, self.envs, len(self.envs), \
            self.cfg.num_envs
        no_state = torch.zeros(k, n, 0, device=self.device)  # memoryless actors only
        for t in range(ro.steps):
            obs = [e.obs for e in envs]
            policy = torch.stack([o.policy for o in obs])  # [K, N, P]
            eps = torch.stack([tr.ac.actor.noise(n, tr.collector.noise_gen) for tr in trs])
            action, log_prob, mean, _ = self._sample(policy, eps, no_state)  # [K, N, A]
            begun = [e.begin_step(action[i]) for i, e in enumerate(envs)]
            torch.cat([c for _, _, c in begun], out=self.ctrl)  # [K * N, nu]
            self.sim.step(self.ctrl)
            res = [e.end_step(a, bad) for e, (a, bad, _) in zip(envs, begun)]
            cat = lambda xs: torch.cat(list(xs))  # noqa: E731  seed blocks, in order
            ro.write(t, obs=policy.flatten(0, 1), critic_obs=cat(o.critic for o in obs),
                     actions=action.flatten(0, 1), log_probs=log_prob.flatten(),
                     rewards=cat(r.reward for r in res),
                     terminated=cat(r.terminated for r in res),
                     truncated=cat(r.truncated for r in res),
                     final_critic_obs=cat(r.final_obs.critic for r in res),
                     action_mean=mean.flatten(0, 1))

    @torch.no_grad()
    def fill_values(self) -> list[Tensor]:
        """V(s_t) into the rollout, in one vmapped critic pass with the values of the states
        each step reached; returns those, per seed [T, N]."""
        ro, k, n = self.storage, len(self.envs), self.cfg.num_envs
        t = ro.steps
        per_seed = lambda x: x.view(t, k, n, -1).transpose(0, 1).reshape(k, t * n, -1)  # noqa: E731
        v = self._value(torch.cat([per_seed(ro.critic_obs), per_seed(ro.final_critic_obs)],
                                  1))  # [K, 2 T N]
        values, next_values = v.view(k, 2, t, n).unbind(1)  # [K, T, N] each
        ro.values.view(t, k, n).copy_(values.transpose(0, 1))
        return list(next_values.unbind())

    def update(self, batches: list[Batch]) -> list[dict[str, Tensor]]:
        """`PPO.update` for every seed at once (memoryless, unlagged): each seed shuffles
        with its own generator, the minibatch loss runs stacked. Returns each seed's
        statistics (0-d tensors)."""
        cfg, trs = self.trainers[0].algo.cfg, self.trainers
        old_log_std = self.params["actor.log_std"].detach().clone()  # [K, A]
        if cfg.advantage_norm == "batch":
            for b in batches:
                b.advantages.copy_(normalize_advantages(b.advantages))
        self._like = batches[0].fields()
        rows, size = len(batches[0]), len(batches[0]) // cfg.minibatches
        if self._shuffled is None or self._shuffled.shape[1:] != batches[0].table.shape:
            self._shuffled = torch.empty(len(batches), *batches[0].table.shape,
                                         device=self.device)
        sums, first = None, True
        for _ in range(cfg.epochs):
            for i, (tr, b) in enumerate(zip(trs, batches)):
                perm = torch.randperm(rows, generator=tr.gen, device=self.device)
                torch.index_select(b.table, 0, perm, out=self._shuffled[i])
            for j in range(cfg.minibatches):
                stats = self._minibatch(self._shuffled[:, j * size:(j + 1) * size],
                                        old_log_std, adapt=not first)
                first = False
                row = torch.stack(list(stats.values()))  # [S, K]
                sums = row if sums is None else sums + row
        sums = sums / (cfg.epochs * cfg.minibatches)
        return [dict(zip(stats, sums[:, i].unbind())) for i in range(len(trs))]

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

    # ------------------------------------------------------------------ outputs
    def open_logger(self, run_dir: Path) -> SeedLogs:
        return SeedLogs([seed_dir(run_dir, s) for s in self.cfg.seeds],
                        Path(run_dir) / "seeds.csv", self.iteration, self.env_steps,
                        lambda: self.last)

    def progress(self, m: dict[str, float]) -> str:
        return seeds_progress_line(m, len(self.trainers), self.cfg)

    def periodic_eval(self, run_dir: Path) -> None:
        return None

    def state_dict(self) -> dict:
        """The combined checkpoint: each seed's one-seed checkpoint (compact copies)."""
        return {"seeds": [_compact(tr.state_dict()) for tr in self.trainers],
                "config": to_json(self.cfg)}

    def load_state_dict(self, state: dict) -> None:
        require_keys(state, ("seeds",), "the seeds checkpoint")
        if len(state["seeds"]) != len(self.trainers):
            raise ValueError(f"the checkpoint holds {len(state['seeds'])} seeds, this run "
                             f"{len(self.trainers)} ({list(self.cfg.seeds)})")
        for tr, s in zip(self.trainers, state["seeds"]):
            tr.load_state_dict(s)  # each block's sim state is held until ...
        load_blocks(self.sim, [e.sim for e in self.envs])  # ... the whole sim is restored

    def save(self, run_dir: Path) -> None:
        """The combined checkpoint that resume reads, then each seed's in its directory
        (after it: a seed's own checkpoint is never ahead of the combined one, unless the
        seed was continued on its own, which `resume_seeds` then refuses)."""
        state = self.state_dict()
        save_checkpoint(Path(run_dir) / CHECKPOINT, state)
        for seed, s in zip(self.cfg.seeds, state["seeds"]):
            save_checkpoint(seed_dir(run_dir, seed) / CHECKPOINT, s)


def _block(ro: Rollout, i: int, n: int) -> Rollout:
    """Seed i's envs [i n, (i + 1) n) of a rollout of K blocks: views."""
    cols = slice(i * n, (i + 1) * n)
    return Rollout(*(getattr(ro, f.name)[cols] if f.name == "state0" else
                     getattr(ro, f.name)[:, cols] for f in dataclasses.fields(ro)))


def _compact(tree: Any) -> Any:
    """Copies of the tensors of a state: a view would be saved with its whole storage."""
    return tree_map(lambda x: x.clone() if isinstance(x, Tensor) else x, tree)


def start_seeds(cfg: TrainConfig) -> tuple[Seeds, Path]:
    """A new run of cfg.seeds: the run directory with each seed's own."""
    run_dir = new_run_dir(cfg)
    seeds = Seeds(cfg, run_dir)
    write_config(run_dir, cfg)
    for s in cfg.seeds:
        write_config(seed_dir(run_dir, s), seed_config(cfg, run_dir, s))
    return seeds, run_dir


def resume_seeds(run_dir: Path) -> Seeds:
    """Every seed of a run of seeds, from its combined checkpoint."""
    cfg, state = run_config(run_dir), read_checkpoint(run_dir)
    at = state["seeds"][0]["iteration"] if state.get("seeds") else 0
    for s in cfg.seeds:
        own = seed_dir(run_dir, s)
        if (own / CHECKPOINT).is_file() and read_checkpoint(own)["iteration"] > at:
            raise ValueError(f"{own} was continued on its own past the seeds' iteration "
                             f"{at}: they can no longer be resumed together (resume each "
                             "seed's directory alone)")
    seeds = Seeds(cfg, run_dir)
    seeds.load_state_dict(state)
    return seeds
