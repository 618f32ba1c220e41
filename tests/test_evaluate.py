"""`trot eval`'s per-step metrics (agents/evaluate.py) are read from the state each step
reached, before the env resets the envs that ended: the last sample of an episode is its
own, not the next episode's start."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trot.agents.evaluate import run_episodes
from trot.sim import make_sim
from trot.tasks.cartpole import Cartpole
from trot.tasks.env import Env
from trot.tasks.registry import compile_model, get_task


class StepCounting(Cartpole):
    """Cartpole whose eval metric is the step index within the episode (1, 2, ... L)."""

    def bind(self, sim):
        super().bind(sim)
        self.count = torch.zeros(sim.num_envs)

    def on_reset(self, sim, mask, gen):
        super().on_reset(sim, mask, gen)
        self.count.masked_fill_(mask, 0.0)

    def pre_step(self, sim, gen):
        super().pre_step(sim, gen)
        self.count += 1.0

    def eval_metrics(self, sim):  # and an event metric, defined on the first step only
        return {"step_index": self.count.clone(),
                "first_step": torch.where(self.count == 1, 1.0, torch.nan)}


def test_the_last_sample_of_every_episode_is_its_own():
    cfg = dataclasses.replace(get_task("cartpole-balance").config, episode_seconds=1.0,
                              obs_noise=False)
    task = StepCounting(cfg)
    env = Env("counting", task, make_sim("cpu", compile_model(task), 64, cfg.substeps, "cpu"), 0)

    def policy(obs):  # pushes hard one way for half the envs: episodes of many lengths
        return torch.where(torch.arange(64)[:, None] % 2 == 0, 1.0, 0.0).expand(64, 1)

    out = run_episodes(env, policy, 64)
    assert 1 < out["mean_length"] < env.max_episode_steps  # some fell, some timed out
    # the mean of 1..L is (L + 1) / 2 for every episode, so over episodes too
    assert out["step_index"] == pytest.approx((out["mean_length"] + 1) / 2, rel=1e-6)
    # the second half is of the steps played, not of the steps the metric is defined on:
    # an event on the first step is in no episode's second half (every episode is longer)
    assert out["first_step"] == 1.0 and out["first_step_second_half"] is None
    assert out["step_index_second_half"] > out["step_index"]
