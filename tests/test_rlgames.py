"""The rl_games adapter (trot/rlgames.py): the vecenv contract rl_games relies on (torch
tensors on the env's device, dones, `time_outs` for bootstrapping), and rl_games' PPO
actually learning cartpole-balance through it. CI installs rl-games (.ci/run)."""

from __future__ import annotations

import copy

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
