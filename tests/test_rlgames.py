"""The rl_games adapter (trot/rlgames.py): the vecenv contract rl_games relies on (torch
tensors on the env's device, dones, `time_outs` for bootstrapping), rl_games' PPO actually
learning cartpole-balance through it, and `trot eval` / `trot play` of its runs. CI
installs rl-games (.ci/run)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest
import torch
from extras import need

need("rl_games")

from rl_games.common import vecenv

from trot.adapters import parse_value
from trot.agents.config import PPOConfig
from trot.cli import main as cli_main
from trot.rlgames import (
    ENV_NAME,
    TrotVecEnv,
    apply_overrides,
    make_config,
    register,
    train,
)

TASK = "cartpole-balance"
DOC = Path(__file__).resolve().parents[1] / "docs" / "adapters.md"


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    """rl_games seeds torch's global RNG and sets its thread count; it may write into the
    cwd: keep all of it from leaking into other tests."""
    monkeypatch.chdir(tmp_path)
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)


def test_vecenv_hands_tensors_dones_and_time_outs():
    register()
    n = 16
    # 0.2 s episodes = 10 control steps: the time limit comes before the pole falls
    env = vecenv.create_vec_env(ENV_NAME, n, task=TASK, seed=3, stagger=False,
                                task_config={"episode_seconds": 0.2})
    assert isinstance(env, TrotVecEnv)
    info = env.get_env_info()
    assert info["observation_space"].shape == (env.env.obs_dim,)
    assert info["action_space"].shape == (1,) and "state_space" not in info
    obs = env.reset()
    assert isinstance(obs, torch.Tensor) and obs.shape == (n, env.env.obs_dim)
    assert obs.dtype == torch.float32 and obs.device == env.env.device
    for step in range(1, 11):
        obs, reward, dones, infos = env.step(torch.zeros(n, 1))
        assert isinstance(obs, torch.Tensor) and obs.device == env.env.device
        assert reward.shape == (n,) and dones.shape == (n,) and dones.dtype == torch.uint8
        time_outs, terminated = infos["time_outs"], infos["terminated"]
        assert torch.equal(dones.bool(), time_outs | terminated)
        assert not (time_outs & terminated).any()
        if step < 10:
            assert not time_outs.any()
    assert time_outs.any()  # step 10: every env still standing hits the time limit
    assert torch.equal(time_outs, ~terminated)


def test_asymmetric_task_gets_states_and_a_central_value_net():
    cfg = make_config("go1-flat", num_envs=8, max_epochs=1)
    assert cfg["params"]["config"]["central_value_config"]["network"]["central_value"]
    assert "central_value_config" not in make_config(TASK, num_envs=8)["params"]["config"]


def test_overrides_and_values():
    cfg = make_config(TASK, num_envs=64, max_epochs=5)
    before = copy.deepcopy(cfg)
    out = apply_overrides(cfg, {"config.learning_rate": parse_value("3e-4"),
                                "network.mlp.units": parse_value("[16, 16]")})
    assert out["params"]["config"]["learning_rate"] == 3e-4
    assert out["params"]["network"]["mlp"]["units"] == [16, 16]
    assert cfg == before  # the original is untouched
    with pytest.raises(ValueError, match="minibatches"):  # 3 x 16 steps into 5 minibatches
        make_config(TASK, num_envs=3, agent=PPOConfig(minibatches=5))
    # settings rl_games has no counterpart for are refused, not dropped in silence
    with pytest.raises(ValueError, match="no value_scale: use value_scale=1.0"):
        make_config(TASK, num_envs=64, agent=PPOConfig(popart=False, value_scale=10.0))
    with pytest.raises(ValueError, match="no kl_penalty"):
        make_config(TASK, num_envs=64, agent=PPOConfig(kl_penalty=1.0))


def test_rl_games_ppo_learns_cartpole_balance(tmp_path):
    rows = train(TASK, num_envs=128, max_epochs=30, seed=1, train_dir=str(tmp_path / "rg"))
    assert len(rows) >= 25
    first, last = rows[0]["mean_return"], rows[-1]["mean_return"]
    assert last > 100.0 and last > 3 * first, (first, last)
    assert rows[-1]["env_steps"] == 30 * 128 * 16
    assert list((tmp_path / "rg" / TASK / "nn").glob("*.pth"))  # rl_games' checkpoint


def test_cli_rl_games(tmp_path, capsys):
    rc = cli_main(["rl-games", TASK, "--num-envs", "32", "--max-epochs", "3",
                   "--train-dir", str(tmp_path / "cli"), "--set", "config.learning_rate=3e-4"])
    assert rc == 0
    assert capsys.readouterr().out.strip().endswith(str(tmp_path / "cli" / TASK))
    assert list((tmp_path / "cli" / TASK / "nn").glob("*.pth"))


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory) -> Path:
    """A small `trot rl-games` run of cartpole-balance through the CLI: 20 epochs of 64 envs
    x 16 steps, enough to balance a while; made in its own folder (rl_games may write into
    the cwd), torch's threads and RNG kept as they were."""
    base = tmp_path_factory.mktemp("rlgames")
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    try:
        with contextlib.chdir(base):
            assert cli_main(["rl-games", TASK, "--num-envs", "64", "--max-epochs", "20",
                             "--seed", "1", "--train-dir", str(base)]) == 0
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
    return base / TASK


def _eval_json(capsys, run: Path, episodes: int = 8) -> dict:
    capsys.readouterr()
    assert cli_main(["eval", str(run), "--episodes", str(episodes), "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # nothing else on stdout


def _rl_games_player(run: Path):
    """rl_games' own player (PpoPlayerContinuous) from the run's recorded params, restored
    by rl_games' own loader, acting deterministically on a batch: the reference."""
    from rl_games.algos_torch.players import PpoPlayerContinuous

    params = copy.deepcopy(json.loads((run / "rlgames.json").read_text())["params"])
    params["config"]["env_info"] = TrotVecEnv(ENV_NAME, 1, task=TASK).get_env_info()
    player = PpoPlayerContinuous(params)  # env_info given: it makes no env of its own
    (checkpoint,) = (run / "nn").glob("*.pth")
    player.restore(str(checkpoint))
    player.has_batch_dimension = True
    return lambda obs: player.get_action(obs, is_deterministic=True)


def test_eval_of_an_rl_games_run_is_rl_games_own_policy(rl_run, tmp_path, capsys):
    """`trot eval RUN --json` of a `trot rl-games` run: a trot run's keys, rl_games' frame
    count, and the return of rl_games' own player played here in the same seeded,
    noise-free envs. The bugs: the run refused (no checkpoint.pt; rl_games records no
    config, so `trot rl-games` must), the input normalizer left out, the sampled action
    instead of the mean, a library's print breaking --json."""
    from test_play import new_run

    import trot
    from trot.agents.evaluate import EVAL_SEED, run_episodes
    from trot.tasks.registry import get_task

    record = json.loads((rl_run / "rlgames.json").read_text())
    assert record["task"] == TASK and record["params"]["config"]["normalize_input"]
    got = _eval_json(capsys, rl_run)
    assert set(got) == set(_eval_json(capsys, new_run(TASK, tmp_path / "trot")))
    assert got["env_steps"] == 20 * 64 * 16 and got["episodes"] == 8
    env = trot.make_env(TASK, 8, seed=EVAL_SEED,
                        config=dataclasses.replace(get_task(TASK).config, obs_noise=False))
    want = run_episodes(env, _rl_games_player(rl_run), 8)
    assert got["mean_return"] == pytest.approx(want["mean_return"], rel=1e-5)
    assert got["mean_length"] == want["mean_length"]
    assert 40.0 < got["mean_return"] <= got["max_return"]  # it learned to balance a while


def test_play_of_an_rl_games_run_writes_a_gif(rl_run, tmp_path, capsys):
    """`trot play RUN --gif x.gif --seconds 0.2` of a `trot rl-games` run (where OpenGL
    loads, as test_play.py's tests): 0.2 s at 25 fps is the start frame and 5 more."""
    from test_play import assert_play_writes_gif

    assert_play_writes_gif(rl_run, tmp_path, capsys)


def test_adapters_md_eval_and_play_lines_run(capsys):
    """docs/adapters.md's rl_games block that trains, evaluates and plays, line by line
    through trot's CLI (in this test's folder; the play line where OpenGL loads). The bugs:
    a documented command that fails, eval reading another folder than the one trained."""
    from test_play import gl_problem

    section = DOC.read_text().split("## rl_games\n", 1)[1].split("\n## ", 1)[0]
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
                if "trot eval" in b]
    lines = [shlex.split(ln) for ln in block.splitlines() if ln.strip()]
    assert [argv[1] for argv in lines] == ["rl-games", "eval", "play"]
    for argv in lines:
        if argv[1] == "play" and gl_problem() is not None:
            continue  # no OpenGL here: test_play.py's tests skip too
        assert cli_main(argv[1:]) == 0, argv
        out = capsys.readouterr().out.strip().splitlines()
        if argv[1] == "eval":
            assert any(ln.split()[:2] == ["episodes", argv[-1]] for ln in out), out
        if argv[1] == "play":
            assert Path(argv[argv.index("--gif") + 1]).is_file(), out
