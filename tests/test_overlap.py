"""Collection overlapped with learning (`TrainConfig.async_collect`, agents/overlap.py): it
trains exactly as `actor_lag=1`, whose schedule it reorders in time; the next rollout is
collected on another thread; it resumes bitwise; the collector's errors reach the caller."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from test_trainer import _isolate  # noqa: F401  (autouse: cwd, threads, RNG restored)
from test_trainer import _assert_same, _new_run, _no_wall

from trot.agents.loop import save
from trot.agents.config import PPOConfig
from trot.agents.learners import build, resume
from trot.agents.modes import Sync
from trot.agents.train_config import TrainConfig


def _cfg(tmp_path, overlap: bool, name: str = "run") -> TrainConfig:
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(16, 16), critic_hidden=(16, 16),
                                rollout_steps=8)
    return TrainConfig(task="cartpole-balance", num_envs=16, agent=agent, max_env_steps=10**7,
                       mode=Sync(actor_lag=1, async_collect=overlap), torch_threads=1,
                       update_threads=1,
                       run_dir=str(tmp_path / name))


def _update_stats(m: dict) -> dict:
    """The learner's numbers: episode statistics are popped after the collector's join, so
    under the overlap they also cover the rollout collected meanwhile."""
    return {k: v for k, v in _no_wall(m).items()
            if not k.startswith(("episode", "reward/", "task/"))}


def _threads_of_steps(trainer) -> list[str]:
    names, step = [], trainer.env.step

    def recording(action):
        names.append(threading.current_thread().name)
        return step(action)

    trainer.env.step = recording
    return names


def test_async_collect_trains_exactly_as_actor_lag_one(tmp_path):
    """4 iterations of each: the same updates to the bit (weights, optimizer, statistics),
    and after the lagged run collects its 5th rollout, the same rollout, env and noise
    stream as the overlap's pending one. Rollouts 2.. are stepped on the collector thread.
    The bugs: the collector acting with the newest parameters (a lag of 0), one buffer for
    both threads (the next rollout overwriting the one being learned from), V(s_t) from the
    critic before the last update, env steps counted when collected, no thread at all."""
    lagged, overlap = build(_cfg(tmp_path, False)), build(_cfg(tmp_path, True))
    where = _threads_of_steps(overlap)
    for it in range(4):
        assert _update_stats(overlap.iterate()) == _update_stats(lagged.iterate()), it
    _assert_same(overlap.ac.state_dict(), lagged.ac.state_dict(), "model")
    _assert_same(overlap.algo.optimizer.state_dict(), lagged.algo.optimizer.state_dict(),
                 "optimizer")
    assert overlap.env_steps == lagged.env_steps == 4 * 8 * 16
    ro = lagged.collect()  # the 5th rollout, by the actor of update 3 (snapshot 0)
    pending = overlap.collector.prefetch.pending.state_dict()
    want = ro.state_dict()
    del pending["values"], want["values"]  # computed when it is learned from
    _assert_same(pending, want, "pending rollout")
    _assert_same(overlap.env.state_dict(), lagged.env.state_dict(), "env")
    _assert_same(overlap.collector.noise_gen.get_state(),
                 lagged.collector.noise_gen.get_state(), "noise")
    steps = 8
    assert set(where[:steps]) == {threading.main_thread().name}  # the first, not overlapped
    assert len(where) == 5 * steps and all(n.startswith("trot-collect") for n in where[steps:])


def test_async_collect_resumes_bitwise(tmp_path):
    """Straight against checkpointed after 2 iterations and resumed: the checkpoint holds
    the rollout collected during the last update. Without it the resumed run collects
    another one and the weights differ."""
    straight = build(_cfg(tmp_path, True, "straight"))
    m_straight = [_no_wall(straight.iterate()) for _ in range(4)]
    first, run_dir = _new_run(_cfg(tmp_path, True))
    m_split = [_no_wall(first.iterate()) for _ in range(2)]
    save(first, run_dir)
    del first
    second = resume(run_dir)[0]
    assert second.collector.prefetch.pending is not None
    m_split += [_no_wall(second.iterate()) for _ in range(2)]
    assert m_split == m_straight
    _assert_same(second.ac.state_dict(), straight.ac.state_dict(), "model")
    _assert_same(second.env.state_dict(), straight.env.state_dict(), "env")
    _assert_same(second.collector.prefetch.pending.state_dict(),
                 straight.collector.prefetch.pending.state_dict(),
                 "pending rollout")


def test_a_collector_error_is_raised_by_iterate(tmp_path):
    """An env error on the collector thread surfaces in the learner's iterate, not lost in
    a dead thread."""
    tr = build(_cfg(tmp_path, True))
    tr.iterate()
    step = tr.env.step

    def failing(action):
        if threading.current_thread() is not threading.main_thread():
            raise FloatingPointError("physics blew up")
        return step(action)

    tr.env.step = failing
    with pytest.raises(FloatingPointError, match="physics blew up"):
        tr.iterate()


def test_async_collect_needs_actor_lag_one():
    with pytest.raises(ValueError, match="actor_lag=1"):
        TrainConfig(mode=Sync(async_collect=True)).validate()
    with pytest.raises(ValueError, match="actor_lag=2"):
        TrainConfig(mode=Sync(async_collect=True, actor_lag=2)).validate()
