"""The `trot` command line: listing, argument errors that stop before any env is built, a
tiny train -> eval -> resume round trip, and a clean stop on SIGTERM."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import torch

import trot.agents.learners as trainer_mod
from trot.agents.checkpoint import load_checkpoint
from trot.cli import main
from trot.agents.runs import CHECKPOINT

TASK = "cartpole-balance"
CKPT = CHECKPOINT


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo may write MUJOCO_LOG.TXT into the cwd
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _run(argv: list[str]) -> int:
    """main() in-process; tyro reports argument errors with SystemExit."""
    try:
        return main(argv)
    except SystemExit as e:
        return 0 if e.code is None else (e.code if isinstance(e.code, int) else 1)


def _rows(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_list_prints_both_cartpole_tasks(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "cartpole-balance" in out and "cartpole-swingup" in out
    assert main(["list", "--help"]) == 0 and "usage: trot list" in capsys.readouterr().out
    assert main(["list", "--bogus"]) == 2  # it listed the tasks, ignoring the flag
    assert "trot list takes no arguments, got --bogus" in capsys.readouterr().err


def test_unknown_command_and_task_fail_clearly(capsys):
    assert main(["tarin"]) != 0
    assert "unknown command 'tarin'" in capsys.readouterr().err
    assert main(["train", "cartpole-nope"]) != 0
    err = capsys.readouterr().err
    assert "unknown task 'cartpole-nope'" in err and TASK in err


@pytest.mark.parametrize("args,message", [
    (["--bogus-field", "1"], "bogus-field"),
    (["--agent.learning-rate", "-1"], "learning_rate must be > 0"),
    (["--num-envs", "64", "--agent.rollout-steps", "8", "--agent.minibatches", "7"],
     "512 does not divide into 7 minibatches"),
    (["--algo", "foo"], "foo"),
    (["--update-threads", "-2"], "update_threads must be >= 0"),
])
def test_bad_train_arguments_fail_before_any_env_is_built(tmp_path, monkeypatch, capsys,
                                                          args, message):
    def no_env(*a, **k):
        raise AssertionError("an env was built for an invalid configuration")

    monkeypatch.setattr(trainer_mod, "make_task_envs", no_env)
    run_dir = tmp_path / "x"
    rc = _run(["train", TASK, "--run-dir", str(run_dir), *args])
    assert rc != 0
    captured = capsys.readouterr()
    assert message in captured.out + captured.err
    assert not run_dir.exists()
    assert not Path("runs").exists()


def test_train_eval_resume_round_trip(tmp_path, capsys):
    d = tmp_path / "run"
    rc = main(["train", TASK, "--num-envs", "32", "--max-env-steps", "2000", "--run-dir",
               str(d), "--agent.rollout-steps", "8", "--no-export"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.strip().splitlines()[-1] == str(d)
    for name in ("config.json", "metrics.csv", CKPT, "curve.png"):
        assert (d / name).is_file(), name
    assert (d / "tb").is_dir() and any((d / "tb").iterdir())
    assert not (d / "policy.onnx").exists()  # --no-export
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["num_envs"] == 32 and cfg["agent"]["rollout_steps"] == 8
    rows = _rows(d / "metrics.csv")
    assert len(rows) == 8  # ceil(2000 / (32 * 8)) iterations
    assert int(float(rows[-1]["env_steps"])) == 2048

    assert main(["eval", str(d), "--episodes", "4", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    res = json.loads(lines[0])
    for k in ("mean_return", "std_return", "episodes", "mean_length", "env_steps",
              "max_return"):
        assert k in res, k
    assert res["episodes"] == 4 and res["env_steps"] == 2048
    assert res["max_return"] == 500.0
    assert 0 < res["mean_return"] <= 500.0
    assert main(["eval", str(d), "--episodes", "4"]) == 0  # the table: counts whole
    table = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert table["env_steps"] == "2048" and table["episodes"] == "4"

    assert main(["train", "--resume", str(d), "--max-env-steps", "4000"]) == 0
    out = capsys.readouterr().out
    assert "resuming" in out and "iteration 8" in out
    rows = _rows(d / "metrics.csv")
    assert len(rows) == 16
    assert [int(float(r["iteration"])) for r in rows] == list(range(1, 17))
    assert load_checkpoint(d / CKPT).counters.env_steps == 4096
    # the raised budget is the run's now: a plain resume keeps it, and one already spent
    # is refused (it would stop at once)
    assert json.loads((d / "config.json").read_text())["max_env_steps"] == 4000
    assert main(["train", "--resume", str(d), "--max-env-steps", "3000"]) != 0
    err = capsys.readouterr().err
    assert "trot: error: --max-env-steps 3000 is not above the 4096 env steps" in err
    # a new run in this directory would mix its TensorBoard events with this one's
    assert main(["train", TASK, "--run-dir", str(d), "--max-env-steps", "100"]) != 0
    err = capsys.readouterr().err
    assert f"trot: error: {d} already holds a run: continue it with `trot train --resume" in err
    assert load_checkpoint(d / CKPT).counters.env_steps == 4096  # untouched


def test_eval_missing_run_dir_fails_clearly(tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    assert main(["eval", str(missing), "--json"]) != 0
    captured = capsys.readouterr()
    assert "trot: error:" in captured.err and str(missing) in captured.err
    assert captured.out == ""
    assert not missing.exists()


def test_resume_missing_run_dir_fails_clearly(tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    assert main(["train", "--resume", str(missing)]) != 0
    err = capsys.readouterr().err
    assert "not a trot run directory" in err and str(missing) in err
    assert not missing.exists()


@pytest.mark.parametrize("flag, value, message", [
    ("--env.episode-seconds", ["-1"], "env.episode_seconds must be > 0"),
    ("--env.standing-fraction", ["1.5"], "env.standing_fraction must be in [0, 1]"),
    ("--env.lin-vel-x", ["1", "-1"], "env.lin_vel_x must be a range (low, high) with low <= "),
    ("--env.push-interval-seconds", ["0", "3"], "env.push_interval_seconds must be > 0"),
    ("--env.substeps", ["0"], "env.substeps must be an integer >= 1"),
])
def test_bad_task_config_is_refused_before_training(tmp_path, capsys, flag, value, message):
    """Task configs are checked as agent configs are (before: one-step episodes trained)."""
    d = tmp_path / "run"
    assert _run(["train", "go1-flat", flag, *value, "--run-dir", str(d)]) == 2
    assert message in capsys.readouterr().err
    assert not d.exists()


def test_train_says_when_the_export_extra_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime fails
    d = tmp_path / "run"
    assert _run(["train", TASK, "--num-envs", "8", "--max-env-steps", "64", "--run-dir",
                 str(d), "--agent.rollout-steps", "8"]) == 0
    err = capsys.readouterr().err
    assert "not exported" in err and "onnxruntime" in err
    assert "pip install 'trot[export]'" in err and f"trot export {d}" in err
    assert (d / CKPT).is_file() and not (d / "policy.onnx").exists()


def test_a_config_json_trot_cannot_read_is_named(tmp_path, capsys):
    """A run's config.json with a field this trot does not know (from a newer trot, or
    edited), without its task, or not JSON: every command that reads it says so, naming
    the file (it raised a TypeError or a bare KeyError traceback)."""
    d = tmp_path / "run"
    assert _run(["train", TASK, "--num-envs", "8", "--max-env-steps", "64", "--run-dir",
                 str(d), "--agent.rollout-steps", "8", "--no-export"]) == 0
    good = json.loads((d / "config.json").read_text())
    bad = {"an unknown field": good | {"future_field": 1},
           "an unknown agent field": good | {"agent": good["agent"] | {"future": 2}},
           "no task": {k: v for k, v in good.items() if k != "task"},
           "not JSON": "{",
           "a list": []}
    for what, content in bad.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (d / "config.json").write_text(text)
        capsys.readouterr()
        for cmd in (["eval", str(d), "--episodes", "2"], ["train", "--resume", str(d)]):
            assert _run(cmd) == 2, (what, cmd)
            err = capsys.readouterr().err
            assert err.startswith("trot: error:") and "config.json" in err, (what, cmd, err)
            assert "Traceback" not in err


@pytest.mark.parametrize("cmd, arg, flag", [("eval", "RUN_DIR", "--episodes"),
                                            ("export", "RUN_DIR", "--out"),
                                            ("sim2sim", "RUN_DIR", "--trajectory"),
                                            ("play", "RUN_DIR", "--camera"),
                                            ("sim-bench", "TASK", "--steps")])
def test_subcommand_help_and_usage_list_every_flag(cmd, arg, flag, capsys):
    """`trot CMD --help` is help (it was a usage error, exit 2), and a missing argument's
    usage names every flag (it left most out)."""
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    assert f"usage: trot {cmd} {arg}" in capsys.readouterr().out
    assert main([cmd]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trot: error: usage: trot {cmd} {arg} ") and flag in err
