"""The rsl_rl adapter (trot/rslrl.py): its VecEnv against trot's own env stepped alongside
(rewards, dones, time_outs, observation groups, episode statistics), its config against the
task's registered agent, rsl_rl's PPO learning cartpole-balance through it, and the
commands docs/adapters.md shows. CI installs rsl-rl-lib (.ci/run, the test extra)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from pathlib import Path

import pytest
import torch
from extras import need

need("rsl_rl")

from rsl_rl.algorithms import PPO
from rsl_rl.env import VecEnv

import trot
from trot.agents.config import PPOConfig, tuned
from trot.cli import main as cli_main
from trot.rslrl import TrotVecEnv, make_config, unmapped
from trot.rslrl import main as rslrl_main
from trot.tasks import registry, sources
from trot.tasks.registry import get_task

TASK = "cartpole-balance"
DOC = Path(__file__).resolve().parents[1] / "docs" / "adapters.md"


@pytest.fixture(autouse=True)
def _isolate(tmp_path, monkeypatch):
    """train() seeds torch's global RNG and sets its thread count, and rsl_rl writes into
    the run directory: keep all of it from leaking into other tests."""
    monkeypatch.chdir(tmp_path)
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    yield
    torch.set_num_threads(threads)
    torch.set_rng_state(rng)


def _twins(n: int, seed: int, log_every: int = 24, **task_config):
    """The adapter, and an independent trot Env of the same task, seed and config."""
    vec = TrotVecEnv(TASK, n, seed=seed, stagger=False, task_config=task_config,
                     log_every=log_every)
    cfg = dataclasses.replace(get_task(TASK).config, **task_config)
    ref = trot.make_env(TASK, n, seed=seed, config=cfg)
    ref.reset()
    return vec, ref


def test_step_matches_trots_env_and_hands_its_own_tensors():
    """Stepped alongside trot's env with the same actions, every step agrees: observation
    groups, rewards, dones = terminated | truncated, time_outs = truncated. The bugs:
    time_outs taken from the time limit alone (a pole that falls on the last step would
    be bootstrapped), dones missing truncations (rsl_rl's returns would run across the
    reset), the groups taken from final_obs or swapped, and a copy or device move of what
    the env returns (each one a copy per step, a host sync on a GPU)."""
    n = 32
    # 0.4 s episodes = 20 steps; actions beyond [-1, 1] so that some poles fall first
    vec, ref = _twins(n, seed=5, episode_seconds=0.4)
    assert isinstance(vec, VecEnv) and vec.max_episode_length == 20 and vec.num_actions == 1
    assert vec.episode_length_buf is vec.env.episode_step
    obs = vec.get_observations()
    assert torch.equal(obs["policy"], ref.obs.policy)
    results = []
    step = vec.env.step
    vec.env.step = lambda a: results.append(step(a)) or results[-1]  # what the env returned
    gen = torch.Generator().manual_seed(0)
    seen_term = seen_trunc = 0
    for _ in range(50):
        actions = 3.0 * torch.rand(n, 1, generator=gen) - 1.5
        obs, reward, dones, extras = vec.step(actions)
        r = ref.step(actions)
        assert torch.equal(obs["policy"], r.obs.policy) and torch.equal(obs["critic"],
                                                                         r.obs.critic)
        assert torch.equal(reward, r.reward)
        assert torch.equal(extras["time_outs"], r.truncated)
        assert torch.equal(dones, r.terminated | r.truncated) and dones.dtype == torch.bool
        mine = results[-1]
        assert obs["policy"] is mine.obs.policy and obs["critic"] is mine.obs.critic
        assert reward is mine.reward and extras["time_outs"] is mine.truncated
        seen_term += int(r.terminated.sum())
        seen_trunc += int(r.truncated.sum())
    assert seen_term > 0 and seen_trunc > 0, (seen_term, seen_trunc)  # both paths ran


def test_reset_and_step_after_an_inference_mode_rollout():
    """rsl_rl steps the env under torch.inference_mode, which turns the env's state into
    inference tensors; an evaluation after `learn` then resets and steps outside it. The
    bug: the adapter resetting or stepping outside inference mode ("Inplace update to
    inference tensor outside InferenceMode")."""
    vec = TrotVecEnv(TASK, 8, seed=0, log_every=4)
    with torch.inference_mode():
        for _ in range(12):
            vec.step(torch.zeros(8, 1))
    obs = vec.reset()
    assert (vec.episode_length_buf > 0).any()  # staggered clocks again
    vec.episode_length_buf = torch.zeros_like(vec.episode_length_buf)
    obs, *_ = vec.step(torch.zeros(8, 1))
    assert torch.equal(vec.episode_length_buf, torch.ones(8, dtype=torch.int64))
    assert torch.equal(obs["policy"], vec.env.obs.policy)


def test_critic_reads_the_privileged_group_on_go1_flat():
    """rsl_rl's own PPO, built from the adapter's first observation and make_config's
    obs_groups: the actor's first layer takes trot's policy observation and the critic's
    its privileged one. The bug: both sets resolving to `policy` (rsl_rl's fallback), so
    the critic silently loses the privileged terms, or the groups swapped."""
    vec = TrotVecEnv("go1-flat", 4, seed=0)
    obs = vec.get_observations()
    assert obs["policy"] is vec.env.obs.policy and obs["critic"] is vec.env.obs.critic
    cfg = dict(make_config("go1-flat", num_envs=4), multi_gpu=None)  # as the runner sets it
    alg = PPO.construct_algorithm(obs, vec, cfg, "cpu")
    first = lambda model: next(m for m in model.mlp if isinstance(m, torch.nn.Linear))
    assert first(alg.actor).in_features == vec.env.obs_dim
    assert first(alg.critic).in_features == vec.env.critic_obs_dim != vec.env.obs_dim
    with torch.inference_mode():  # as rsl_rl's rollout acts
        obs, *_ = vec.step(alg.act(obs))
    assert torch.equal(obs["critic"], vec.env.obs.critic)


def test_episode_log_is_the_mean_over_the_rollouts_finished_episodes():
    """extras["log"] every log_every steps, against returns and lengths summed here from
    the rewards and dones the adapter returned. The bugs: statistics handed over every
    step (rsl_rl's logger would average per-step means, not episodes), a rollout with no
    finished episode logged as a return of 0, the accumulators not cleared between."""
    n, every = 24, 4
    vec, _ = _twins(n, seed=2, log_every=every, episode_seconds=0.2)
    running, length = torch.zeros(n, dtype=torch.float64), torch.zeros(n)
    ended: list[tuple[float, float]] = []
    gen = torch.Generator().manual_seed(1)
    windows = {"empty": 0, "full": 0}
    for t in range(1, 33):
        _, reward, dones, extras = vec.step(3.0 * torch.rand(n, 1, generator=gen) - 1.5)
        running += reward.double()
        length += 1
        ended += [(float(running[i]), float(length[i])) for i in dones.nonzero()[:, 0]]
        running[dones], length[dones] = 0.0, 0.0
        if t % every:
            assert "log" not in extras
            continue
        log = {k: float(v) for k, v in extras["log"].items()}
        assert {f"Episode/reward/{k}" for k in vec.env.reward_terms} <= set(log)
        assert log["Episode/episodes"] == len(ended)
        if not ended:
            windows["empty"] += 1
            assert math.isnan(log["Episode/episode_return"]), log
        else:
            windows["full"] += 1
            returns, lengths = zip(*ended)
            assert log["Episode/episode_return"] == pytest.approx(
                sum(returns) / len(ended), rel=1e-5)
            assert log["Episode/episode_length"] == pytest.approx(
                sum(lengths) / len(ended), rel=1e-6)
        ended = []
    assert windows["empty"] and windows["full"], windows  # both cases ran


def test_config_maps_the_tasks_tuned_agent():
    """make_config against the registry's PPOConfig of go1-flat, whose settings differ
    from the defaults. The bugs: a field read from PPOConfig's defaults or rsl_rl's
    instead of the task's, and the log-std handed over as rsl_rl's std."""
    a = tuned(get_task("go1-flat").agent)
    assert a != PPOConfig()
    cfg = make_config("go1-flat", num_envs=64)
    alg, actor = cfg["algorithm"], cfg["actor"]
    assert cfg["num_steps_per_env"] == a.rollout_steps == 24
    assert (alg["num_learning_epochs"], alg["num_mini_batches"]) == (a.epochs, a.minibatches)
    assert (alg["learning_rate"], alg["gamma"], alg["lam"]) == (a.learning_rate, a.gamma,
                                                                a.lam)
    assert (alg["entropy_coef"], alg["desired_kl"]) == (a.entropy_coef, a.desired_kl)
    assert alg["schedule"] == "adaptive" and alg["clip_param"] == a.clip_low
    assert actor["hidden_dims"] == list(a.actor_hidden) == [128, 64, 32]
    assert cfg["critic"]["hidden_dims"] == list(a.critic_hidden)
    assert actor["activation"] == a.activation and actor["obs_normalization"] == a.obs_norm
    assert actor["distribution_cfg"]["init_std"] == pytest.approx(math.exp(-0.5))
    small = tuned(get_task(TASK).agent)  # cartpole's: 2 epochs of 2 minibatches, relu, (32,)
    c = make_config(TASK, num_envs=64)
    assert (c["algorithm"]["num_learning_epochs"], c["algorithm"]["num_mini_batches"]) == (
        small.epochs, small.minibatches) == (2, 2)
    assert (c["actor"]["hidden_dims"], c["actor"]["activation"]) == ([32], "relu")
    assert any("symmetry" in note for note in unmapped(tuned(get_task("g1-flat").agent)))
    scaled = PPOConfig(popart=False, value_scale=10.0, kl_penalty=1.0)
    assert {n.split("=")[0] for n in unmapped(scaled)} >= {"value_scale", "kl_penalty"}
    with pytest.raises(ValueError, match="rnn"):
        make_config(TASK, num_envs=64, agent=PPOConfig(rnn="gru"))
    with pytest.raises(ValueError, match="clipped"):
        make_config(TASK, num_envs=64, agent=PPOConfig(clip=False))


def _doc_section() -> str:
    return DOC.read_text().split("## rsl_rl\n", 1)[1].split("\n## ", 1)[0]


def test_rsl_rl_ppo_learns_cartpole_balance():
    """docs/adapters.md's Python block as written: rsl_rl's runner and PPO on cartpole-
    balance, 60 iterations of 128 x 16 steps (measured 78-136 at the end over 10 seeds,
    12-13 after the first iteration). The bug: an adapter that runs but does not let rsl_rl
    learn (rewards or dones misaligned with the observations they follow)."""
    code = re.findall(r"```python\n(.*?)```", _doc_section(), flags=re.DOTALL)
    assert len(code) == 1
    scope: dict = {}
    exec(compile(code[0], str(DOC), "exec"), scope)  # noqa: S102 (the page's own code)
    rows = scope["rows"]
    assert len(rows) >= 55
    first, last = rows[0]["mean_return"], rows[-1]["mean_return"]
    assert last > 60.0 and last > 3 * first, (first, last)
    assert rows[-1]["env_steps"] == 60 * 128 * 16
    run = Path("runs_rslrl") / TASK
    assert (run / "model_59.pt").is_file()  # rsl_rl's last checkpoint
    assert scope["cfg"]["critic"]["hidden_dims"] == [128, 64, 32]


def test_adapters_md_commands_run(tmp_path, monkeypatch, capsys):
    """Every `trot` line of docs/adapters.md's rsl_rl section, through trot's CLI, in a
    folder holding docs/tasks.md's user files (the --tasks line trains its
    pendulum-swingup); the play line where OpenGL loads (always under TROT_REQUIRE_GL=1).
    The bugs: a documented flag the CLI lacks, --tasks not reaching the adapter, --set not
    applied, eval or play refusing the run."""
    from test_docs import _write_user_files
    from test_play import gl_problem

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(sources, "_loaded", {})
    _write_user_files(tmp_path)
    blocks = re.findall(r"```bash\n(.*?)```", _doc_section(), flags=re.DOTALL)
    lines = [ln for b in blocks for ln in b.splitlines() if ln.strip()]
    assert lines[0].startswith("pip install")  # the extra: .ci/run installs it
    commands = lines[1:]
    assert [ln.split()[1] for ln in commands] == ["rsl-rl"] * 5 + ["sim2sim", "export",
                                                                  "eval", "play"]
    for line in commands:
        argv = shlex.split(line)
        if argv[1] == "play" and gl_problem() is not None:
            continue  # no OpenGL here: test_play.py's tests skip too
        assert cli_main(argv[1:]) == 0, line
        out = capsys.readouterr().out.strip().splitlines()
        if argv[1] in ("sim2sim", "eval"):  # the rsl_rl policy in plain MuJoCo, in trot
            assert any(ln.split()[:2] == ["episodes", argv[-1]] for ln in out), out
            continue
        if argv[1] == "play":
            assert Path(argv[argv.index("--gif") + 1]).is_file(), out
            continue
        if argv[1] == "export":
            contract = json.loads(Path(argv[-1], "policy.json").read_text())
            assert contract["task"] == TASK
            continue
        run = Path(out[-1])
        record = json.loads((run / "rslrl.json").read_text())
        assert record["task"] == argv[2] and list(run.glob("model_*.pt")), line
        assert (run / "policy.onnx").is_file() == ("--export" in argv), line
        if "--tasks" in argv:
            assert record["task_source"]["kind"] == "file"
        if "--set" in argv:
            assert record["train_cfg"]["algorithm"]["learning_rate"] == 3e-4
            assert record["train_cfg"]["actor"]["hidden_dims"] == [64, 64]
        assert record["train_cfg"]["obs_groups"] == {"actor": ["policy"], "critic": ["critic"]}
    with pytest.raises(SystemExit):  # argparse's usage error
        rslrl_main([TASK, "--set", "learning_rate"])


def test_export_is_rsl_rls_own_actor_in_trots_contract(tmp_path):
    """`trot rsl-rl --export`: onnxruntime on the written graph against the actor rsl_rl
    itself loads from the checkpoint (a runner built here, `get_inference_policy` on a
    TensorDict), clipped to [-1, 1], on observations of the task's env; the contract's
    env steps against rsl_rl's own count. The bugs: the normalizer left out or applied
    twice, the std head exported instead of the mean, an older checkpoint loaded, and the
    iteration counted from 1."""
    import numpy as np
    import onnxruntime as ort
    from rsl_rl.runners import OnPolicyRunner
    from tensordict import TensorDict

    from trot.rslrl import train

    run = tmp_path / "run"
    rows = train(TASK, num_envs=32, max_iterations=4, seed=3, run_dir=run)
    assert cli_main(["export", str(run)]) == 0
    record = json.loads((run / "rslrl.json").read_text())
    contract = json.loads((run / "policy.json").read_text())
    assert contract["training_env_steps"] == rows[-1]["env_steps"] == 4 * 32 * 16

    vec = TrotVecEnv(TASK, 32, seed=7, stagger=False)
    runner = OnPolicyRunner(vec, record["train_cfg"], log_dir=None, device="cpu")
    runner.load(str(run / "model_3.pt"))
    policy = runner.get_inference_policy("cpu")
    obs = torch.cat([vec.get_observations()["policy"]]
                    + [vec.step(torch.rand(32, 1) * 2 - 1)[0]["policy"] for _ in range(30)])
    obs = torch.cat([obs, obs * 20.0])  # far outside the normalizer's range, too
    with torch.no_grad():
        want = policy(TensorDict({"policy": obs}, batch_size=[len(obs)])).clamp(-1, 1)
    sess = ort.InferenceSession(str(run / "policy.onnx"))
    got = sess.run(["action"], {"obs": obs.numpy()})[0]
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=0)
    assert np.abs(got).max() == 1.0 and want.std() > 0.01  # clipped rows and a live actor


def test_export_of_a_run_without_a_checkpoint_names_it(tmp_path, capsys):
    """An rsl_rl run folder whose model_<it>.pt files are gone: a message naming the folder
    and what it lacks, exit 2 (as every CLI error), nothing written."""
    from trot.rslrl import train

    run = tmp_path / "run"
    train(TASK, num_envs=16, max_iterations=1, run_dir=run)
    for f in run.glob("model_*.pt"):
        f.unlink()
    assert cli_main(["export", str(run)]) == 2
    assert "holds no rsl_rl checkpoint (model_<iteration>.pt)" in capsys.readouterr().err
    assert not (run / "policy.onnx").exists()


@pytest.fixture(scope="module")
def rsl_run(tmp_path_factory) -> Path:
    """A small `trot rsl-rl` run of cartpole-balance through the CLI: 30 iterations of 64
    envs x 16 steps, enough to balance a while; torch's threads and RNG kept as they were."""
    run = tmp_path_factory.mktemp("rslrl") / "run"
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    try:
        assert cli_main(["rsl-rl", TASK, "--num-envs", "64", "--max-iterations", "30",
                         "--seed", "1", "--run-dir", str(run)]) == 0
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
    return run


def _eval_json(capsys, run: Path, episodes: int = 8) -> dict:
    capsys.readouterr()
    assert cli_main(["eval", str(run), "--episodes", str(episodes), "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # nothing else on stdout


def test_eval_of_an_rsl_rl_run_is_rsl_rls_own_policy(rsl_run, tmp_path, capsys):
    """`trot eval RUN --json` of a `trot rsl-rl` run: a trot run's keys, rsl_rl's env steps,
    and the return of rsl_rl's own inference policy (its runner and checkpoint loader, a
    TensorDict in) played here in the same seeded, noise-free envs. The bugs: the run
    refused (no checkpoint.pt), its normalizer left out, an older checkpoint loaded, other
    seeds or observation noise, a library's print breaking --json."""
    from rsl_rl.runners import OnPolicyRunner
    from tensordict import TensorDict
    from test_play import new_run

    from trot.agents.evaluate import EVAL_SEED, run_episodes

    got = _eval_json(capsys, rsl_run)
    assert set(got) == set(_eval_json(capsys, new_run(TASK, tmp_path / "trot")))
    assert got["env_steps"] == 30 * 64 * 16 and got["episodes"] == 8
    record = json.loads((rsl_run / "rslrl.json").read_text())
    runner = OnPolicyRunner(TrotVecEnv(TASK, 1, stagger=False), record["train_cfg"],
                            log_dir=None, device="cpu")
    runner.load(str(rsl_run / "model_29.pt"))
    policy = runner.get_inference_policy("cpu")
    env = trot.make_env(TASK, 8, seed=EVAL_SEED,
                        config=dataclasses.replace(get_task(TASK).config, obs_noise=False))
    want = run_episodes(env, lambda obs: policy(TensorDict({"policy": obs},
                                                           batch_size=[len(obs)])), 8)
    assert got["mean_return"] == pytest.approx(want["mean_return"], rel=1e-5)
    assert got["mean_length"] == want["mean_length"]
    assert 40.0 < got["mean_return"] <= got["max_return"]  # it learned to balance a while


def test_play_of_an_rsl_rl_run_writes_a_gif(rsl_run, tmp_path, capsys):
    """`trot play RUN --gif x.gif --seconds 0.2` of a `trot rsl-rl` run (where OpenGL loads,
    as test_play.py's tests): 0.2 s at 25 fps is the start frame and 5 more."""
    from test_play import assert_play_writes_gif

    assert_play_writes_gif(rsl_run, tmp_path, capsys)
