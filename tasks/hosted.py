"""Sebulba mode: MuJoCo C steps on the host cores, the learner lives on a GPU.

`make_env(task, sim="cpu", device="cuda")` builds the env on the host and wraps it in
`HostedEnv`, which the trainer, the evaluation and any consumer use as an `Env` on the
GPU. Per step there are exactly two copies, the one intended exception to "no host copies
in the step loop":
- device to host: the actions [N, A], into a pinned buffer. Blocking, because MuJoCo needs
  them before it can step (a non-blocking copy would be waited on at once);
- host to device: everything the step returns (both observations, the observations before
  the reset, reward, terminated, truncated and the step's 0-d metrics), packed into one
  pinned [N, D] float32 buffer and sent with `non_blocking=True`, so the host goes on to
  the next launch while the copy runs.

The packed buffer is reused every step. That is safe because the next step's blocking
action copy waits, on the same stream, for everything queued before it, this copy
included. Collection and learning take turns, as in the rest of trot: the host does not
step envs while the GPU updates (no actor threads; that overlap is not built).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trot.tasks.base import Observation, StepResult
from trot.tasks.env import Env
from trot.tasks.mirror import Mirrors


class HostedEnv:
    """An `Env` on the host, seen from `device`. Everything not listed here (num_envs,
    obs_dim, task, stats, state_dict, ...) is the host env's own."""

    def __init__(self, env: Env, device: torch.device):
        if env.device.type != "cpu":
            raise ValueError(f"HostedEnv wraps an env on the host, not on {env.device}")
        self.inner, self.device = env, torch.device(device)
        n, pin = env.num_envs, self.device.type == "cuda"  # pinning needs a GPU
        p, c = env.obs_dim, env.critic_obs_dim
        # [N, D]: obs (policy, critic), final obs (policy, critic), reward, terminated,
        # truncated, one column per 0-d metric (broadcast; row 0 is read back)
        self._cols = (p, c, p, c, 1, 1, 1)
        self._pack: Tensor | None = None  # allocated at the first step (metrics known)
        self._action = torch.empty(n, env.action_dim, pin_memory=pin)  # [N, A]
        self._pin = pin
        self.obs: Observation | None = None

    def __getattr__(self, name: str):  # only for names this class does not define
        if name == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def load_state_dict(self, state: dict) -> None:
        self.inner.load_state_dict(state)
        self._received()

    def _received(self) -> Observation | None:
        """The host env's current observation, copied to the device (resets and loads)."""
        obs = self.inner.obs
        self.obs = None if obs is None else Observation(obs.policy.to(self.device),
                                                        obs.critic.to(self.device))
        return self.obs

    # evaluation reads per-step metrics after each step: seen on the learner's device
    @property
    def record_eval_metrics(self) -> bool:
        return self.inner.record_eval_metrics

    @record_eval_metrics.setter
    def record_eval_metrics(self, on: bool) -> None:
        self.inner.record_eval_metrics = on

    @property
    def eval_step(self) -> dict[str, Tensor]:
        return {k: v.to(self.device) for k, v in self.inner.eval_step.items()}

    @property
    def eval_outcomes(self) -> dict[str, Tensor]:
        return {k: v.to(self.device) for k, v in self.inner.eval_outcomes.items()}

    def mirrors(self) -> Mirrors:
        return self.inner.mirrors().to(self.device)

    def reset(self, stagger: bool = False) -> Observation:
        self.inner.reset(stagger)
        return self._received()

    def step(self, action: Tensor) -> StepResult:
        if not isinstance(action, Tensor) or action.device != self.device:
            raise ValueError(f"action must be a tensor on {self.device}, this env's device "
                             f"(its physics runs on the host); got "
                             f"{getattr(action, 'device', type(action).__name__)}")
        self._action.copy_(action)  # blocking: MuJoCo needs it now
        res = self.inner.step(self._action)
        return self._send(res)

    def _send(self, res: StepResult) -> StepResult:
        """Pack the host step's results into the pinned buffer, one copy to the device."""
        n = self.inner.num_envs
        parts = [res.obs.policy, res.obs.critic, res.final_obs.policy, res.final_obs.critic,
                 res.reward[:, None], res.terminated[:, None], res.truncated[:, None],
                 *(v.expand(n)[:, None] for v in res.metrics.values())]
        if self._pack is None:
            width = sum(self._cols) + len(res.metrics)
            self._pack = torch.empty(n, width, pin_memory=self._pin)  # [N, D]
        torch.cat([x.float() for x in parts], 1, out=self._pack)
        # a new tensor on the device every step (copy=True also on a cpu learner, whose
        # results must not alias the buffer the next step overwrites)
        dev = self._pack.to(self.device, non_blocking=True, copy=True)  # [N, D]
        sizes = self._cols + (1,) * len(res.metrics)
        obs_p, obs_c, fin_p, fin_c, reward, term, trunc, *metrics = dev.split(sizes, 1)
        self.obs = Observation(obs_p, obs_c)
        return StepResult(self.obs, reward[:, 0], term[:, 0] > 0.5, trunc[:, 0] > 0.5,
                          Observation(fin_p, fin_c),
                          {k: m[0, 0].to(v.dtype)  # counts: exact in float32 below 2**24
                           for (k, v), m in zip(res.metrics.items(), metrics)})
