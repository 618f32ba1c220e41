"""Records each locomotion task, as registered, over 200 control steps under fixed actions
and seeds (pushes and command resampling come after 10 s; past the first 200 steps, all but
the rewards are kept as one digest per quantity): policy and critic observations (also the final ones), rewards and every reward
term of every step, terminations, truncations, commands, the randomized model parameters
and, for a terrain task, each env's curriculum level. tests/test_task_records.py compares
the current code with the files this wrote before tasks became compositions of terms
(2026-12-05), bit for bit.

    python tests/data/task_records.py [TASK ...]   # rewrites records/TASK.npz: on purpose only
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

FOLDER = Path(__file__).with_name("records")
TASKS = ("go1-flat", "go1-flat-airtime", "go2-flat", "g1-flat", "go1-rough")
STEPS, FULL, N, SEED = 800, 200, 4, 3
PARAMS = ("geom_friction", "body_mass", "body_ipos", "actuator_gainprm", "actuator_biasprm")
# settings registered since the records were made, put back for them, both of issue 53:
# g1-flat's reward weights, kick interval, arch and history (tasks/g1.py) and go1-rough's
# arch and its kernel (tasks/go1.py)
AS_RECORDED = {"g1-flat": dict(weights=(("feet_phase", 1.0), ("termination", -2.0)),
                               push_interval_seconds=(10.0, 15.0), swing_height=0.08,
                               feet_phase_std=0.05, obs_history=1),
               "go1-rough": dict(swing_height=0.08, feet_phase_std=0.05)}


def path(task: str) -> Path:
    return FOLDER / f"{task}.npz"


def record(task: str, levels: Callable | None = None, steps: int = STEPS
           ) -> dict[str, np.ndarray]:
    """levels(env) -> [N] curriculum levels, or None where the task has no curriculum."""
    import trot
    from trot.tasks import get_task

    torch.set_num_threads(1)
    config = dataclasses.replace(get_task(task).config, **AS_RECORDED.get(task, {}))
    env = trot.make_env(task, num_envs=N, seed=SEED, config=config)
    terms: list[dict[str, torch.Tensor]] = []
    inner = env._record  # the env's guarded record of each step's reward and its terms

    def spy(reward, step_terms, *rest):
        terms.append({k: v.clone() for k, v in step_terms.items()})
        return inner(reward, step_terms, *rest)

    env._record = spy
    gen = torch.Generator().manual_seed(7)
    out: dict[str, list[np.ndarray]] = {"policy0": [env.reset().policy.numpy().copy()]}

    def put(k: str, v: torch.Tensor) -> None:
        out.setdefault(k, []).append(v.numpy().copy())

    for _ in range(steps):
        action = 1.5 * torch.rand(N, env.action_dim, generator=gen) - 0.75  # some clip
        res = env.step(action)
        for k, v in (("policy", res.obs.policy), ("critic", res.obs.critic),
                     ("final_policy", res.final_obs.policy),
                     ("final_critic", res.final_obs.critic), ("reward", res.reward),
                     ("terminated", res.terminated), ("truncated", res.truncated),
                     ("command", env.task.command)):
            put(k, v)
        if levels is not None:
            put("level", levels(env))
        for p in PARAMS:
            put(f"param/{p}", env.sim.params(p))
    for name in terms[0]:
        out[f"term/{name}"] = [t[name].numpy() for t in terms]
    # rewards in full (compared to a tolerance: exp rounds by instruction set), the rest's
    # later steps as digests (compared bitwise)
    full = lambda k: k == "reward" or k.startswith("term/")
    arrays = {k: np.stack(v if full(k) else v[:FULL]) for k, v in out.items()}
    arrays |= {f"digest/{k}": digest(v[FULL:]) for k, v in out.items()
               if len(v) > FULL and not full(k)}
    return arrays


def digest(steps: list[np.ndarray]) -> np.ndarray:
    """The SHA-256 of these steps' bytes, as 32 uint8."""
    return np.frombuffer(hashlib.sha256(np.stack(steps).tobytes()).digest(), np.uint8)


def rough_levels(env) -> torch.Tensor:
    """The curriculum's levels as the code of 2026-12-05 kept them."""
    return env.task.state_dict()["terrain_level"]


if __name__ == "__main__":
    FOLDER.mkdir(exist_ok=True)
    for name in sys.argv[1:] or TASKS:
        np.savez_compressed(path(name), **record(
            name, rough_levels if "rough" in name else None))
        print(f"wrote {path(name)} ({path(name).stat().st_size / 1024:.0f} KiB)")
