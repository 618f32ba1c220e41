"""rsl_rl adapter: any trot task as an rsl_rl `VecEnv`, trained by rsl_rl's own
`OnPolicyRunner` and PPO (rsl-rl-lib 5.x) on the env's device, as legged_gym, Isaac Lab and
mjlab hand their envs to rsl_rl.

    trot rsl-rl cartpole-balance --num-envs 64 --max-iterations 20
    python -m trot.rslrl cartpole-balance --set algorithm.learning_rate=3e-4

    from trot.rslrl import train
    rows = train("cartpole-balance", num_envs=128, max_iterations=30)

What rsl_rl gets from `TrotVecEnv.step`: a TensorDict of the observation groups `policy`
and `critic` (trot's asymmetric observations; the same tensor twice where the task has no
privileged terms), rewards [N], dones [N] (terminated or truncated) and
`extras["time_outs"]` [N] (trot's truncations), all the env's own tensors. rsl_rl's PPO
turns time-outs into `r += gamma * V(s_t)`, the value of the state *before* the last step;
trot's own learner bootstraps from V(final_obs), for which rsl_rl's interface has no slot.

Needs `pip install rsl-rl-lib` (5.x; the `rslrl` extra). See docs/adapters.md.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from trot.adapters import config_with, merge_dotted, parser
from trot.adapters import overrides as adapter_overrides
from trot.agents.collect import set_threads
from trot.core.files import atomic_write
from trot.agents.config import PPOConfig, tuned
from trot.tasks.base import Observation
from trot.tasks.env import Env
from trot.tasks.registry import get_task, is_registered, make_env
from trot.export.onnx import DeployedPolicy, export_policy, require_export_deps
from trot.tasks.sources import load_recorded

try:
    from rsl_rl.env import VecEnv
    from tensordict import TensorDict
except ImportError:  # the rslrl extra is missing: main() says so; importing still works
    VecEnv, TensorDict = object, None


class TrotVecEnv(VecEnv):
    """A trot `Env` behind rsl_rl's `VecEnv`. Nothing is copied or moved: the observation
    groups, rewards and flags are the tensors trot's env returns, on its device.

    Episode statistics: trot's env accumulates them on the device; every `log_every` steps
    (one rsl_rl rollout: `num_steps_per_env`) they go to `extras["log"]` as means over the
    episodes finished since the last time (NaN where none finished), which rsl_rl's logger
    writes under their own names (`Episode/episode_return`, `Episode/reward/<term>`, ...).

    The env is reset and stepped in inference mode, as rsl_rl's rollout steps it: its state
    tensors become inference tensors there, which torch lets only inference mode update in
    place, so a reset after `learn` would fail outside it."""

    def __init__(self, task: str, num_envs: int, sim: str = "cpu", device: str = "cpu",
                 seed: int = 0, stagger: bool = True, task_config: dict[str, Any] | None = None,
                 log_every: int = 24):
        cfg = config_with(task, task_config)
        self.env = make_env(task, int(num_envs), sim, device, int(seed), cfg)
        self.num_envs = self.env.num_envs
        self.num_actions = self.env.action_dim
        self.max_episode_length = self.env.max_episode_steps
        self.device = self.env.device
        self.cfg = {"task": task, "num_envs": self.num_envs, "sim": sim, "seed": int(seed),
                    "config": dataclasses.asdict(cfg)}
        self.stagger = stagger  # spread time-limit resets, as trot's trainer does
        self.log_every = int(log_every)
        self._steps = 0
        self.reset()

    @property
    def episode_length_buf(self) -> Tensor:
        return self.env.episode_step

    @episode_length_buf.setter
    @torch.inference_mode()
    def episode_length_buf(self, value: Tensor) -> None:
        # learn(init_at_random_ep_len=True) writes random clocks here; trot's own stagger
        # (stagger=True) also keeps those partial first episodes out of the statistics
        self.env.episode_step.copy_(value)

    def _groups(self, obs: Observation) -> TensorDict:
        return TensorDict({"policy": obs.policy, "critic": obs.critic},
                          batch_size=[self.num_envs], device=self.device)

    @torch.inference_mode()
    def reset(self) -> TensorDict:
        self._steps = 0
        return self._groups(self.env.reset(stagger=self.stagger))

    def get_observations(self) -> TensorDict:
        return self._groups(self.env.obs)

    @torch.inference_mode()
    def step(self, actions: Tensor) -> tuple[TensorDict, Tensor, Tensor, dict]:
        res = self.env.step(actions)  # trot clips actions to [-1, 1]
        extras: dict[str, Any] = {"time_outs": res.truncated}
        self._steps += 1
        if self._steps % self.log_every == 0:
            extras["log"] = self.episode_log()
        return self._groups(res.obs), res.reward, res.terminated | res.truncated, extras

    @torch.inference_mode()  # the sums are inference tensors, made during rsl_rl's rollouts
    def episode_log(self) -> dict[str, Tensor]:
        """trot's per-episode means since the last call, as 0-d device tensors (no host
        sync); a rollout in which no episode ended logs NaN rather than a false 0."""
        names, vals = self.env.pop_stats()
        means = vals[2:].masked_fill(vals[0] == 0, math.nan)
        vals = torch.cat([vals[:2], means])
        return {f"Episode/{n}": v for n, v in zip(names, vals.unbind())}


def unmapped(a: PPOConfig) -> list[str]:
    """The task's agent settings rsl_rl's PPO has no counterpart for (train prints them)."""
    notes = []
    if a.popart:
        notes.append("popart: rsl_rl learns the value of raw returns")
    if a.symmetry != "none":
        notes.append(f"symmetry={a.symmetry!r}: trained without it (rsl_rl's Symmetry "
                     "extension takes its own augmentation function)")
    if a.clip_high != a.clip_low:
        notes.append(f"clip_high={a.clip_high}: rsl_rl clips symmetrically at clip_low")
    if a.advantage_norm == "none":
        notes.append("advantage_norm='none': rsl_rl always normalizes advantages")
    if a.share_torso:
        notes.append("share_torso: rsl_rl's actor and critic are separate networks")
    if a.update_dtype != "float32":
        notes.append(f"update_dtype={a.update_dtype!r}: rsl_rl updates in float32")
    if a.value_scale != 1.0:
        notes.append(f"value_scale={a.value_scale}: rsl_rl's critic outputs are not scaled")
    if a.kl_penalty:
        notes.append(f"kl_penalty={a.kl_penalty}: rsl_rl's PPO has no KL penalty term")
    return notes


def make_config(task: str, num_envs: int = 256, agent: PPOConfig | None = None,
                save_interval: int = 50) -> dict[str, Any]:
    """rsl_rl's train config (the dict OnPolicyRunner takes) from the task's tuned trot
    agent settings, field by field; see `unmapped` for what does not carry over."""
    a = agent or tuned(get_task(task).agent)
    a.validate(num_envs)
    if not a.clip:
        raise ValueError("rsl_rl runs clipped PPO only (clip=True)")
    if a.rnn != "none":
        raise ValueError("the rsl_rl adapter maps MLP agents only (rnn='none')")

    def model(hidden: tuple[int, ...], dist: dict[str, Any] | None) -> dict[str, Any]:
        return {"class_name": "MLPModel", "hidden_dims": list(hidden),
                "activation": a.activation, "obs_normalization": a.obs_norm,
                "distribution_cfg": dist}

    gaussian = {"class_name": "GaussianDistribution", "std_type": "log",  # as trot's
                "init_std": math.exp(a.init_log_std)}  # rsl_rl takes the std itself
    return {
        "num_steps_per_env": a.rollout_steps, "save_interval": save_interval,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "check_for_nan": False,  # trot's env guards NaN itself; this syncs thrice a step
        "logger": "tensorboard", "run_name": task,
        "algorithm": {
            "class_name": "PPO", "num_learning_epochs": a.epochs,
            "num_mini_batches": a.minibatches, "learning_rate": a.learning_rate,
            "schedule": "adaptive" if a.desired_kl > 0 else "fixed",
            "desired_kl": a.desired_kl or None, "gamma": a.gamma, "lam": a.lam,
            "clip_param": a.clip_low, "use_clipped_value_loss": a.value_clip > 0,
            "value_loss_coef": a.value_coef, "entropy_coef": a.entropy_coef,
            "max_grad_norm": a.max_grad_norm,
            "normalize_advantage_per_mini_batch": a.advantage_norm == "minibatch"},
        "actor": model(a.actor_hidden, gaussian),
        "critic": model(a.critic_hidden, None),
    }


def apply_overrides(cfg: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge {"algorithm.learning_rate": 3e-4, "actor.hidden_dims": [64, 64]} (dotted
    keys) into a copy of cfg."""
    out = copy.deepcopy(cfg)
    merge_dotted(out, overrides)
    return out


def trot_threads(runner) -> None:
    """rsl_rl's runner on a CPU with trot's trainer's thread rule (TrainConfig's
    torch_threads=1, update_threads=0): one torch thread while MuJoCo's threads step the
    envs, every core for the update, when the sim is idle. Call with one thread set."""
    update = runner.alg.update

    def update_on_every_core(*args, **kw):
        set_threads(0)
        try:
            return update(*args, **kw)
        finally:
            set_threads(1)

    runner.alg.update = update_on_every_core


def _record(runner, rows: list[dict[str, float]]) -> None:
    """After each iteration's log, a row from rsl_rl's own statistics: the mean return and
    length of the last 100 finished episodes (partial staggered ones included)."""
    logger, log = runner.logger, runner.logger.log

    def log_and_record(*args, **kw) -> None:
        log(*args, **kw)
        if logger.rewbuffer:
            rows.append({"iteration": float(kw.get("it", args[0] if args else -1)),
                         "env_steps": float(logger.tot_timesteps),
                         "seconds": float(logger.tot_time),
                         "mean_return": statistics.mean(logger.rewbuffer),
                         "mean_length": statistics.mean(logger.lenbuffer)})

    logger.log = log_and_record


def train(task: str, num_envs: int = 256, max_iterations: int = 100, seed: int = 0,
          device: str = "cpu", sim: str = "cpu", run_dir: str | Path | None = None,
          overrides: dict[str, Any] | None = None, agent: PPOConfig | None = None,
          task_config: dict[str, Any] | None = None) -> list[dict[str, float]]:
    """Train `task` with rsl_rl's OnPolicyRunner for max_iterations iterations. rsl_rl writes
    TensorBoard events and model_<it>.pt into run_dir (default runs_rslrl/<task>), next to
    rslrl.json (the run's settings). Returns one row per iteration once episodes have
    finished (iteration, env_steps, seconds, mean_return, mean_length)."""
    from rsl_rl.runners import OnPolicyRunner

    run_dir = Path(run_dir or Path("runs_rslrl") / task)
    cfg = make_config(task, num_envs, agent)
    cfg = apply_overrides(cfg, overrides or {})
    for note in unmapped(agent or tuned(get_task(task).agent)):
        print(f"trot rsl-rl: not mapped: {note}", file=sys.stderr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as trot's trainer: the cores belong to MuJoCo's threads
    torch.manual_seed(seed)  # rsl_rl's runner does not seed
    rows: list[dict[str, float]] = []
    try:
        env = TrotVecEnv(task, num_envs, sim, device, seed, task_config=task_config,
                         log_every=cfg["num_steps_per_env"])
        runner = OnPolicyRunner(env, cfg, log_dir=str(run_dir), device=str(env.device))
        trot_threads(runner)
        _record(runner, rows)
        record = json.dumps({
            "task": task, "task_source": get_task(task).source.to_json(),
            "num_envs": num_envs, "seed": seed, "device": device, "sim": sim,
            "task_config": dict(task_config or {}), "train_cfg": runner.cfg},
            indent=1, default=str)
        atomic_write(run_dir / SETTINGS, lambda p: p.write_text(record))  # whole or absent
        runner.learn(max_iterations, init_at_random_ep_len=False)  # env.stagger did it
    finally:
        torch.set_num_threads(threads)
    return rows


SETTINGS = "rslrl.json"  # what `train` writes beside rsl_rl's own files
CHECKPOINT = re.compile(r"model_(\d+)\.pt")


def last_checkpoint(run_dir: Path) -> tuple[Path, int]:
    """rsl_rl's newest model_<it>.pt in run_dir and its iteration; a ValueError naming the
    folder where it holds none."""
    found = [(int(m.group(1)), f) for f in Path(run_dir).iterdir()
             if (m := CHECKPOINT.fullmatch(f.name))]
    if not found:
        raise ValueError(f"{run_dir} holds no rsl_rl checkpoint (model_<iteration>.pt)")
    it, path = max(found)
    return path, it


def load_policy(run_dir: Path, num_envs: int = 64) -> tuple[Env, nn.Module, Any, int]:
    """An rsl_rl run's actor as it acts deterministically, rebuilt by rsl_rl's own runner
    from rslrl.json and loaded from the last model_<it>.pt: its observation normalizer,
    MLP and Gaussian mean (`MLPModel.as_onnx`), obs [B, P] -> mean [B, A]. Returns a
    noise-free trot env of the task (cpu backend), that actor, the task config and the
    env steps the checkpoint trained on."""
    from rsl_rl.runners import OnPolicyRunner


    run_dir = Path(run_dir)
    if not (run_dir / SETTINGS).is_file():
        raise ValueError(f"{run_dir} is not a `trot rsl-rl` run (no {SETTINGS})")
    settings = json.loads((run_dir / SETTINGS).read_text())
    task = settings["task"]
    if not is_registered(task):
        load_recorded(settings.get("task_source"), run_dir)
    path, it = last_checkpoint(run_dir)
    train_cfg = settings["train_cfg"]
    vec = TrotVecEnv(task, num_envs, "cpu", "cpu", settings["seed"], stagger=False,
                     task_config={**settings["task_config"], "obs_noise": False})
    runner = OnPolicyRunner(vec, copy.deepcopy(train_cfg), log_dir=None, device="cpu")
    runner.load(str(path), load_cfg={"actor": True}, map_location="cpu")
    actor = runner.get_inference_policy("cpu").as_onnx(verbose=False).eval()
    # rsl_rl saves model_<it>.pt after iteration it (counted from 0): it + 1 rollouts
    steps = (it + 1) * train_cfg["num_steps_per_env"] * settings["num_envs"]
    return vec.env, actor, vec.env.task.config, steps


def export(run_dir: Path, out: Path | None = None, quiet: bool = False):
    """`trot export` of an rsl_rl run: its actor and normalizer into trot's contract
    (policy.onnx, policy.json, model.xml), checked as any trot export is."""

    require_export_deps()
    env, actor, config, steps = load_policy(run_dir)
    return export_policy(env, DeployedPolicy(actor), config, steps,
                         Path(run_dir) if out is None else Path(out), quiet)


def main(argv: list[str] | None = None) -> int:
    p = parser("trot rsl-rl", "train a trot task with rsl_rl's PPO",
               "override an rsl_rl train config entry, e.g. "
               "algorithm.learning_rate=3e-4 or actor.hidden_dims=[64,64]")
    p.add_argument("--max-iterations", type=int, default=100)
    p.add_argument("--run-dir", default=None, help="default: runs_rslrl/TASK")
    p.add_argument("--export", action="store_true",
                   help="export the trained policy (policy.onnx, policy.json, model.xml) "
                        "into the run directory, as `trot export RUN_DIR` does")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    overrides = adapter_overrides(p, a.set)
    if TensorDict is None:
        print("trot: error: rsl_rl is not installed: pip install 'trot[rslrl]' "
              "(see docs/adapters.md)", file=sys.stderr)
        return 2
    run_dir = Path(a.run_dir or Path("runs_rslrl") / a.task)
    rows = train(a.task, a.num_envs, a.max_iterations, a.seed, a.device, a.sim, run_dir,
                 overrides)
    if rows:
        last = rows[-1]
        print(f"iteration {last['iteration']:.0f}: mean return {last['mean_return']:.2f}, "
              f"mean length {last['mean_length']:.1f}")
    if a.export:
        export(run_dir)
    print(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
