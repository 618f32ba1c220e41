"""rl_games adapter: any trot task as an rl_games vecenv, trained by rl_games' PPO
(`a2c_continuous`) on the env's device, the way IsaacGymEnvs hands its envs to rl_games.

    trot rl-games cartpole-balance --num-envs 256 --max-epochs 50
    python -m trot.rlgames cartpole-balance --set config.learning_rate=3e-4

    from trot.rlgames import train
    history = train("cartpole-balance", num_envs=256, max_epochs=50)

What rl_games gets from `TrotVecEnv.step`: observations as torch tensors on the env's device
(`{"obs": policy, "states": critic}` when the task has privileged critic terms), rewards
[N], dones [N] (terminated or truncated, uint8) and `infos["time_outs"]` [N] (truncated),
which rl_games' `value_bootstrap` turns into `r += gamma * V(s_t)` on time-limit steps.
That is rl_games' (and IsaacGymEnvs') approximation: trot's own learner bootstraps from
V(final_obs), the true last state, which rl_games' vecenv interface has no slot for.

`train` records the run in <train_dir>/<task>/rlgames.json, from which `trot eval` and
`trot play` rebuild rl_games' actor (`load_policy`).

Needs `pip install rl-games` (1.6.5 pulls gymnasium, not gym; it does not touch torch or
numpy). See docs/adapters.md.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from trot.adapters import config_with, merge_dotted, parser
from trot.adapters import overrides as adapter_overrides
from trot.agents.config import PPOConfig, tuned
from trot.core.files import atomic_write
from trot.tasks.base import Observation, Task, TaskConfig
from trot.tasks.env import Env
from trot.tasks.registry import get_task, is_registered, make_env
from trot.tasks.sources import load_recorded

ENV_NAME = "trot"  # rl_games' env_configurations key
VECENV_TYPE = "TROT"  # rl_games' vecenv type
SETTINGS = "rlgames.json"  # what `train` writes beside rl_games' nn/ and summaries/


def _asymmetric(task: Task) -> bool:
    """Privileged critic terms: rl_games then needs a separate central value net."""
    return task.critic_terms() != task.policy_terms()


class TrotVecEnv:
    """A trot `Env` behind rl_games' IVecEnv interface (duck-typed: rl_games only calls
    these methods). Nothing leaves the device: rl_games keeps tensor observations as they are
    and hands back tensor actions."""

    def __init__(self, config_name: str, num_actors: int, task: str = "cartpole-balance",
                 sim: str = "cpu", device: str = "cpu", seed: int = 0, stagger: bool = True,
                 task_config: dict[str, Any] | None = None, **_ignored: Any):
        from rl_games.common.gym_compat import spaces

        cfg = config_with(task, task_config)
        self.env = make_env(task, int(num_actors), sim, device, int(seed), cfg)
        self.stagger = stagger  # spread time-limit resets, as trot's trainer does
        self.asymmetric = _asymmetric(self.env.task)
        inf = np.full(self.env.obs_dim, np.inf, dtype=np.float32)
        self.observation_space = spaces.Box(-inf, inf, dtype=np.float32)
        one = np.ones(self.env.action_dim, dtype=np.float32)
        self.action_space = spaces.Box(-one, one, dtype=np.float32)
        cinf = np.full(self.env.critic_obs_dim, np.inf, dtype=np.float32)
        self.state_space = spaces.Box(-cinf, cinf, dtype=np.float32)

    def _obs(self, obs: Observation) -> Tensor | dict[str, Tensor]:
        if self.asymmetric:  # rl_games' central value net reads obs["states"]
            return {"obs": obs.policy, "states": obs.critic}
        return obs.policy

    def reset(self) -> Tensor | dict[str, Tensor]:
        return self._obs(self.env.reset(stagger=self.stagger))

    def step(self, actions: Tensor):
        res = self.env.step(actions.to(torch.float32).contiguous())
        dones = (res.terminated | res.truncated).to(torch.uint8)
        infos = {"time_outs": res.truncated, "terminated": res.terminated}
        return self._obs(res.obs), res.reward, dones, infos

    def get_env_info(self) -> dict[str, Any]:
        info = {"observation_space": self.observation_space,
                "action_space": self.action_space, "agents": 1, "value_size": 1}
        if self.asymmetric:
            info["state_space"] = self.state_space
        return info

    def get_number_of_agents(self) -> int:
        return 1

    def has_action_masks(self) -> bool:
        return False

    def seed(self, seed: int) -> None:
        pass  # seeded at construction (env_config["seed"])

    def set_train_info(self, env_frames, *args, **kwargs) -> None:
        pass

    def get_env_state(self):
        return None

    def set_env_state(self, env_state) -> None:
        pass

    def close(self) -> None:
        pass


def register() -> None:
    """Make `env_name: trot` known to rl_games (idempotent)."""
    from rl_games.common import env_configurations, vecenv

    vecenv.register(VECENV_TYPE, lambda config_name, num_actors, **kw:
                    TrotVecEnv(config_name, num_actors, **kw))
    env_configurations.register(ENV_NAME, {
        "vecenv_type": VECENV_TYPE,
        # players and get_env_info build one env through this
        "env_creator": lambda **kw: TrotVecEnv(ENV_NAME, kw.pop("num_actors", 1), **kw),
    })


def _mlp(units: tuple[int, ...], activation: str) -> dict[str, Any]:
    return {"units": list(units), "activation": activation, "d2rl": False,
            "initializer": {"name": "default"}, "regularizer": {"name": "None"}}


def make_config(task: str, num_envs: int = 256, max_epochs: int = 100, seed: int = 0,
                device: str = "cpu", sim: str = "cpu", train_dir: str = "runs_rlgames",
                name: str | None = None, agent: PPOConfig | None = None,
                task_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """An rl_games YAML-style config ({"params": ...}) from the task's tuned trot agent
    settings, mapped field by field (PopArt becomes rl_games' value normalization)."""
    a = agent or tuned(get_task(task).agent)
    a.validate(num_envs)
    if not a.clip:
        raise ValueError("the rl_games adapter runs clipped PPO only (clip=True)")
    if a.symmetry != "none":
        raise ValueError("the rl_games adapter has no symmetry augmentation; "
                         "use symmetry='none' (trot train has it)")
    for field, plain in (("value_scale", 1.0), ("kl_penalty", 0.0)):
        if getattr(a, field) != plain:
            raise ValueError(f"the rl_games adapter has no {field}: use {field}={plain} "
                             f"(trot train has it), got {getattr(a, field)}")
    batch = num_envs * a.rollout_steps
    lr_schedule = "adaptive" if a.desired_kl > 0 else "constant"
    entry = get_task(task)
    asymmetric = _asymmetric(entry.task_cls(config_with(task, task_config)))
    config: dict[str, Any] = {
        "name": name or task, "full_experiment_name": name or task, "env_name": ENV_NAME,
        "device": device, "device_name": device, "multi_gpu": False, "mixed_precision": False,
        "torch_compile": False,  # compiling costs minutes on a CPU and gains little there
        "normalize_input": a.obs_norm, "normalize_value": a.popart,
        "normalize_advantage": a.advantage_norm != "none", "value_bootstrap": True,
        "reward_shaper": {"scale_value": 1.0}, "gamma": a.gamma, "tau": a.lam,
        "learning_rate": a.learning_rate, "lr_schedule": lr_schedule,
        "kl_threshold": a.desired_kl or 0.008, "max_epochs": max_epochs,
        "save_best_after": max_epochs + 1, "save_frequency": 0, "print_stats": True,
        "grad_norm": a.max_grad_norm, "truncate_grads": True, "entropy_coef": a.entropy_coef,
        "e_clip": a.clip_low, "clip_value": a.value_clip > 0, "critic_coef": 2.0 * a.value_coef,
        "horizon_length": a.rollout_steps, "num_actors": num_envs,
        "minibatch_size": batch // a.minibatches, "mini_epochs": a.epochs,
        "bounds_loss_coef": 1e-4, "clip_actions": True, "train_dir": train_dir,
        "env_config": {"task": task, "sim": sim, "device": device, "seed": seed,
                       "task_config": dict(task_config or {})},
    }
    if asymmetric:  # privileged critic observations: rl_games' central value net
        config["central_value_config"] = {
            "minibatch_size": batch // a.minibatches, "mini_epochs": a.epochs,
            "learning_rate": a.learning_rate, "lr_schedule": lr_schedule,
            "kl_threshold": a.desired_kl or 0.008, "clip_value": a.value_clip > 0,
            "normalize_input": a.obs_norm, "truncate_grads": True,
            "network": {"name": "actor_critic", "central_value": True,
                        "mlp": _mlp(a.critic_hidden, a.activation)},
        }
    network = {
        "name": "actor_critic", "separate": not a.share_torso,
        "space": {"continuous": {
            "mu_activation": "None", "sigma_activation": "None",
            "mu_init": {"name": "default"},
            "sigma_init": {"name": "const_initializer", "val": a.init_log_std},
            "fixed_sigma": True}},
        "mlp": _mlp(a.actor_hidden, a.activation),
    }
    return {"params": {"seed": seed, "torch_threads": 1, "algo": {"name": "a2c_continuous"},
                       "model": {"name": "continuous_a2c_logstd"}, "network": network,
                       "config": config}}


def apply_overrides(cfg: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge {"config.learning_rate": 3e-4, "network.mlp.units": [64, 64]} (dotted keys
    below "params") into a copy of cfg."""
    out = copy.deepcopy(cfg)
    merge_dotted(out["params"], overrides)
    return out


def _recorder():
    """An rl_games observer recording, after every epoch, the mean return of the last
    `games_to_track` finished episodes: what `train` returns. (Defined here so that importing
    this module does not need rl_games.)"""
    from rl_games.common.algo_observer import DefaultAlgoObserver

    class Recorder(DefaultAlgoObserver):
        def __init__(self) -> None:
            super().__init__()
            self.rows: list[dict[str, float]] = []

        def after_print_stats(self, frame, epoch_num, total_time) -> None:
            super().after_print_stats(frame, epoch_num, total_time)
            algo = self.algo
            if algo.game_rewards.current_size > 0:
                first = lambda m: float(np.asarray(m.get_mean()).reshape(-1)[0])
                self.rows.append({  # algo.frame: `frame` here lags by one epoch
                    "epoch": float(epoch_num), "env_steps": float(algo.frame),
                    "seconds": float(total_time), "mean_return": first(algo.game_rewards),
                    "mean_length": first(algo.game_lengths)})

    return Recorder()


def train(task: str, num_envs: int = 256, max_epochs: int = 100, seed: int = 0,
          device: str = "cpu", sim: str = "cpu", train_dir: str = "runs_rlgames",
          overrides: dict[str, Any] | None = None, agent: PPOConfig | None = None,
          task_config: dict[str, Any] | None = None) -> list[dict[str, float]]:
    """Train `task` with rl_games' PPO for max_epochs epochs; rl_games writes its
    TensorBoard summaries and checkpoints under train_dir/<task>/. Returns one row per epoch
    (epoch, env_steps, seconds, mean_return, mean_length) once episodes have finished."""
    from rl_games.torch_runner import Runner

    register()
    cfg = make_config(task, num_envs, max_epochs, seed, device, sim, train_dir,
                      agent=agent, task_config=task_config)
    cfg = apply_overrides(cfg, overrides or {})
    observer = _recorder()
    threads = torch.get_num_threads()  # rl_games sets it from params.torch_threads
    torch.manual_seed(seed)  # rl_games' Runner seeds only when seed != 0
    _write_settings(cfg, {"task": task, "task_source": get_task(task).source.to_json(),
                          "num_envs": num_envs, "seed": seed, "device": device, "sim": sim,
                          "task_config": dict(task_config or {})})
    try:
        runner = Runner(observer)
        runner.load(cfg)
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
    finally:
        torch.set_num_threads(threads)
    return observer.rows


def run_dir_of(cfg: dict[str, Any]) -> Path:
    """rl_games' experiment directory for this config: train_dir/full_experiment_name
    (without that name rl_games adds the time, and no later command could find it)."""
    c = cfg["params"]["config"]
    if not c.get("full_experiment_name"):
        raise ValueError("config.full_experiment_name must name the run (rl_games' "
                         "experiment directory under train_dir); got "
                         f"{c.get('full_experiment_name')!r}")
    return Path(c.get("train_dir", "runs")) / c["full_experiment_name"]


def _write_settings(cfg: dict[str, Any], record: dict[str, Any]) -> None:
    """rlgames.json: what `trot eval` and `trot play` rebuild the policy from (rl_games
    itself keeps its config nowhere in the run directory)."""
    text = json.dumps(record | {"params": cfg["params"]}, indent=1, default=str)
    atomic_write(run_dir_of(cfg) / SETTINGS, lambda p: p.write_text(text))  # whole or absent


def last_checkpoint(run_dir: Path) -> Path:
    """rl_games' newest checkpoint in run_dir/nn: the highest epoch in its name
    (`last_<name>_ep_<epoch>_rew_<r>.pth`), else the newest file; a ValueError naming the
    folder where it holds none."""
    found = list((Path(run_dir) / "nn").glob("*.pth"))
    if not found:
        raise ValueError(f"{run_dir} holds no rl_games checkpoint (nn/*.pth)")

    def order(f: Path) -> tuple[int, float]:
        m = re.search(r"_ep_(\d+)", f.name)
        return (int(m.group(1)) if m else -1, f.stat().st_mtime)

    return max(found, key=order)


def _read_checkpoint(path: Path) -> dict[str, Any]:
    """An rl_games checkpoint onto the CPU without running its pickled code (rl_games'
    own loader unpickles anything, and prints to stdout); its numpy scalars are let in."""
    scalar = np._core.multiarray.scalar if hasattr(np, "_core") else np.core.multiarray.scalar
    allowed = [scalar, np.dtype, *(type(np.dtype(t)) for t in ("float32", "float64"))]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, map_location="cpu", weights_only=True)


class DeterministicActor(nn.Module):
    """rl_games' deterministic action without its player: the model's input normalizer,
    then the network's Gaussian mean, obs [B, P] -> mean [B, A] (the player's
    `get_action(obs, is_deterministic=True)`, whose clip trot's env does)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, obs: Tensor) -> Tensor:
        mu, *_ = self.model.a2c_network({"obs": self.model.norm_obs(obs)})
        return mu


def load_policy(run_dir: Path, num_envs: int = 1) -> tuple[Env, nn.Module, TaskConfig, int]:
    """A `trot rl-games` run's actor, built by rl_games' own model builder from
    rlgames.json and loaded from the last checkpoint. Returns a noise-free trot env of
    the task (cpu backend), the actor (`DeterministicActor`), the task config and the env
    steps the checkpoint trained on (rl_games' frame count)."""
    from rl_games.algos_torch import model_builder  # the rlgames extra

    run_dir = Path(run_dir)
    if not (run_dir / SETTINGS).is_file():
        raise ValueError(f"{run_dir} is not a `trot rl-games` run (no {SETTINGS})")
    settings = json.loads((run_dir / SETTINGS).read_text())
    if not is_registered(settings["task"]):
        load_recorded(settings.get("task_source"), run_dir)
    path = last_checkpoint(run_dir)
    cfg = config_with(settings["task"], {**settings["task_config"], "obs_noise": False})
    env = make_env(settings["task"], num_envs, "cpu", "cpu", settings["seed"], cfg)
    params, c = settings["params"], settings["params"]["config"]
    model = model_builder.ModelBuilder().load(params).build({
        "actions_num": env.action_dim, "input_shape": (env.obs_dim,), "num_seqs": 1,
        "value_size": 1, "normalize_value": c.get("normalize_value", False),
        "normalize_input": c.get("normalize_input", False)})
    state = _read_checkpoint(path)
    model.load_state_dict({k.replace("_orig_mod.", ""): v  # a torch_compile'd run's names
                           for k, v in state["model"].items()})
    return env, DeterministicActor(model).eval(), cfg, int(state["frame"])


def main(argv: list[str] | None = None) -> int:
    p = parser("trot rl-games", "train a trot task with rl_games' PPO",
               "override an rl_games config entry below params, e.g. "
               "config.learning_rate=3e-4 or network.mlp.units=[64,64]")
    p.add_argument("--max-epochs", type=int, default=100)
    p.add_argument("--train-dir", default="runs_rlgames")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    overrides = adapter_overrides(p, a.set)
    try:
        import rl_games  # noqa: F401
    except ImportError:
        print("trot: error: rl_games is not installed: pip install 'trot[rlgames]' "
              "(see docs/adapters.md)", file=sys.stderr)
        return 2
    rows = train(a.task, a.num_envs, a.max_epochs, a.seed, a.device, a.sim, a.train_dir,
                 overrides)
    if rows:
        last = rows[-1]
        print(f"epoch {last['epoch']:.0f}: mean return {last['mean_return']:.2f}, "
              f"mean length {last['mean_length']:.1f}")
    print(Path(a.train_dir) / a.task)
    return 0


if __name__ == "__main__":
    sys.exit(main())
