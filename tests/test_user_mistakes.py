"""When the user's own code is wrong, trot says where (issue 73): each mistake below is made
in a task file of the user's own, written here (not a registered task), and the message
must name the piece that made it. Before, each was blamed on something else or passed in
silence: a NaN observation scale as bad actions; NaN start states as every env
"unstable" with exit 0; a reward term that is NaN in some envs read as 0.0; a float where
a tuple goes, as "object of type 'float' has no len()"."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from trot.agents.logger import progress_line
from trot.agents.runs import read_checkpoint, run_config
from trot.cli import main as cli_main
from trot.tasks import registry, sources
from trot.tasks.observation import ObsTerm

HEAD = '''
import torch
from dataclasses import replace
from trot.tasks import register
from trot.tasks.cartpole import Cartpole, CartpoleConfig, BALANCE
from trot.tasks.observation import ObsTerm
'''
# each user's task: a cartpole with one mistake of its own (the name: what it gets wrong)
TASKS = {
    "nan-scale": '''
class NanScale(Cartpole):
    def policy_terms(self):
        return (ObsTerm("cart_pos", "qpos", start=0, stop=1, scale=float("nan")),
                *super().policy_terms()[1:])
register("nan-scale", NanScale, BALANCE, "a NaN scale")
''',
    "float-offset": '''
class FloatOffset(Cartpole):
    def policy_terms(self):
        return (ObsTerm("cart_pos", "qpos", start=0, stop=1, offset=0.1),
                *super().policy_terms()[1:])
register("float-offset", FloatOffset, BALANCE, "a float where a tuple goes")
''',
    "nan-start": '''
class NanStart(Cartpole):
    def initial_state(self, sim, gen):
        qpos, qvel = super().initial_state(sim, gen)
        qpos[3] = float("nan")  # env 3 starts nowhere
        return qpos, qvel
register("nan-start", NanStart, BALANCE, "NaN in a start state")
''',
    "nan-reward": '''
class NanReward(Cartpole):
    steps = 0

    def reward(self, sim, action):
        total, terms = super().reward(sim, action)
        NanReward.steps += 1
        late = NanReward.steps > 64 * 16 * 3 // sim.num_envs  # from the 4th iteration on
        right = sim.qpos[:, 0] > 0.0  # the cart right of centre
        closeness = torch.where(right & late, float("nan"), 1.0 - sim.qpos[:, 0].abs())
        return total, terms | {"closeness": closeness}
register("nan-reward", NanReward, BALANCE, "a reward term NaN in some envs")
''',
    "nan-command": '''
class NanCommand(Cartpole):
    command_dim = 1  # a target cart position, observed

    def bind(self, sim):
        super().bind(sim)
        self.command = torch.zeros(sim.num_envs, 1, device=sim.device)
        self.steps = 0

    def policy_terms(self):
        return (*super().policy_terms(), ObsTerm("target", "command"))

    def pre_step(self, sim, gen):
        super().pre_step(sim, gen)
        self.steps += 1
        spread = torch.ones(sim.num_envs, device=sim.device)
        spread[5] = 0.0 if self.steps > 20 else 1.0  # from step 21 on, env 5's is 0
        self.command[:, 0] = 0.1 / spread  # the user's division by zero: Inf in env 5
register("nan-command", NanCommand, BALANCE, "a command Inf in one env")
''',
}
SMALL = ["--num-envs", "64", "--agent.rollout-steps", "16", "--no-export"]


@pytest.fixture
def user_tasks(tmp_path, monkeypatch) -> Path:
    """The user's file (every task above), in a registry copy restored afterwards."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(sources, "_loaded", {})
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "my_tasks.py"
    path.write_text(textwrap.dedent(HEAD) + "".join(TASKS.values()))
    return path


def _train(capsys, path: Path, task: str, *flags: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = cli_main(["train", task, "--tasks", str(path), *SMALL, *flags])
    return rc, capsys.readouterr().err


def test_a_nan_scale_and_a_float_offset_are_named_where_declared(user_tasks, capsys):
    """Checked when the term is declared: the term, the field, what was given and the
    form accepted."""
    rc, err = _train(capsys, user_tasks, "nan-scale", "--max-env-steps", "1024")
    assert rc == 2 and "observation term 'cart_pos': scale must be a finite number, got " \
                       "nan" in err
    rc, err = _train(capsys, user_tasks, "float-offset", "--max-env-steps", "1024")
    assert rc == 2 and "observation term 'cart_pos': offset must be a tuple of numbers, " \
                       "e.g. (0.1, 0.2)" in err and "got 0.1" in err
    for bad, said in ((dict(clip=(1.0, -1.0)), "clip (1.0, -1.0) has low > high"),
                      (dict(noise=-0.1), "noise must be a finite number >= 0"),
                      (dict(scale=True), "scale must be a finite number, got True")):
        with pytest.raises(ValueError, match=rf"observation term 'x': {said}".replace(
                "(", r"\(").replace(")", r"\)")):
            ObsTerm("x", "data" if "clip" in bad else "qpos", stop=1,
                    field="xpos" if "clip" in bad else "", **bad)


def test_an_observation_term_made_non_finite_by_the_tasks_code_is_named(user_tasks,
                                                                        capsys):
    """A command the task's code computes (a division by zero, Inf in env 5 from step 21)
    reaches the policy through an observation term: the run stops naming that term, the
    env and the step (before: blamed on the actions, naming no term)."""
    rc, err = _train(capsys, user_tasks, "nan-command", "--max-env-steps", str(4 * 64 * 16))
    assert rc == 2, err
    assert "task 'nan-command': policy observation term 'target' gave NaN or Inf in envs " \
           "[5] (1 of 64) at env step 20 (iteration 2)" in err, err
    assert "action" not in err.split("task 'nan-command'")[1].split(".")[0]


def test_nan_in_a_start_state_is_named_not_counted_as_unstable(user_tasks, capsys):
    """The physics diverges from a NaN start as it does from a blow-up; the start states
    are checked where `initial_state` returns them, so the message names it."""
    rc, err = _train(capsys, user_tasks, "nan-start", "--max-env-steps", "4096")
    assert rc == 2, err
    assert "task 'nan-start': Task.initial_state (its qpos or qvel) gave NaN or Inf in " \
           "envs [3]" in err and "at env step 0" in err
    assert "Traceback" not in err


def test_a_nan_reward_term_stops_the_run_naming_it_and_the_checkpoint_stays(user_tasks,
                                                                            capsys):
    """The term NaN in the envs with the cart right of centre, from the 4th iteration: the
    run stops there naming the term, some of those envs and the step, with no host sync
    per step (the flag joins the iteration's one); the checkpoint of the 3rd iteration is
    the last, and loads."""
    run = user_tasks.parent / "run"
    rc, err = _train(capsys, user_tasks, "nan-reward", "--max-env-steps", str(10 * 64 * 16),
                     "--checkpoint-every", "1", "--run-dir", str(run))
    assert rc == 2, err
    assert "task 'nan-reward': reward term 'closeness' gave NaN or Inf in envs [" in err
    assert "at env step 48 (iteration 4)" in err and "where the physics was finite" in err
    assert read_checkpoint(run).counters.iteration == 3


def test_resume_takes_the_task_name_the_flags_of_a_continued_run_and_budgets_as_totals(
        user_tasks, capsys, tmp_path):
    """`trot train TASK --resume RUN` where TASK is the run's (another is refused with the
    spelling that works); --no-export and eval settings on a resume, kept in config.json;
    a budget below what the run has done names itself the run's total; the last progress
    line's ETA is never negative."""
    run = tmp_path / "run"
    assert cli_main(["train", "cartpole-balance", *SMALL[:-1], "--max-env-steps", "2048",
                     "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert cli_main(["train", "cartpole-balance", "--resume", str(run), "--no-export",
                     "--eval-every", "1", "--eval-episodes", "2", "--max-env-steps",
                     "4096"]) == 0
    out = capsys.readouterr().out
    assert "resuming" in out and "ETA -" not in out and "exported" not in out
    cfg = run_config(run)
    assert (cfg.export, cfg.eval_every, cfg.max_env_steps) == (False, 1, 4096)
    assert (run / "eval.csv").is_file()
    assert cli_main(["train", "go1-flat", "--resume", str(run)]) == 2
    assert f"is a run of cartpole-balance, not go1-flat: continue it with `trot train " \
           f"--resume {run}`" in capsys.readouterr().err
    assert cli_main(["train", "--resume", str(run), "--max-env-steps", "100"]) == 2
    assert "it is the run's total, not an increment (for N more, give 4096 + N)" in \
        capsys.readouterr().err
    late = progress_line({"iteration": 9, "env_steps": 4200, "steps_per_s": 100.0,
                          "wall_s": 70.0}, 4096, 60.0)
    assert late.endswith("ETA 0m00s"), late
