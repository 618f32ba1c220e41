"""Surgery's new observation inputs (agents/surgery.py): `--env.FIELD VALUE` overrides of a
run's task config whose observation keeps every old input and adds new ones.

The old and new observations are compared slot by slot (tasks/observation.py's ObsLayout;
the policy's history frames are slots too, named by their age: `cart_pos@t-1`): each old
slot must be in the new observation with its name, size and definition; its columns may
move. The first linear layer of each network then reads the old columns where they went and
has zero columns for the new inputs, so on the old inputs the outputs are the old ones
whatever the new inputs hold; a zero input column still gets gradients (its layer's outputs
are alive), unlike a zero unit's incoming weights. The normalizers keep the old inputs'
statistics; the new inputs' are measured on one rollout of the new envs (`measure`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils._pytree import tree_map

from trot.agents.distributed import ENV_STREAM, rank_seed
from trot.agents.networks import ActorCritic
from trot.agents.normalization import RunningMeanStd
from trot.agents.train_config import TrainConfig
from trot.tasks.base import TaskConfig
from trot.tasks.observation import ObsLayout
from trot.tasks.registry import get_task, make_env

MEASURE_SEED = 12_345  # the measuring rollout's env and action noise: a fixed stream
MEASURE_ENVS = 1024  # at most this many envs measure the new inputs (one rollout's steps)
# an ObsTerm's fields that only shape training noise: changing them keeps the inputs' meaning
NOISE_FIELDS = ("noise", "episode_offset")


class InputError(ValueError):
    """An override whose observation does not keep the run's inputs (agents/surgery.py
    raises it as its SurgeryError)."""


@dataclass(frozen=True)
class Inputs:
    """Where the old observation's columns go in the new one."""

    policy: Tensor  # [P] long: old policy column i is new column policy[i]
    policy_dim: int  # P'
    critic: Tensor  # [C] long, the same for the critic's observation
    critic_dim: int  # C'
    added: dict[str, list[str]]  # 'policy'/'critic': the new slots' names, in order

    @property
    def changed(self) -> bool:
        return bool(self.added["policy"] or self.added["critic"]) or not (
            torch.equal(self.policy, torch.arange(self.policy_dim))
            and torch.equal(self.critic, torch.arange(self.critic_dim)))

    def new_columns(self, which: str) -> Tensor:  # [P' - P] long
        index, dim = (self.policy, self.policy_dim) if which == "policy" \
            else (self.critic, self.critic_dim)
        keep = torch.zeros(dim, dtype=torch.bool)
        keep[index] = True
        return (~keep).nonzero().flatten()


# ---------------------------------------------------------------------- the configs
def task_config(cfg: TrainConfig) -> TaskConfig:
    """The run's task config (None in config.json: the registered task's)."""
    return cfg.env if cfg.env is not None else get_task(cfg.task).config


def overrides(old: TaskConfig, new: TaskConfig) -> dict[str, list]:
    """The fields `new` changes: name -> [old value, new value] (JSON-ready)."""
    return {f.name: [_plain(getattr(old, f.name)), _plain(getattr(new, f.name))]
            for f in dataclasses.fields(old) if getattr(old, f.name) != getattr(new, f.name)}


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def flags(changes: dict[str, list]) -> str:
    """The overrides as `trot surgery` takes them: `--env.obs-history 2 --env.no-blind`."""
    def one(k: str, v) -> str:
        k = k.replace("_", "-")
        if isinstance(v, bool):
            return f"--env.{'' if v else 'no-'}{k}"
        return f"--env.{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
    return " ".join(one(k, v) for k, (_, v) in changes.items())


# ---------------------------------------------------------------------- the layouts
def named_slots(layout: ObsLayout, history: int = 1) -> dict[str, tuple[int, int, object]]:
    """name -> (start, size, term) of each slot of an observation of `history` frames of
    `layout` (oldest first); a frame k steps old names its slots `NAME@t-k`."""
    out: dict[str, tuple[int, int, object]] = {}
    for frame in range(history):
        age = history - 1 - frame
        for s in layout.slots:
            name = s.term.name + (f"@t-{age}" if age else "")
            if name in out:
                raise InputError(f"the observation has two slots named {name!r}: surgery "
                                 "maps inputs by name and cannot tell them apart")
            out[name] = (frame * layout.dim + s.start, s.size, s.term)
    return out


def map_slots(which: str, old: dict, new: dict, new_dim: int, changes: dict
              ) -> tuple[Tensor, list[str]]:
    """The new positions [P] of the old columns, and the added slots' names; an InputError
    naming the first old slot that the new observation lacks or changes."""
    where = f"with {flags(changes)}" if changes else "as given"
    accepted = ("accepted: overrides that keep each of the run's observation slots (its "
                "name, size and definition; its place may change) and add new ones, e.g. "
                "--env.obs-history K (a longer history) or cartpole's --env.no-blind")
    index = []
    for name, (start, size, term) in old.items():
        if name not in new:
            raise InputError(f"{which} observation slot {name!r} ({size} value{'s' * (size != 1)}) of the run "
                             f"is not in the new {which} observation {where}: removed; "
                             f"surgery only adds inputs; {accepted}")
        start2, size2, term2 = new[name]
        if size2 != size:
            raise InputError(f"{which} observation slot {name!r} has {size} values in the "
                             f"run and {size2} {where}: its size changed; {accepted}")
        differ = [f.name for f in dataclasses.fields(term) if f.name not in NOISE_FIELDS
                  and getattr(term, f.name) != getattr(term2, f.name)]
        if differ:
            diffs = ", ".join(f"{k} {getattr(term, k)!r} -> {getattr(term2, k)!r}"
                              for k in differ)
            raise InputError(f"{which} observation slot {name!r} reads other numbers {where} "
                             f"({diffs}): the old inputs would change meaning; {accepted}")
        index += range(start2, start2 + size)
    return torch.tensor(index, dtype=torch.long), [n for n in new if n not in old]


def check_actions(old_env, new_env, changes: dict) -> None:
    """Refuse overrides that change the action space: its size, the action -> control map
    (scale and offset per actuator) or the actions' latency."""
    got = [(e.action_dim, e.task.action_scale.tolist(), e.task.action_offset.tolist(),
            e.task.action_latency_steps()) for e in (old_env, new_env)]
    for i, what in enumerate(("size", "scale per actuator", "offset per actuator",
                              "latency (control steps)")):
        if got[0][i] != got[1][i]:
            raise InputError(f"--env overrides {flags(changes)} change the action space's "
                             f"{what}: {got[0][i]} -> {got[1][i]}; surgery keeps the "
                             f"actions (the policy's outputs) as they are: accepted are "
                             f"overrides that leave the actions alone")


def input_map(cfg: TrainConfig, new_env_cfg: TaskConfig) -> Inputs:
    """Compare the run's observation with the one `new_env_cfg` gives (one env of each)."""
    old_env_cfg = task_config(cfg)
    changes = overrides(old_env_cfg, new_env_cfg)
    try:
        new_env_cfg.validate()
        old_env, new_env = (make_env(cfg.task, 1, "cpu", "cpu", 0, c)
                            for c in (old_env_cfg, new_env_cfg))
    except ValueError as e:
        raise InputError(f"--env overrides {flags(changes)}: {e}") from None
    check_actions(old_env, new_env, changes)
    pol, pol_added = map_slots(
        "policy", named_slots(old_env.policy_layout, old_env.history),
        named_slots(new_env.policy_layout, new_env.history), new_env.obs_dim, changes)
    cri, cri_added = map_slots(
        "critic", named_slots(old_env.critic_layout), named_slots(new_env.critic_layout),
        new_env.critic_obs_dim, changes)
    return Inputs(pol, new_env.obs_dim, cri, new_env.critic_obs_dim,
                  {"policy": pol_added, "critic": cri_added})


# ---------------------------------------------------------------------- the tensors
def place(t: Tensor, index: Tensor, dim: int, fill: float = 0.0) -> Tensor:
    """t [..., P] with its last axis's entries moved to `index` [P] of a [..., P'] tensor
    that is `fill` elsewhere."""
    out = torch.full((*t.shape[:-1], dim), fill, dtype=t.dtype, device=t.device)
    out[..., index] = t
    return out


def first_keys(model: dict[str, Tensor], net: str) -> str:
    """The state_dict key of `net`'s first linear layer's weight [H, P]."""
    first = f"{net}.torso.0.weight"
    return first if first in model else f"{net}.{'mean' if net == 'actor' else 'head'}.weight"


def remap_model(model: dict[str, Tensor], inputs: Inputs, shared: bool
                ) -> dict[str, Tensor]:
    """A checkpoint's actor-critic state_dict for the new inputs (hidden sizes as they
    were): normalizer statistics and first-layer columns placed where their inputs went;
    for the new inputs, zero columns and mean 0 / var 1 until `measure` fills them.
    shared (share_torso): the critic's torso and normalizer keys are the actor's, mapped
    by the policy's map."""
    out = dict(model)
    for net in ("actor", "critic"):
        index, dim = (inputs.policy, inputs.policy_dim) if net == "actor" or shared \
            else (inputs.critic, inputs.critic_dim)
        w = first_keys(model, net)
        out[w] = place(model[w], index, dim)  # [H, P'] new columns zero
        for stat, fill in (("mean", 0.0), ("var", 1.0)):
            key = f"{net}.normalizer.{stat}"
            if key in model:  # [P'] (obs_norm off: no normalizer)
                out[key] = place(model[key], index, dim, fill)
    return out


def remap_optimizer(opt: dict, names: list[str], model: dict[str, Tensor],
                    inputs: Inputs, shared: bool) -> dict:
    """The optimizer's state_dict (its parameters `names`, in its order) with the first
    layers' moments' columns placed as their weights' (zero for the new inputs); step
    counts and everything else kept. shared: the critic's first layer is the actor's."""
    maps = {first_keys(model, "actor"): (inputs.policy, inputs.policy_dim)}
    if not shared:
        maps[first_keys(model, "critic")] = (inputs.critic, inputs.critic_dim)
    state = {}
    for i, per in opt["state"].items():
        m = maps.get(names[int(i)])
        state[i] = per if m is None else {
            k: place(v, *m) if isinstance(v, Tensor) and v.dim() == 2 else v
            for k, v in per.items()}
    return {"state": state, "param_groups": opt["param_groups"]}


# ---------------------------------------------------------------------- the new envs
def _device(cfg: TrainConfig) -> str:
    # the cpu sim's env state is the host env's whatever the device (tasks/hosted.py)
    return "cpu" if cfg.sim == "cpu" else cfg.device


def fresh_ranks(cfg: TrainConfig, ranks: list[dict]) -> list[dict]:
    """The checkpoint's per-rank states with each rank's envs new (built and reset as a new
    run's: its seed per rank, its stagger); the random streams and the rest kept."""
    out = []
    for r, rank in enumerate(ranks):
        env = make_env(cfg.task, cfg.num_envs, cfg.sim, _device(cfg),
                       rank_seed(cfg.seed + ENV_STREAM, r), cfg.env)
        env.reset(stagger=cfg.stagger_start)
        state = tree_map(lambda x: x.cpu() if isinstance(x, Tensor) else x, env.state_dict())
        out.append(rank | {"env": state})
    return out


@torch.no_grad()
def measure(cfg: TrainConfig, ac: ActorCritic, inputs: Inputs) -> dict[str, int]:
    """Set the new inputs' normalizer mean and var to those of one rollout (the run's
    rollout_steps, at most MEASURE_ENVS envs, seeded MEASURE_SEED) of the new envs acted
    on by `ac` (on the old inputs the run's policy, with its log_std's noise); the old
    inputs' statistics and the count (one number for all inputs) are kept. Returns the
    numbers of rows measured."""
    env = make_env(cfg.task, min(cfg.num_envs, MEASURE_ENVS), cfg.sim, _device(cfg),
                   MEASURE_SEED, cfg.env)
    gen = torch.Generator().manual_seed(MEASURE_SEED)
    obs, pol, cri = env.reset(stagger=cfg.stagger_start), [], []
    for _ in range(cfg.agent.rollout_steps):
        pol.append(obs.policy.cpu())  # [N, P']
        cri.append(obs.critic.cpu())  # [N, C']
        action = ac.actor.sample(obs.policy.cpu(), gen)[0]  # [N, A]; the env clips it
        obs = env.step(action.to(env.device)).obs
    seen = {}
    for which, rows, norm in (("policy", pol, ac.actor.normalizer),
                              ("critic", cri, None if ac.shared else ac.critic.normalizer)):
        if not isinstance(norm, RunningMeanStd):
            continue
        x = torch.cat(rows)  # [T * N, P']
        fresh = RunningMeanStd(x.shape[1])
        fresh.update(x)  # outlier rows left out, as training's updates do
        new = inputs.new_columns(which)  # [P' - P]
        norm.mean[new] = fresh.mean[new]
        norm.var[new] = fresh.var[new]
        seen[which] = int(fresh.count)
    return seen
