"""PPO's learner (`trot.agents.trainer`) in the one loop: bitwise resume, checkpoint errors
and atomic writes, the NaN-update guard, and a short learning run on cartpole-balance."""

from __future__ import annotations

import csv
import copy
import dataclasses
import math
import os
from pathlib import Path

import pytest
import torch
from extras import or_skip_for_extra

from trot.agents.checkpoint import CheckpointError, load_checkpoint
from trot.agents.config import PPOConfig, tuned
from trot.agents.learners import build, resume
from trot.agents.loop import save, train
from trot.agents.runs import CHECKPOINT
from trot.agents.modes import Sync
from trot.agents.train_config import TrainConfig, save_json
from trot.agents.trainer import MAX_CONSECUTIVE_NAN, TrainingDiverged
from trot.core.files import atomic_write
from trot.tasks.registry import get_task, task_names

TASK = "cartpole-balance"
WALL_KEYS = ("wall_s", "steps_per_s")


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    """MuJoCo may write MUJOCO_LOG.TXT into the cwd; the Trainer sets torch's thread count
    and seeds the global RNG: keep both from leaking into other tests."""
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    rng = torch.get_rng_state()
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)


def _cfg(tmp_path: Path, name: str = "run", num_envs: int = 32, algo: str = "ppo",
         **agent_kw) -> TrainConfig:
    agent = dataclasses.replace(PPOConfig(), actor_hidden=(32, 32), critic_hidden=(32, 32),
                                rollout_steps=8, **agent_kw)
    return TrainConfig(task=TASK, num_envs=num_envs, agent=agent, max_env_steps=10**7,
                       run_dir=str(tmp_path / name), algo=algo)


def _new_run(cfg: TrainConfig):
    trainer = build(cfg)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_json(run_dir / "config.json", cfg)
    return trainer, run_dir


def resume_run(run_dir: Path):
    return resume(run_dir)[0]


def _no_wall(m: dict) -> dict:
    return {k: v for k, v in m.items() if k not in WALL_KEYS}


def _assert_same(a, b, path="") -> None:
    """Bitwise equality of nested dicts/lists of tensors and plain values."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _dir_contents(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _all_finite(obj) -> bool:
    if isinstance(obj, torch.Tensor):
        return not obj.is_floating_point() or bool(obj.isfinite().all())
    if isinstance(obj, dict):
        return all(_all_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_all_finite(v) for v in obj)
    return True


# ---------------------------------------------------------------------- resume
def test_resume_is_bitwise_identical_to_straight_run(tmp_path):
    K = 3
    cfg = _cfg(tmp_path)

    straight = build(cfg)
    m_straight = [_no_wall(straight.iterate()) for _ in range(2 * K)]
    rng_straight = torch.get_rng_state()  # the policy samples from the global RNG

    first, run_dir = _new_run(cfg)
    m_split = [_no_wall(first.iterate()) for _ in range(K)]
    save(first, run_dir)
    del first
    torch.rand(1000)  # a new process would start from another global RNG state
    torch.manual_seed(12345)
    second = resume_run(run_dir)
    assert second.iteration == K and second.env_steps == K * 8 * 32
    m_split += [_no_wall(second.iterate()) for _ in range(K)]

    assert [m["iteration"] for m in m_split] == list(range(1, 2 * K + 1))
    assert m_split == m_straight  # every metric, float for float
    _assert_same(second.ac.state_dict(), straight.ac.state_dict(), "model")
    _assert_same(second.algo.optimizer.state_dict(), straight.algo.optimizer.state_dict(),
                 "optimizer")
    _assert_same(second.algo.lr, straight.algo.lr, "lr")
    _assert_same(second.env.state_dict(), straight.env.state_dict(), "env")
    _assert_same(second.gen.get_state(), straight.gen.get_state(), "gen")
    _assert_same(torch.get_rng_state(), rng_straight, "torch_rng")
    assert second.env_steps == straight.env_steps and second.iteration == straight.iteration


@pytest.mark.parametrize("task", task_names())
def test_resume_is_bitwise_on_every_task(tmp_path, task):
    """Straight against checkpointed-and-resumed, on every registered task (cpu backend):
    tasks differ in what the sim tracks (gym-ant's cfrc_ext, go1's randomized parameters),
    and a state the checkpoint misses shows up as differing weights."""
    agent = dataclasses.replace(tuned(get_task(task).agent), rollout_steps=4,
                                minibatches=2, epochs=2, actor_hidden=(16,),
                                critic_hidden=(16,))
    cfg = TrainConfig(task=task, num_envs=4, agent=agent, max_env_steps=10**7,
                      run_dir=str(tmp_path / "run"), torch_threads=1, update_threads=1)
    straight = or_skip_for_extra(lambda: build(cfg))
    m_straight = [_no_wall(straight.iterate()) for _ in range(4)]
    first, run_dir = _new_run(cfg)
    m_split = [_no_wall(first.iterate()) for _ in range(2)]
    save(first, run_dir)
    del first
    torch.manual_seed(999)  # a new process starts from another global RNG state
    second = resume_run(run_dir)
    m_split += [_no_wall(second.iterate()) for _ in range(2)]
    _assert_same(second.ac.state_dict(), straight.ac.state_dict(), "model")
    _assert_same(second.algo.optimizer.state_dict(), straight.algo.optimizer.state_dict(),
                 "optimizer")
    _assert_same(second.env.state_dict(), straight.env.state_dict(), "env")
    assert m_split == m_straight


def test_action_noise_comes_from_the_checkpointed_generator(tmp_path):
    """Not from torch's global generator, which a GPU checkpoint would not restore."""
    trainer, run_dir = _new_run(_cfg(tmp_path, num_envs=4))
    before, noise = torch.get_rng_state(), trainer.collector.noise_gen.get_state()
    # its own stream: not the env's (start states, commands) nor the minibatch shuffles'
    streams = [torch.Generator().manual_seed(trainer.env.seed).get_state(),
               trainer.gen.get_state()]
    assert not any(torch.equal(noise, s) for s in streams)
    trainer.collect()
    assert torch.equal(torch.get_rng_state(), before)  # the global stream is untouched
    assert not torch.equal(trainer.collector.noise_gen.get_state(), noise)
    save(trainer, run_dir)
    saved = load_checkpoint(run_dir / CHECKPOINT).state["ranks"][0]["noise_gen"]
    assert torch.equal(saved, trainer.collector.noise_gen.get_state())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_resume_is_bitwise_on_the_gpu(tmp_path, monkeypatch):
    """The learner on a GPU (cpu sim): the action noise comes from a checkpointed device
    generator. Needs torch's deterministic algorithms (scatter/index_add kernels use
    atomics) and CUBLAS_WORKSPACE_CONFIG=:4096:8 for deterministic cuBLAS."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    try:
        cfg = dataclasses.replace(_cfg(tmp_path), device="cuda")
        straight = build(cfg)
        for _ in range(4):
            straight.iterate()
        first, run_dir = _new_run(cfg)
        for _ in range(2):
            first.iterate()
        save(first, run_dir)
        del first
        second = resume_run(run_dir)
        for _ in range(2):
            second.iterate()
        _assert_same(second.ac.state_dict(), straight.ac.state_dict(), "model")
        _assert_same(second.algo.optimizer.state_dict(),
                     straight.algo.optimizer.state_dict(), "optimizer")
    finally:
        torch.use_deterministic_algorithms(False)


def test_checkpoint_holds_the_whole_training_state(tmp_path):
    cfg = _cfg(tmp_path)
    trainer, run_dir = _new_run(cfg)
    for _ in range(2):
        trainer.iterate()
    save(trainer, run_dir)
    ckpt = load_checkpoint(run_dir / CHECKPOINT)
    assert ckpt.learner == "ppo" and ckpt.config["num_envs"] == 32
    s = ckpt.state | ckpt.state["ranks"][0]
    for key in ("model", "algo", "env", "torch_rng", "gen", "nan_updates"):
        assert key in s, key
    assert set(s["algo"]) >= {"optimizer", "lr"}
    assert s["algo"]["optimizer"]["state"], "Adam moments missing"
    model = s["model"]
    for buf in ("actor.normalizer.mean", "actor.normalizer.var", "actor.normalizer.count",
                "critic.normalizer.mean", "critic.popart.mu", "critic.popart.nu",
                "critic.popart.count"):
        assert buf in model, buf
    assert model["critic.popart.count"].item() == 2.0
    assert model["actor.normalizer.count"].item() == 2 * 8 * 32
    assert set(s["env"]) >= {"sim", "task", "episode_step", "last_action", "gen", "running",
                             "obs"}
    assert ckpt.counters.iteration == 2 and ckpt.counters.env_steps == 2 * 8 * 32
    assert s["nan_updates"] == 0 and ckpt.counters.wall_s == 0.0


# ---------------------------------------------------------------------- checkpoint errors
def test_resume_from_missing_checkpoint(tmp_path):
    cfg = _cfg(tmp_path)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir()
    save_json(run_dir / "config.json", cfg)
    (run_dir / "metrics.csv").write_text("iteration\n1\n")
    before = _dir_contents(run_dir)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        resume_run(run_dir)
    assert _dir_contents(run_dir) == before


def test_resume_from_a_directory_that_is_not_a_run(tmp_path):
    with pytest.raises(CheckpointError, match="not a trot run directory"):
        resume_run(tmp_path / "nope")
    assert not (tmp_path / "nope").exists()


def test_a_learner_state_missing_a_part_is_refused(tmp_path):
    """Each part of the learner's state (ranks, the noise generator, the acting memory, the
    NaN streak, the actor snapshots, the pending rollout) missing is refused, named, before
    anything is loaded. The bug: loading such a file with defaults (a fresh noise stream or
    the global RNG's, no memory, the lag restarted from now), so a resume silently
    continues another run than the one saved."""
    cfg = dataclasses.replace(_cfg(tmp_path, num_envs=8),
                              mode=Sync(actor_lag=1, async_collect=True))
    tr = build(cfg)
    tr.iterate()
    state = tr.state_dict()
    fresh = build(cfg)
    before = fresh.ac.state_dict()["actor.mean.weight"].clone()
    for key in ("ranks", "consecutive_nan", "actor_snapshots"):
        with pytest.raises(CheckpointError, match=rf"state lacks '{key}'.*another version"):
            fresh.load_state_dict({k: v for k, v in state.items() if k != key})
    for key in ("noise_gen", "policy_state", "pending"):
        rank = {k: v for k, v in state["ranks"][0].items() if k != key}
        with pytest.raises(CheckpointError, match=rf"ranks\[0\] lacks '{key}'.*another version"):
            fresh.load_state_dict(dict(state, ranks=[rank]))
    assert torch.equal(fresh.ac.state_dict()["actor.mean.weight"], before)  # refused
    fresh.load_state_dict(state)  # before anything was loaded
    assert not torch.equal(fresh.ac.state_dict()["actor.mean.weight"], before)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_resume_from_corrupt_checkpoint(tmp_path, damage):
    cfg = _cfg(tmp_path)
    trainer, run_dir = _new_run(cfg)
    trainer.iterate()
    save(trainer, run_dir)
    ckpt = run_dir / CHECKPOINT
    if damage == "garbage":
        ckpt.write_bytes(b"\x00not a checkpoint\xff" * 37)
    else:
        ckpt.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])
    before = _dir_contents(run_dir)
    with pytest.raises(CheckpointError, match="corrupt or unreadable") as e:
        resume_run(run_dir)
    assert str(ckpt) in str(e.value)
    assert _dir_contents(run_dir) == before


# ---------------------------------------------------------------------- atomic writes
def test_save_leaves_no_temp_files_and_failed_write_keeps_previous(tmp_path):
    cfg = _cfg(tmp_path)
    trainer, run_dir = _new_run(cfg)
    trainer.iterate()
    save(trainer, run_dir)
    save(trainer, run_dir)  # overwrite an existing checkpoint
    assert sorted(os.listdir(run_dir)) == ["checkpoint.pt", "config.json"]
    good = (run_dir / CHECKPOINT).read_bytes()

    def partial(tmp: Path) -> None:
        tmp.write_bytes(good[:100])
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(run_dir / CHECKPOINT, partial)
    assert sorted(os.listdir(run_dir)) == ["checkpoint.pt", "config.json"]
    assert (run_dir / CHECKPOINT).read_bytes() == good

    def interrupted(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(run_dir / CHECKPOINT, interrupted)
    assert sorted(os.listdir(run_dir)) == ["checkpoint.pt", "config.json"]
    assert (run_dir / CHECKPOINT).read_bytes() == good
    assert load_checkpoint(run_dir / CHECKPOINT).counters.iteration == 1


def test_atomic_write_creates_new_file(tmp_path):
    target = tmp_path / "sub" / "f.bin"
    atomic_write(target, lambda p: p.write_bytes(b"abc"))
    assert target.read_bytes() == b"abc"
    assert os.listdir(target.parent) == ["f.bin"]
    # the mode of a file opened plainly (the umask's), not a private temporary file's 0600
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    assert target.stat().st_mode == plain.stat().st_mode


# ---------------------------------------------------------------------- NaN guard


@pytest.mark.parametrize("algo", [
    "a2c",  # one minibatch: the NaN first shows up at the guard
    "ppo",
])
def test_nan_update_is_undone_and_repeated_nan_diverges(tmp_path, algo):
    cfg = _cfg(tmp_path, algo=algo)
    trainer, run_dir = _new_run(cfg)
    for _ in range(2):
        trainer.iterate()
    save(trainer, run_dir)
    good_lr = trainer.algo.lr.item()

    before = copy.deepcopy(trainer.ac.state_dict())
    opt_before = copy.deepcopy(trainer.algo.optimizer.state_dict())
    trainer.algo.lr.fill_(float("nan"))  # the next Adam step writes NaN into every weight
    m = trainer.iterate()
    assert m["nan_updates"] == 1 and trainer.nan_updates == 1
    assert m["iteration"] == 3
    _assert_same(trainer.ac.state_dict(), before, "model")  # the update was undone
    _assert_same(trainer.algo.optimizer.state_dict()["state"], opt_before["state"], "adam")

    trainer.algo.lr.fill_(good_lr)  # a healthy update afterwards goes through
    m = trainer.iterate()
    assert m["nan_updates"] == 1
    assert _all_finite(trainer.ac.state_dict())
    assert any(not torch.equal(v, trainer.ac.state_dict()[k]) for k, v in before.items())

    last_good = copy.deepcopy(trainer.ac.state_dict())
    trainer.algo.lr.fill_(float("nan"))
    for i in range(MAX_CONSECUTIVE_NAN - 1):
        m = trainer.iterate()
        assert m["nan_updates"] == 2 + i
    mid = tmp_path / "mid"  # a checkpoint inside the streak (its rate still NaN)
    mid.mkdir()
    save_json(mid / "config.json", dataclasses.replace(cfg, run_dir=str(mid)))
    save(trainer, mid)
    with pytest.raises(TrainingDiverged, match=str(MAX_CONSECUTIVE_NAN)):
        trainer.iterate()
    _assert_same(trainer.ac.state_dict(), last_good, "model")  # still the last good weights
    # resumed inside the streak, it keeps the count: it stops at the same update as the
    # straight run, not MAX_CONSECUTIVE_NAN updates later
    with pytest.raises(TrainingDiverged, match=str(MAX_CONSECUTIVE_NAN)):
        resume_run(mid).iterate()

    s = load_checkpoint(run_dir / CHECKPOINT)
    assert s.counters.iteration == 2 and _all_finite(s.model) and _all_finite(s.state["algo"])
    resumed = resume_run(run_dir)
    assert resumed.iteration == 2
    assert math.isfinite(resumed.iterate()["loss/value"])


def test_nan_first_update_also_drops_the_optimizer_state_it_created(tmp_path):
    trainer, _ = _new_run(_cfg(tmp_path))
    before = copy.deepcopy(trainer.ac.state_dict())
    trainer.algo.lr.fill_(float("nan"))
    assert trainer.iterate()["nan_updates"] == 1
    _assert_same(trainer.ac.state_dict(), before, "model")
    assert not trainer.algo.optimizer.state  # Adam starts afresh, not from NaN moments
    trainer.algo.lr.fill_(1e-3)
    assert trainer.iterate()["nan_updates"] == 1 and _all_finite(trainer.ac.state_dict())


# ---------------------------------------------------------------------- learning
def test_ppo_learns_cartpole_balance(tmp_path):
    """~12 s here (2 cores). How fast is a benchmark's question (benchmarks/), not this
    test's: a wall-clock bound failed under a loaded machine while learning was fine."""
    cfg = dataclasses.replace(_cfg(tmp_path, num_envs=256), agent=dataclasses.replace(
        PPOConfig(), rollout_steps=16))
    trainer = build(cfg)
    returns = []
    for _ in range(40):
        m = trainer.iterate()
        if "episode_return" in m:
            returns.append(m["episode_return"])
    assert trainer.nan_updates == 0
    first = sum(returns[:3]) / 3
    last = sum(returns[-8:]) / 8
    assert last > 3 * first and last > 100, (first, last, returns)


def test_metrics_csv_gains_columns_that_appear_later(tmp_path):
    """Reward terms appear in the metrics once the first episode ends; the CSV keeps them."""
    from trot.agents.logger import RunLogger

    log = RunLogger(tmp_path, tensorboard=False, curve_every_s=1e9)
    base = {"iteration": 1, "env_steps": 100, "wall_s": 1.0, "steps_per_s": 100.0}
    log.log(base)
    log.log(base | {"iteration": 2, "episode_return": 5.0, "reward/lin_vel": 0.25})
    log.log(base | {"iteration": 3, "env_steps": 1_006_992})  # 7 digits: kept exactly
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["iteration"] for r in rows] == ["1", "2", "3"]
    assert rows[2]["env_steps"] == "1006992"
    assert [r["reward/lin_vel"] for r in rows] == ["", "0.25", ""]
    assert float(rows[1]["episode_return"]) == 5.0
    log.close()


def test_a_signal_as_the_run_finishes_keeps_its_last_checkpoint(tmp_path, monkeypatch):
    """Ctrl-C while the finished run closes its logs: the handlers were gone by then, so
    KeyboardInterrupt skipped the final save (the checkpoint stayed iterations behind the
    metrics)."""
    import signal

    from trot.agents.logger import RunLogger

    cfg = dataclasses.replace(_cfg(tmp_path), max_env_steps=3 * 32 * 8, checkpoint_every=100)
    trainer, run_dir = _new_run(cfg)
    close = RunLogger.close

    def interrupted(self):
        os.kill(os.getpid(), signal.SIGINT)
        close(self)

    monkeypatch.setattr(RunLogger, "close", interrupted)
    before = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN where the test
    try:  # runs in a background job of a shell without job control
        train(trainer, run_dir, quiet=True)
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C escaped the run's handlers: its final save was skipped")
    assert trainer.iteration == 3
    assert load_checkpoint(run_dir / CHECKPOINT).counters.iteration == 3
    assert signal.getsignal(signal.SIGINT) is before  # restored
