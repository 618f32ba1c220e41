"""K seeds trained in one process as one program (agents/seeds.py, `trot train --seeds`)."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest
import torch

from test_trainer import _isolate  # noqa: F401  (autouse: cwd, threads, RNG restored)
from trot.agents.config import PPOConfig
from trot.agents.learners import build
from trot.agents.runs import read_checkpoint
from trot.agents.seeds import StackedSeeds
from trot.agents.modes import Seeds, Sync
from trot.agents.train_config import TrainConfig
from trot.cli import main as cli_main
from trot.sim import make_sim
from trot.sim.rows import SimRows
from trot.tasks.registry import compile_model, get_task

# float32 updates: under bfloat16 the stacked and the plain matrix products round apart by
# bf16's 3 digits rather than float32's 7 (the stack itself would not change)
AGENT = dataclasses.replace(PPOConfig(), actor_hidden=(64, 64), critic_hidden=(64, 64),
                            rollout_steps=16, update_dtype="float32")


def _flat(tensors) -> torch.Tensor:
    return torch.cat([v.detach().double().flatten() for v in tensors])


def _params(trainer) -> torch.Tensor:
    return _flat(trainer.ac.parameters())


def _statistics(trainer) -> torch.Tensor:
    """The normalizers' and PopArt's means and variances (counts left out: they are the
    same in every run and would dominate the norm)."""
    return _flat(v for k, v in trainer.ac.named_buffers() if not k.endswith("count"))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / a.norm())


@pytest.mark.parametrize("task,n,iterations", [("cartpole-balance", 64, 3), ("go1-flat", 32, 1)])
def test_each_seed_of_a_stack_follows_its_own_one_seed_run(tmp_path, task, n, iterations):
    """Seeds 0, 3 and 5 trained together against three separate runs: 3 iterations of
    cartpole, 1 of go1-flat (its contacts branch a trajectory on such differences: one env
    of 32 did at the 3rd iteration, and the runs then part by 3e-3), whose envs draw
    commands, pushes and start states.
    Not bitwise: vmap's batched matrix products round differently from the plain ones
    (1e-7 in a width-1 value head; 1e-8 in cartpole's first actions), and the envs, Adam
    and the KL-adaptive rate's threshold decisions carry that along: measured, the
    parameters differ by up to 2.2e-6 of their norm after 3 cartpole iterations and by
    1.1e-5 after one go1-flat update from an identical rollout; the normalizers' and
    PopArt's statistics by 8e-7. Bound: 1e-4, while another seed's are 1.4 away. Catches: seeds sharing a generator, one seed's
    gradient, statistics or envs reaching another's, a seed trained on the wrong block of
    envs or initialised from the wrong seed."""
    cfg = TrainConfig(task=task, num_envs=n, mode=Seeds((0, 3, 5)), agent=AGENT, export=False)
    stack = StackedSeeds(cfg, tmp_path)
    for _ in range(iterations):
        stack.iterate()
    separate = []
    for seed in cfg.mode.seeds:
        one = build(dataclasses.replace(cfg, seed=seed, mode=Sync()))
        for _ in range(iterations):
            m = one.iterate()
        separate.append((one, m))
    for k, (one, m) in enumerate(separate):
        mine = stack.trainers[k]
        assert _rel(_params(one), _params(mine)) < 1e-4
        assert _rel(_statistics(one), _statistics(mine)) < 1e-4
        assert float(one.algo.lr) == pytest.approx(float(mine.algo.lr), rel=1e-4)
        assert mine.env_steps == one.env_steps == iterations * n * AGENT.rollout_steps
        ro, own = one.rollout, mine.rollout  # the last rollout
        torch.testing.assert_close(own.obs, ro.obs, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(own.rewards, ro.rewards, rtol=1e-4, atol=1e-5)
        if "episode_return" in m:  # go1-flat's first 16 steps end no episode
            assert stack.last[k]["episode_return"] == pytest.approx(m["episode_return"],
                                                                    rel=1e-5)
        other = separate[(k + 1) % 3][0]
        assert _rel(_params(other), _params(mine)) > 0.1


def test_a_nan_update_is_undone_for_its_seed_alone(tmp_path):
    """Seed 1's advantages made NaN: its update is undone (its parameters as before the
    iteration, one NaN update counted) while seed 0 learns as its separate run.
    Catches a NaN leaking through the stacked backward or the rollback of every seed."""
    cfg = TrainConfig(task="cartpole-balance", num_envs=64, mode=Seeds((0, 1)), agent=AGENT,
                      export=False)
    stack = StackedSeeds(cfg, tmp_path)
    stack.iterate()
    before = {k: v.clone() for k, v in stack.trainers[1].ac.state_dict().items()}
    bad = stack.trainers[1].algo
    prepare = bad.prepare

    def poisoned(ro, next_values=None):
        batch = prepare(ro, next_values)
        batch.advantages.fill_(float("nan"))
        return batch

    bad.prepare = poisoned
    summary = stack.iterate()
    assert summary["nan_updates"] == 1
    assert [tr.nan_updates for tr in stack.trainers] == [0, 1]
    after = stack.trainers[1].ac.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    one = build(dataclasses.replace(cfg, seed=0, mode=Sync()))
    one.iterate()
    one.iterate()
    assert _rel(_params(one), _params(stack.trainers[0])) < 1e-4  # as in the test above


def check_block_rows(make, close, rounds: int = 1, n: int = 8) -> None:
    """Resets, pushes and per-env parameters through rows [N, 2N) of a sim of 3N envs
    (make(num_envs) builds one), then a parent step, `rounds` times: the block's rows
    match a sim of N envs given the same calls, and the other rows match a sim given none
    (close(actual, expected) asserts the match)."""
    parent, alone, untouched = make(3 * n), make(n), make(n)
    model, dev = parent.model, parent.device
    block = SimRows(parent, n, 2 * n)
    gen = torch.Generator().manual_seed(0)
    for _ in range(rounds):
        mask = torch.rand(n, generator=gen) < 0.5
        qpos = 0.3 * torch.rand(n, model.nq, generator=gen)
        qvel = 0.3 * torch.rand(n, model.nv, generator=gen)
        mass = alone.params("body_mass").cpu() * (1 + torch.rand(n, model.nbody, generator=gen))
        push = 0.3 * torch.rand(n, model.nv, generator=gen)
        ctrl = torch.rand(3 * n, model.nu, generator=gen).to(dev)
        for sim in (block, alone):
            sim.reset(mask.to(dev), qpos.to(dev), qvel.to(dev))
            sim.set_params("body_mass", ~mask.to(dev), mass.to(dev))
            sim.kick(~mask.to(dev), push.to(dev))
        parent.step(ctrl)
        alone.step(ctrl[n:2 * n])
        untouched.step(ctrl[:n])
        close(block.qpos, alone.qpos)
        close(block.qvel, alone.qvel)
        close(block.params("body_mass"), alone.params("body_mass"))
        close(parent.qpos[:n], untouched.qpos)
        close(parent.params("body_mass")[2 * n:], untouched.params("body_mass"))


def test_a_block_of_rows_acts_on_its_rows_alone():
    """check_block_rows on the cpu backend, bitwise. Catches an offset or a mask that
    reaches another block's rows."""
    task = get_task("cartpole-balance")
    model = compile_model(task.task_cls(task.config))
    check_block_rows(lambda n: make_sim("cpu", model, n, 2, "cpu"),
                     lambda a, b: torch.testing.assert_close(a, b, rtol=0, atol=0), rounds=2)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_seeds_from_the_cli_resume_together_and_each_loads_as_a_run(tmp_path, capsys):
    """`trot train --seeds` interrupted and resumed equals the straight run bit for bit,
    the logs continue without a repeated iteration, each seed's directory is a run that
    eval, export and sim2sim load, and `trot compare` draws the seeds as one curve. Bad combinations are refused by name."""
    base = ["train", "cartpole-balance", "--seeds", "0", "1", "--num-envs", "64",
            "--agent.rollout-steps", "16", "--no-export", "--checkpoint-every", "2"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert cli_main(base + ["--max-env-steps", str(8 * 1024), "--run-dir", str(straight)]) == 0
    assert cli_main(base + ["--max-env-steps", str(4 * 1024), "--run-dir", str(split)]) == 0
    assert cli_main(["train", "--resume", str(split), "--max-env-steps", str(8 * 1024)]) == 0
    out = capsys.readouterr().out
    assert "x 2 seeds" in out and "return median" in out
    for s in ("seed_0", "seed_1"):
        a, b = read_checkpoint(straight / s).model, read_checkpoint(split / s).model
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert [r["iteration"] for r in _rows(split / s / "metrics.csv")] == \
            [str(i) for i in range(1, 9)]
    summary = _rows(split / "seeds.csv")
    assert [r["iteration"] for r in summary] == [str(i) for i in range(1, 9)]
    assert float(summary[-1]["episode_return/min"]) <= float(summary[-1]["episode_return/median"]) \
        <= float(summary[-1]["episode_return/max"])
    seed1 = split / "seed_1"
    assert cli_main(["eval", str(seed1), "--episodes", "4"]) == 0
    assert cli_main(["export", str(seed1)]) == 0
    assert cli_main(["sim2sim", str(seed1), "--episodes", "4"]) == 0
    assert cli_main(["compare", str(split), "--out", str(tmp_path / "c.png")]) == 0
    band = _rows(tmp_path / "c.csv")  # one curve: both seeds' median and band
    assert band and {r["curve"] for r in band} == {str(split)}
    capsys.readouterr()
    assert cli_main(["eval", str(split)]) == 2
    assert "give one seed's directory" in capsys.readouterr().err
    assert cli_main(base[:2] + ["--seed", "1", "--seeds", "0", "1"]) == 2
    assert "not both" in capsys.readouterr().err
    assert cli_main(base[:4] + ["--agent.symmetry", "augment"]) == 2
    assert "agent.symmetry" in capsys.readouterr().err
    assert cli_main(base + ["--nproc", "2"]) == 2
    assert "--nproc is a setting of" in capsys.readouterr().err


def test_each_seed_of_seeds_3_5_checkpoints_as_it_would_alone(tmp_path):
    """`trot train --seeds 3 5` and `trot train --seed 3`, `--seed 5`, 6 iterations each on
    the cpu backend: each seed's checkpoint (network with its normalizers and PopArt, Adam's
    moments, the learning rate, the counters) equals its run alone, to 1e-4 of the norm.
    Not bitwise: vmap's batched matrix products round differently from the plain ones
    (test_each_seed_of_a_stack_follows_its_own_one_seed_run measures it). Catches a stacked
    iteration that drifts from the one-seed one (a second copy of collect or update that
    diverged), and a seed's view written from another seed's state."""
    base = ["train", "cartpole-balance", "--num-envs", "64", "--agent.rollout-steps", "16",
            "--agent.update-dtype", "float32", "--no-export", "--max-env-steps",
            str(6 * 64 * 16)]
    assert cli_main(base + ["--seeds", "3", "5", "--run-dir", str(tmp_path / "stack")]) == 0
    for seed in (3, 5):
        alone = tmp_path / f"alone_{seed}"
        assert cli_main(base + ["--seed", str(seed), "--run-dir", str(alone)]) == 0
        mine, own = read_checkpoint(tmp_path / "stack" / f"seed_{seed}"), read_checkpoint(alone)
        assert mine.learner == own.learner == "ppo"
        assert (mine.counters.iteration, mine.counters.env_steps) == \
            (own.counters.iteration, own.counters.env_steps) == (6, 6 * 64 * 16)
        assert _rel(_flat(own.model.values()), _flat(mine.model.values())) < 1e-4
        adam = lambda c: _flat(t for s in c.state["algo"]["optimizer"]["state"].values()  # noqa: E731
                               for t in s.values())
        assert _rel(adam(own), adam(mine)) < 1e-4
        assert float(mine.state["algo"]["lr"]) == pytest.approx(float(own.state["algo"]["lr"]),
                                                                rel=1e-4)
        weights = lambda c: _flat(v for k, v in c.model.items()  # noqa: E731
                                  if "normalizer" not in k and "popart" not in k)
        other = read_checkpoint(tmp_path / "stack" / f"seed_{8 - seed}")
        assert _rel(weights(own), weights(other)) > 0.1


def test_seeds_throughput_benchmark_reports_the_median_of_its_rounds():
    """benchmarks/seeds_throughput.py (docs/benchmarks.md names its command) at toy sizes:
    it runs both arms and its summary is the median and range of the rounds it printed.
    Catches the script drifting from the Seeds/Trainer API, or a summary that is not
    computed from its own rounds (a ratio inverted, a round left out)."""
    import re
    import statistics
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "seeds_throughput.py"),
                           "--iterations", "1", "--warmup", "1", "--rounds", "3", "--",
                           "cartpole-balance", "--seeds", "0", "1", "--num-envs", "8"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rounds = re.findall(r"stacked ([\d,]+) env-steps/s, one after another ([\d,]+) "
                        r"env-steps/s, ratio ([\d.]+)", done.stdout)
    assert len(rounds) == 3
    for stack, alone, ratio in rounds:  # the ratio is of the two rates it printed
        rate = lambda s: float(s.replace(",", ""))  # noqa: E731
        assert float(ratio) == pytest.approx(rate(stack) / rate(alone), rel=1e-2)
    ratios = [float(r) for _, _, r in rounds]
    summary = re.search(r"median of 3 rounds: ([\d.]+) \(range ([\d.]+)-([\d.]+)\)",
                        done.stdout)
    assert summary is not None, done.stdout
    assert [float(x) for x in summary.groups()] == pytest.approx(
        [statistics.median(ratios), min(ratios), max(ratios)], abs=1.5e-3)
