"""Surgery (OpenAI Five's): a trained run's hidden layers made wider, written as a new run
directory that `trot train --resume` continues, instead of training the wide networks anew.

A layer of h units widened to h' keeps its h units' weights and biases. Its h' - h new units
get the incoming weights a fresh network of the new widths gets (alive: a unit whose incoming
weights are zero never gets a gradient), zero biases, and zero outgoing weights (the next
layer's new columns, the output layers' included): they add nothing yet, so on every
observation the new actor's mean and log_std and the new critic's value (PopArt-normalized
and in reward units) are the old ones', to float rounding. Everything else is the run's: the
normalizers' and PopArt's statistics, log_std, the counters, the envs' and random streams'
states. Adam's moments are padded with zeros for the new entries and keep their step counts
(a fresh Adam would move every old weight by a full learning rate at its first step); a new
entry's first steps are then up to ~3x the rate (0.1 g / sqrt(0.001 g^2), the bias
correction spent), which the gradient clip and the KL-adaptive rate bound.

New observation inputs (`--env.FIELD VALUE` overrides of the run's task config whose
observation keeps every old slot and adds some) are agents/surgery_inputs.py's: the first
layers read the old columns where they went and zero columns for the new ones, the
normalizers keep the old inputs' statistics and measure the new ones', and the run's envs
start fresh (their states are of the old observation and task config).

Only widening: the same number of hidden layers, each as wide or wider. Only the PPO/A2C
learner of `trot train TASK` (the Sync mode) with a memoryless actor and no lagged actors.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import torch
from torch import Tensor

from trot.agents import surgery_inputs as si
from trot.agents.checkpoint import Checkpoint, save_checkpoint
from trot.agents.modes import Sync, describe
from trot.agents.networks import ActorCritic
from trot.agents.normalization import RunningMeanStd
from trot.agents.runs import CHECKPOINT, CONFIG, read_checkpoint, run_config, write_config
from trot.agents.surgery_inputs import InputError, Inputs, overrides, task_config
from trot.agents.train_config import TrainConfig, to_json
from trot.core.files import atomic_write
from trot.tasks.base import TaskConfig

RECORD = "surgery.json"  # in the new run: where it came from, what was widened and added
LOGS = ("metrics.csv", "eval.csv")  # copied: the new run's curves continue the old one's
WIDENED = ("actor.torso.", "critic.torso.", "actor.mean.", "critic.head.")  # may grow
TOLERANCE = 1e-4  # max |change| of an output, relative to 1 + |output|


class SurgeryError(ValueError):
    """A surgery that cannot be done (the CLI prints its message)."""


BIG = 100.0  # the comparison's new inputs: N(0, BIG^2), far outside any normalizer's clip


# ---------------------------------------------------------------------- what is accepted
def check_widths(net: str, old: tuple[int, ...], new: tuple[int, ...]) -> None:
    """Refuse new hidden sizes that are not a widening of old, naming the layer."""
    if len(new) != len(old):
        raise SurgeryError(
            f"--agent.{net}-hidden {' '.join(map(str, new))}: the run's {net} has "
            f"{len(old)} hidden layer{'s' * (len(old) != 1)} {tuple(old)} and {len(new)} "
            f"were given; surgery keeps the number of layers and widens them: give "
            f"{len(old)} width{'s' * (len(old) != 1)}, each >= the old")
    for i, (h, h2) in enumerate(zip(old, new)):
        if h2 < h:
            raise SurgeryError(
                f"{net} hidden layer {i} ({net}_hidden[{i}]): {h} -> {h2} units is narrower; "
                f"surgery only widens: each width >= the run's {tuple(old)}, layer by layer")


def check_supported(cfg: TrainConfig, learner: str) -> None:
    """Refuse, by name, the runs whose state this module does not widen."""
    a = cfg.agent
    if learner != "ppo" or not isinstance(cfg.mode, Sync) or cfg.algo not in ("ppo", "a2c"):
        raise SurgeryError(
            f"surgery widens runs of the PPO/A2C learner of `trot train TASK` (one process "
            f"or --nproc); this run is {describe(type(cfg.mode))} with --algo {cfg.algo} "
            f"(its checkpoint's learner: {learner!r})")
    if a.rnn != "none":
        raise SurgeryError(f"surgery widens MLP actors; this run's actor is recurrent "
                           f"(--agent.rnn {a.rnn}), whose memory cell it does not widen")
    if cfg.mode.actor_lag or cfg.mode.async_collect:
        raise SurgeryError("surgery does not widen the lagged actors' snapshots of a run "
                           f"with actor_lag {cfg.mode.actor_lag} (or async_collect)")


def widened_config(cfg: TrainConfig, actor_hidden: tuple[int, ...] | None,
                   critic_hidden: tuple[int, ...] | None) -> TrainConfig:
    """cfg with the new hidden sizes (None: the run's own), each checked to widen."""
    a = cfg.agent
    actor = tuple(actor_hidden) if actor_hidden else a.actor_hidden
    critic = tuple(critic_hidden) if critic_hidden else a.critic_hidden
    check_widths("actor", a.actor_hidden, actor)
    check_widths("critic", a.critic_hidden, critic)
    if a.share_torso and critic != a.critic_hidden:
        raise SurgeryError("this run's critic shares the actor's hidden layers (share_torso): "
                           "widen them with --agent.actor-hidden alone")
    return dataclasses.replace(cfg, agent=dataclasses.replace(a, actor_hidden=actor,
                                                              critic_hidden=critic))


# ---------------------------------------------------------------------- the tensors
def widen_tensor(key: str, old: Tensor, fresh: Tensor) -> Tensor:
    """The new network's `key` from the old tensor and the fresh one of the new shape.
    weight [O', I'] from [O, I]: old block kept, new rows fresh (the new units' incoming
    weights), new columns zero (the new units' outgoing ones); bias [O'] from [O]: new
    entries zero."""
    if old.shape == fresh.shape:
        return old.clone()
    if not key.startswith(WIDENED) or old.dim() != fresh.dim() or old.dim() not in (1, 2) \
            or any(n < o for n, o in zip(fresh.shape, old.shape)):
        raise SurgeryError(f"surgery does not widen {key} {tuple(old.shape)} -> "
                           f"{tuple(fresh.shape)} (only the MLPs' linear layers grow)")
    if old.dim() == 1:  # bias [O']
        out = torch.zeros_like(fresh)
        out[:old.shape[0]] = old
        return out
    out = fresh.clone()  # [O', I']
    out[:, old.shape[1]:] = 0.0  # no unit reads a new unit yet
    out[:old.shape[0], :old.shape[1]] = old
    return out


def widen_model(old: dict[str, Tensor], fresh: dict[str, Tensor]) -> dict[str, Tensor]:
    """The new actor-critic's state_dict: every key of `fresh` (the new shapes) widened
    from `old`'s (the same keys: the same layers)."""
    if set(old) != set(fresh):
        raise SurgeryError(f"the networks' layers differ: {sorted(set(old) ^ set(fresh))}")
    return {k: widen_tensor(k, old[k], v) for k, v in fresh.items()}


def pad_optimizer(opt: dict, names: list[str], old: dict[str, Tensor],
                  new: dict[str, Tensor]) -> dict:
    """An optimizer's state_dict (its parameters `names`, in its order) for the new shapes:
    each per-parameter tensor of the old parameter's shape (Adam's moments) zero-padded,
    the rest (step counts) and the param groups (the learning-rate tensor) kept."""
    if [len(g["params"]) for g in opt["param_groups"]] != [len(names)]:
        raise SurgeryError(f"the optimizer's state holds another parameter list than the "
                           f"actor-critic's {len(names)} parameters")
    state = {}
    for i, per in opt["state"].items():
        name = names[int(i)]
        state[i] = {k: _pad(v, old[name], new[name], f"optimizer state {k} of {name}")
                    for k, v in per.items()}
    return {"state": state, "param_groups": opt["param_groups"]}


def _pad(v, old_param: Tensor, new_param: Tensor, what: str):
    if not isinstance(v, Tensor) or v.dim() == 0:
        return v  # a step count
    if v.shape != old_param.shape:
        raise SurgeryError(f"{what} is {tuple(v.shape)}, the parameter {tuple(old_param.shape)}")
    out = torch.zeros(new_param.shape, dtype=v.dtype, device=v.device)
    out[tuple(slice(0, n) for n in v.shape)] = v
    return out


# ---------------------------------------------------------------------- the networks
def sizes(model: dict[str, Tensor]) -> tuple[int, int, int, int]:
    """(observation, critic observation, action, task) sizes of a checkpoint's `model`: the
    inputs of each network's first linear layer, log_std's and the value head's outputs."""
    def inputs(net: str, out: str) -> int:
        first = f"{net}.torso.0.weight"  # [H, P]; no hidden layer: the output layer's
        return model[first if first in model else f"{net}.{out}.weight"].shape[1]
    return (inputs("actor", "mean"), inputs("critic", "head"), model["actor.log_std"].shape[0],
            model["critic.head.weight"].shape[0])


def network(cfg: TrainConfig, model: dict[str, Tensor], seed: int | None = None) -> ActorCritic:
    """A new ActorCritic of cfg's agent for the sizes of `model` (a checkpoint's), with
    its default init drawn from `seed` (default cfg's), torch's global stream untouched."""
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed if seed is None else seed)
        return ActorCritic(*sizes(model)[:3], cfg.agent_effective, sizes(model)[3])


@torch.no_grad()
def output_change(old: ActorCritic, new: ActorCritic, n: int = 1000, seed: int = 0,
                  inputs: Inputs | None = None) -> float:
    """The largest change of the actor's mean and log_std and of the critic's values
    (PopArt-normalized and in reward units) between two actor-critics, relative to
    1 + |old output|, on n observations spread as the old normalizers saw them (x2). With
    new `inputs`, the new networks see those at the old columns' new places and N(0, BIG^2)
    in the new inputs' columns."""
    gen = torch.Generator().manual_seed(seed)
    obs_dim, critic_dim = sizes(old.state_dict())[:2]

    def draw(norm: torch.nn.Module, dim: int) -> Tensor:  # [n, dim]
        z = 2.0 * torch.randn(n, dim, generator=gen, dtype=torch.float64)
        if isinstance(norm, RunningMeanStd):
            z = norm.mean + norm.var.sqrt() * z
        return z.float()

    def embed(x: Tensor, which: str) -> Tensor:  # [n, P] -> [n, P']
        if inputs is None:
            return x
        index, dim = (inputs.policy, inputs.policy_dim) if which == "policy" \
            else (inputs.critic, inputs.critic_dim)
        out = BIG * torch.randn(n, dim, generator=gen)
        out[:, index] = x
        return out
    obs = draw(old.actor.normalizer, obs_dim)
    cobs = obs if old.shared else draw(old.critic.normalizer, critic_dim)
    obs2 = embed(obs, "policy")
    cobs2 = obs2 if new.shared else embed(cobs, "critic")
    pairs = [(old.actor(obs), new.actor(obs2)), (old.actor.log_std, new.actor.log_std),
             (old.critic(cobs), new.critic(cobs2)),
             (old.critic.value(cobs), new.critic.value(cobs2))]
    return max(float(((b - a).abs() / (1 + a.abs())).max()) for a, b in pairs)


# ---------------------------------------------------------------------- the run
def widen_checkpoint(old_cfg: TrainConfig, new_cfg: TrainConfig, ckpt: Checkpoint,
                     inputs: Inputs | None = None) -> tuple[Checkpoint, float]:
    """The checkpoint of the widened run (counters, envs and streams as they were; with new
    `inputs`, fresh envs) and the largest output change it makes (`output_change`);
    refused above TOLERANCE."""
    check_supported(old_cfg, ckpt.learner)
    shared = old_cfg.agent.share_torso
    model = ckpt.model
    placed = model if inputs is None else si.remap_model(model, inputs, shared)
    old_ac, new_ac = network(old_cfg, model), network(new_cfg, placed)
    old_ac.load_state_dict(model)
    new_ac.load_state_dict(widen_model(placed, new_ac.state_dict()))
    state = dict(ckpt.state)
    if inputs is not None:
        si.measure(new_cfg, new_ac, inputs)  # the new inputs' normalizer statistics
        state["ranks"] = si.fresh_ranks(new_cfg, ckpt.state["ranks"])
    change = output_change(old_ac, new_ac, inputs=inputs)
    if not change <= TOLERANCE:
        raise SurgeryError(f"the new networks' outputs moved by {change:.2e} (relative); "
                           f"surgery keeps them within {TOLERANCE:g}: not written")
    wide = new_ac.state_dict()
    names = [n for n, _ in new_ac.named_parameters()]  # the order the optimizer holds them
    algo = dict(state["algo"])
    opt = algo["optimizer"] if inputs is None else \
        si.remap_optimizer(algo["optimizer"], names, model, inputs, shared)
    algo["optimizer"] = pad_optimizer(opt, names, placed, wide)
    state |= {"model": wide, "algo": algo}
    return Checkpoint(ckpt.learner, to_json(new_cfg), ckpt.counters, state), change


def new_inputs(cfg: TrainConfig, env: TaskConfig | None) -> Inputs | None:
    """The map of the run's observation into the one `env` (the task config with the
    --env overrides) gives; None where env is None or the run's own."""
    if env is None or env == task_config(cfg):
        return None
    try:
        inputs = si.input_map(cfg, env)
    except InputError as e:
        raise SurgeryError(str(e)) from None
    if cfg.agent.share_torso and inputs.policy_dim != inputs.critic_dim:
        raise SurgeryError(
            f"this run's critic shares the actor's torso (share_torso), which needs one "
            f"observation for both; with {si.flags(overrides(task_config(cfg), env))} the "
            f"policy's has {inputs.policy_dim} values and the critic's {inputs.critic_dim}: "
            f"accepted are overrides that keep them alike")
    return inputs


def surgery(run_dir: Path, out: Path | None = None, actor_hidden: tuple[int, ...] | None = None,
            critic_hidden: tuple[int, ...] | None = None, env: TaskConfig | None = None
            ) -> tuple[Path, float]:
    """Write `out` (default RUN-wide), run_dir's run with wider hidden layers and, where
    `env` (the run's task config with --env overrides) adds observation inputs, those;
    returns it and the largest relative output change (float rounding). run_dir is left
    as it is."""
    run_dir = Path(run_dir)
    cfg, ckpt = run_config(run_dir), read_checkpoint(run_dir)
    check_supported(cfg, ckpt.learner)
    new_cfg = widened_config(cfg, actor_hidden, critic_hidden)
    inputs = new_inputs(cfg, env)
    out = Path(out) if out is not None else run_dir.with_name(run_dir.name + "-wide")
    if (out / CONFIG).exists() or out.resolve() == run_dir.resolve():
        raise SurgeryError(f"{out} already holds a run: give another --out")
    new_cfg = dataclasses.replace(new_cfg, run_dir=str(out),
                                  env=cfg.env if inputs is None and env is None else env)
    wide, change = widen_checkpoint(cfg, new_cfg, ckpt, inputs)
    out.mkdir(parents=True, exist_ok=True)
    _copy_logs(run_dir, out)
    save_checkpoint(out / CHECKPOINT, wide)
    record = {"from": str(run_dir.resolve()), "iteration": ckpt.counters.iteration,
              "env_steps": ckpt.counters.env_steps, "max_output_change": change,
              "actor_hidden": [cfg.agent.actor_hidden, new_cfg.agent.actor_hidden],
              "critic_hidden": [cfg.agent.critic_hidden, new_cfg.agent.critic_hidden],
              "env_overrides": {} if env is None else overrides(task_config(cfg), env),
              "added_inputs": _added(inputs),
              "envs": "kept" if inputs is None else "fresh (the observation changed: the "
                      "checkpoint's env states are of the old one)"}
    atomic_write(out / RECORD, lambda tmp: tmp.write_text(json.dumps(record, indent=2)))
    write_config(out, new_cfg)  # last: only now is `out` a run (new_run_dir's test)
    return out, change


def _added(inputs: Inputs | None) -> dict:
    """surgery.json's record of the new inputs: each observation's added slots and the
    old columns' new places."""
    if inputs is None:
        return {"policy": [], "critic": []}
    return inputs.added | {"policy_columns": inputs.policy.tolist(),
                           "critic_columns": inputs.critic.tolist(),
                           "policy_size": inputs.policy_dim, "critic_size": inputs.critic_dim}


def _copy_logs(run_dir: Path, out: Path) -> None:
    """The logs, so the new run's curves continue the old one's (the resume keeps the rows
    up to the checkpoint's iteration); TensorBoard's events too. Not the export (the old
    networks'; the new run exports its own) nor wandb_id (the new run is a new W&B run)."""
    for name in LOGS:
        if (run_dir / name).is_file():
            atomic_write(out / name, lambda tmp, n=name: shutil.copyfile(run_dir / n, tmp))
    if (run_dir / "tb").is_dir():
        shutil.copytree(run_dir / "tb", out / "tb", dirs_exist_ok=True)
