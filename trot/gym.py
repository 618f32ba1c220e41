"""A Gymnasium vector env over a trot `Env`: `make_vec("cartpole-balance", num_envs=64)`.

    import trot.gym
    envs = trot.gym.make_vec("gym-ant", num_envs=16, seed=0)
    obs, infos = envs.reset(seed=0)                       # [16, 27] float32
    obs, rew, term, trunc, infos = envs.step(envs.action_space.sample())

Spaces: `single_observation_space` is an unbounded float32 Box of the task's policy
observation; `single_action_space` is Box(-1, 1, (action_dim,), float32), the range trot
clips actions to before its task maps them to controls (`Task.action_to_ctrl`);
`observation_space` and `action_space` are their batched versions.

Autoreset: trot resets an env in the same step as it terminates or truncates, so
`metadata["autoreset_mode"]` is `AutoresetMode.SAME_STEP` and, as in Gymnasium 1.x's own
vector envs in that mode:
  * the returned `obs[i]` of an env that ended is the first observation of its next
    episode, and `reward[i]`, `terminated[i]`, `truncated[i]` belong to the step that ended
    the old one;
  * the observation of the state that step reached is `infos["final_obs"][i]`: an object
    array of length num_envs holding that observation where an env ended and None
    elsewhere, with the bool mask `infos["_final_obs"]` (and `infos["final_info"]`,
    empty, with `_final_info`). The keys are present only on steps where an env ended.
Time limits (the task's `episode_seconds`) truncate. `reset(seed=s)` reseeds the env's
generator (start states, observation noise) and resets every env; trot seeds all envs
from one generator, so `seed` is one int, not a list.

Arrays: by default numpy on the host (observations float32, rewards float64, flags bool),
as Gymnasium does. With `torch=True` everything stays a torch tensor on the env's device
(observations [N, P] float32, rewards float32, flags bool; actions must then be float32
tensors on that device), nothing is copied to the host, and `infos["final_obs"]` is the
dense [N, P] tensor of final observations (equal to `obs` where no env ended) with
`infos["_final_obs"]` the [N] bool tensor; the keys are then always present, since
checking whether any env ended would need a host sync.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
import torch as th
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

import trot
from trot.tasks.env import Env


class TrotVectorEnv(VectorEnv):
    """N envs of one trot task as a `gymnasium.vector.VectorEnv` (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env: Env, torch: bool = False):
        self.env = env
        self.as_torch = torch
        self.num_envs = env.num_envs
        self.device = env.device
        self.single_observation_space = gymnasium.spaces.Box(
            -np.inf, np.inf, (env.obs_dim,), dtype=np.float32)
        self.single_action_space = gymnasium.spaces.Box(-1.0, 1.0, (env.action_dim,),
                                                        dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every env; a seed reseeds the generator of start states and noise."""
        if options:
            raise ValueError(f"reset options {sorted(options)} are not supported: trot "
                             "resets ended envs itself (same-step autoreset), and reset() "
                             "resets them all")
        if seed is not None:
            if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
                raise TypeError(f"seed must be one int (trot seeds all envs from one "
                                f"generator), got {type(seed).__name__}")
            self.env.gen.manual_seed(int(seed))
        obs = self.env.reset().policy  # [N, P]
        return (obs if self.as_torch else obs.cpu().numpy()), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if self.as_torch:
            res = self.env.step(actions)
            done = res.terminated | res.truncated  # [N]
            infos = {"final_obs": res.final_obs.policy, "_final_obs": done}
            return res.obs.policy, res.reward, res.terminated, res.truncated, infos
        a = th.from_numpy(np.asarray(actions, dtype=np.float32).reshape(
            self.num_envs, self.env.action_dim)).to(self.device)  # [N, A]
        res = self.env.step(a)
        term, trunc = res.terminated.cpu().numpy(), res.truncated.cpu().numpy()
        done = term | trunc
        infos: dict[str, Any] = {}
        if done.any():  # Gymnasium's SAME_STEP layout: object array, None where not ended
            final = res.final_obs.policy.cpu().numpy()  # [N, P]
            objs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                objs[i] = final[i]
            infos = {"final_obs": objs, "_final_obs": done, "final_info": {},
                     "_final_info": done.copy()}
        reward = res.reward.cpu().numpy().astype(np.float64)
        return res.obs.policy.cpu().numpy(), reward, term, trunc, infos

    def __repr__(self) -> str:
        return f"TrotVectorEnv({self.env.name}, num_envs={self.num_envs})"


def make_vec(task: str, num_envs: int, sim: str = "cpu", device: str | th.device = "cpu",
             seed: int = 0, torch: bool = False, **kw: Any) -> TrotVectorEnv:
    """`trot.make_env(task, num_envs, sim, device, seed, **kw)` as a Gymnasium vector env;
    `torch=True` keeps observations, rewards and flags as tensors on the device."""
    return TrotVectorEnv(trot.make_env(task, num_envs=num_envs, sim=sim, device=device,
                                       seed=seed, **kw), torch=torch)
