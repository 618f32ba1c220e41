"""Records the Go1's legged-task behaviour (go1-flat-airtime: go1-flat until it took a gait
clock on 2026-12-02) over 200 control steps under fixed actions and seeds:
policy and critic observations, rewards and their terms, terminations, truncations, final
observations, commands and the randomized model parameters. The file it wrote before the
Go1 became a robot description plus the generic legged task (go1_flat_record.npz) is what
tests/test_legged.py compares the current code with, bit for bit.

    python tests/data/go1_flat_record.py   # rewrites go1_flat_record.npz: only on purpose
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

PATH = Path(__file__).with_name("go1_flat_record.npz")
STEPS, N, SEED = 200, 4, 3
PARAMS = ("geom_friction", "body_mass", "body_ipos", "actuator_gainprm", "actuator_biasprm")


def record(task: str = "go1-flat-airtime", steps: int = STEPS) -> dict[str, np.ndarray]:
    import dataclasses

    import trot
    from trot.tasks.registry import get_task

    torch.set_num_threads(1)
    # one frame, as recorded: go1-flat registers a 4-frame history since 2026-12-02, which
    # stacks these same frames (tests/test_memory.py checks the stacking)
    cfg = dataclasses.replace(get_task(task).config, obs_history=1)
    env = trot.make_env(task, num_envs=N, seed=SEED, config=cfg)
    gen = torch.Generator().manual_seed(7)
    obs = env.reset()
    out: dict[str, list[np.ndarray]] = {k: [] for k in (
        "policy", "critic", "reward", "terminated", "truncated", "final_policy",
        "final_critic", "command")}
    terms: dict[str, list[np.ndarray]] = {}
    params: dict[str, list[np.ndarray]] = {p: [] for p in PARAMS}
    out["policy0"] = [obs.policy.numpy().copy()]
    for _ in range(steps):
        action = 1.5 * torch.rand(N, env.action_dim, generator=gen) - 0.75  # some clip
        res = env.step(action)
        out["policy"].append(res.obs.policy.numpy().copy())
        out["critic"].append(res.obs.critic.numpy().copy())
        out["final_policy"].append(res.final_obs.policy.numpy().copy())
        out["final_critic"].append(res.final_obs.critic.numpy().copy())
        out["reward"].append(res.reward.numpy().copy())
        out["terminated"].append(res.terminated.numpy().copy())
        out["truncated"].append(res.truncated.numpy().copy())
        out["command"].append(env.task.command.numpy().copy())
        # per-env running episode sums of [reward, 1, reward terms...]: every term, each step
        terms.setdefault("running", []).append(env.stats.running.numpy().copy())
        for p in PARAMS:
            params[p].append(env.sim.params(p).numpy().copy())
    arrays = {k: np.stack(v) for k, v in out.items()}
    arrays |= {k: np.stack(v) for k, v in terms.items()}
    arrays["reward_terms"] = np.array(env.reward_terms)
    arrays |= {f"param/{k}": np.stack(v)[-1] for k, v in params.items()}  # final draws
    arrays |= {f"param_first/{k}": np.stack(v)[0] for k, v in params.items()}
    return arrays


if __name__ == "__main__":
    np.savez_compressed(PATH, **record())
    print(f"wrote {PATH} ({PATH.stat().st_size / 1024:.0f} KiB)")
