"""One policy for several tasks: `trot train TASK_A TASK_B ...`.

The training is the one-task `Trainer`'s, on the tasks' envs seen as one (tasks/multi.py):
observations end in the one-hot task index, the critic has one value output per task
(agents/networks.py `Critic`), and PPO moves each output's PopArt statistics to its own
task's returns and divides each task's advantages by its own return scale (agents/ppo.py,
`agent.popart_tasks`). That is the multi-task PopArt of Hessel et al. (2019): a task whose
rewards are 100x smaller is not drowned out of the gradient.

Each task also gets a plain one-task run directory, `RUN_DIR/task_NAME/`, written with
every checkpoint: its config.json is that task alone, and its checkpoint holds the policy
and critic *with the task fixed* (`task_view`). The one-hot columns of a fixed task are
constants, so they fold exactly into the first layer's bias; what remains is an ordinary
network of the task's own observation, which eval, export (one contract per task), play
and sim2sim load like any run. Training continues from the top directory only.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import Tensor, nn

from trot.agents.checkpoint import Checkpoint, Counters, save_checkpoint
from trot.agents.networks import ActorCritic
from trot.agents.runs import CHECKPOINT, task_dir, write_config
from trot.agents.modes import Sync
from trot.agents.train_config import TrainConfig, to_json

VIEW = "task-view"
"""a task view's learner kind: a policy cut from a run of several tasks, which resume
refuses (its state's "view_of" names the run that trains on)"""


def task_config(cfg: TrainConfig, run_dir: Path, k: int) -> TrainConfig:
    """Task k of the multi-task run `cfg` as a one-task run in its own directory."""
    name, config = cfg.tasks[k]
    return dataclasses.replace(cfg, task=name, env=config, mode=Sync(),
                               run_dir=str(task_dir(run_dir, name)))


def _constant(norm: nn.Module, dim: int, onehot: Tensor, device: torch.device) -> Tensor:
    """What the one-hot columns [T] read after the input normalizer (elementwise, so the
    other columns do not matter): [T] float64 on the host."""
    x = torch.cat([torch.zeros(dim, dtype=onehot.dtype), onehot])[None]  # [1, dim + T]
    return norm(x.float().to(device))[0, dim:].double().cpu()


def _first_layer(state: dict[str, Tensor], who: str) -> str:
    """The prefix of the layer that reads `who`'s (actor or critic) normalized input."""
    for prefix in (f"{who}.memory.cell", f"{who}.torso.0", f"{who}.mean", f"{who}.head"):
        if f"{prefix}.weight" in state or f"{prefix}.weight_ih" in state:
            return prefix
    raise KeyError(f"no input layer found for the {who}")


@torch.no_grad()
def task_view(ac: ActorCritic, k: int, obs_dim: int, critic_obs_dim: int,
              action_dim: int, agent) -> ActorCritic:
    """The multi-task actor-critic `ac` with task k fixed: an ordinary one-task network
    of the task's own observations [*, obs_dim] and [*, critic_obs_dim] (the one-hot
    columns dropped, their constant contribution folded into the first layer's bias) and
    task k's value output with its PopArt statistics."""
    tasks, device = ac.critic.tasks, next(ac.parameters()).device
    onehot = torch.nn.functional.one_hot(torch.tensor(k), tasks).double()  # [T]
    s = {n: v.detach().cpu().clone() for n, v in ac.state_dict().items()}
    for who, dim in (("actor", obs_dim), ("critic", critic_obs_dim)):
        c = _constant(getattr(ac, who).normalizer, dim, onehot, device)  # [T]
        for stat in ("mean", "var"):
            if f"{who}.normalizer.{stat}" in s:
                s[f"{who}.normalizer.{stat}"] = s[f"{who}.normalizer.{stat}"][:dim]
        layer = _first_layer(s, who)
        w_key, b_key = (f"{layer}.weight_ih", f"{layer}.bias_ih") \
            if f"{layer}.weight_ih" in s else (f"{layer}.weight", f"{layer}.bias")
        w = s[w_key]  # [H, dim + T]
        s[b_key] = (s[b_key].double() + w[:, dim:].double() @ c).to(w.dtype)
        s[w_key] = w[:, :dim].contiguous()
    for key in ("critic.head.weight", "critic.head.bias", "critic.popart.mu",
                "critic.popart.nu"):
        if key in s:
            s[key] = s[key][k:k + 1].clone()
    view = ActorCritic(obs_dim, critic_obs_dim, action_dim, agent)
    view.load_state_dict(s)
    return view.to(device)


def write_task_views(run_dir: Path, trainer, checkpoint: Checkpoint) -> None:
    """Each task's one-task run directory (config.json and checkpoint), from the trainer's
    multi-task actor-critic as it now stands; its env steps are the task's own share."""
    cfg, env, at = trainer.cfg, trainer.env, checkpoint.counters
    for k, (name, sub) in enumerate(zip(env.names, env.envs)):
        one = task_config(cfg, run_dir, k)
        ac = task_view(trainer.ac, k, sub.obs_dim, sub.critic_obs_dim, sub.action_dim,
                       cfg.agent_effective)
        write_config(task_dir(run_dir, name), one)
        counters = Counters(at.iteration, at.env_steps * sub.num_envs // env.num_envs,
                            at.wall_s)
        save_checkpoint(task_dir(run_dir, name) / CHECKPOINT, Checkpoint(
            VIEW, to_json(one), counters, {"model": ac.state_dict(), "view_of": str(run_dir)}))
