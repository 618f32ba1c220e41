"""What `trot view` (trot/viewer.py) simulates: one env of a task in MuJoCo C, driven by a
run's checkpoint (torch), by its exported ONNX through the torch-free runner (the loop of
`trot sim2sim`, export/sim2sim.py), or by zero or random actions (a task with no run).

Every driver holds the command at the viewer's sliders (no resampling, no heading
steering), and the task's config is changed for watching: no random pushes (the push
button kicks), no domain randomization, no observation noise. Episodes end as in training
(a fall, the time limit, the task's own truncations) and restart at once."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np
import torch

from trot.agents.networks import Acting
from trot.agents.runs import course_changes, load_run, run_config
from trot.export.schema import Contract
from trot.export.sim2sim import PlainRunner
from trot.tasks.base import Task
from trot.tasks.registry import get_task, make_env
from trot.tasks.terms.events import Push

WATCHING = {"push": False, "randomize": False, "obs_noise": False, "heading_command": False,
            "resample_seconds": 1e6}
"""task config fields set for watching, where the task's config has them"""
ACTIONS = ("zero", "random")


def watching(config) -> dict:
    """The WATCHING changes that `config`'s class has fields for."""
    names = {f.name for f in dataclasses.fields(config)}
    return {k: v for k, v in WATCHING.items() if k in names}


@dataclass
class Readout:
    """What the page shows after a control step."""

    time: float = 0.0
    """s since the episode began"""
    episode_return: float = 0.0
    episodes: int = 0
    """episodes that have ended since the viewer started"""
    command: dict[str, float] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)
    """base-frame forward and sideways speed (m/s), yaw rate (rad/s), where measurable"""
    terms: dict[str, float] = field(default_factory=dict)
    """each reward term's value this step (weighted, x control dt)"""
    contacts: dict[str, bool] = field(default_factory=dict)


class Driver:
    """One env and its policy. Subclasses provide the sim (`task`, `sim`, `model`, `data`
    for drawing) and `_start` / `_advance`."""

    task: Task
    sim: object
    model: mujoco.MjModel
    data: mujoco.MjData
    control_dt: float

    def __init__(self, seed: int):
        self.gen = torch.Generator().manual_seed(seed)
        self.command: np.ndarray | None = None  # the sliders' values, once the task has one
        self.readout = Readout()

    # ----------------------------------------------------------------- for the viewer
    def command_ranges(self) -> dict[str, tuple[float, float]]:
        """The task's command axes and their ranges (empty: the task takes no command)."""
        ranges = getattr(self.task, "command_ranges", None)
        return {k: (float(lo), float(hi)) for k, (lo, hi) in ranges().items()} \
            if ranges is not None and self.task.command is not None else {}

    def set_command(self, values: list[float]) -> None:
        self.command = np.asarray(values, dtype=np.float32)
        self._hold()

    def _hold(self) -> None:
        if self.command is not None and self.task.command is not None:
            self.task.command[0] = torch.as_tensor(self.command)

    def reset(self) -> None:
        """A new episode, now."""
        self._start()
        self._restart()

    def _restart(self) -> None:
        self._hold()  # the new episode's command is the sliders', not a drawn one
        self.readout = dataclasses.replace(self.readout, time=0.0, episode_return=0.0,
                                           terms={})
        self._measure()

    def step(self) -> None:
        """One control step; a new episode starts where this one ended (`_advance` starts
        it)."""
        self._hold()
        reward, terms, done = self._advance()
        r = self.readout
        r.time += self.control_dt
        r.episode_return += reward
        if terms is not None:
            r.terms = {k: float(v[0]) for k, v in terms.items()}
        if done:
            r.episodes += 1
            self._restart()
        else:
            self._measure()

    def can_push(self) -> bool:
        return Push in getattr(getattr(self.task, "body", None), "terms", {})

    def push(self) -> None:
        """A kick as training's Push event gives: U(-push_velocity, push_velocity) m/s added
        to the base's world x and y velocity."""
        if not self.can_push():
            raise ValueError(f"task {self.name!r} has no Push event to kick with")
        body = self.task.body
        body.term(Push).kick(body, torch.ones(1, dtype=torch.bool), self.gen)

    def _measure(self) -> None:
        r, task = self.readout, self.task
        if self.task.command is not None:
            names = list(self.command_ranges()) or [f"c{i}" for i in
                                                    range(task.command.shape[1])]
            r.command = dict(zip(names, (float(x) for x in task.command[0])))
        body = getattr(task, "body", None)
        if body is not None:
            vel, gyro = body.lin_vel()[0], body.gyro()[0]
            r.measured = {"lin_vel_x": float(vel[0]), "lin_vel_y": float(vel[1]),
                          "yaw_rate": float(gyro[2])}
            r.contacts = dict(zip(task.robot.feet, (bool(c) for c in body.foot_contact()[0])))


class EnvDriver(Driver):
    """trot's training env (cpu sim, N = 1), acting with `act` (obs [1, P] -> [1, A])."""

    def __init__(self, env, act, seed: int, ended=None):
        super().__init__(seed)
        self.env, self.act, self.ended = env, act, ended
        self.task, self.sim, self.name = env.task, env.sim, env.name
        self.model = env.sim.model
        self.data = mujoco.MjData(self.model)
        self.control_dt = float(env.control_dt)
        self.reset()

    def _hold(self) -> None:
        """The command, and the policy's newest observation frame rebuilt with it: the
        frame Env.step built holds the command before (a new episode's: a drawn one)."""
        super()._hold()
        if self.command is not None and getattr(self, "obs", None) is not None:
            frame = self.env.observe().policy  # noise is off: no draws
            self.obs.policy[:, -frame.shape[1]:] = frame

    def _start(self) -> None:
        self.obs = self.env.reset()
        if self.ended is not None:
            self.ended(torch.ones(1, dtype=torch.bool))

    def _advance(self):
        action = self.act(self.obs.policy)
        res = self.env.step(action)
        self.obs = res.obs
        done = res.terminated | res.truncated
        if self.ended is not None:
            self.ended(done)
        # Env.step has started the next episode where this one ended: its terms then
        # would score the new start state
        terms = None if bool(done[0]) else self.task.reward(self.sim, action)[1]
        return float(res.reward[0]), terms, bool(done[0])

    def draw(self) -> mujoco.MjData:
        self.data.qpos[:] = self.sim.qpos[0].double().numpy()
        mujoco.mj_kinematics(self.model, self.data)
        return self.data


def _exported_changes(export_dir: Path) -> dict:
    """The WATCHING changes for the task config an export records (none where there is no
    readable policy.json: the runner then says what is missing)."""
    try:  # ContractError is a ValueError
        fields = Contract.from_json(
            json.loads((Path(export_dir) / "policy.json").read_text())).task_config
    except (OSError, ValueError, TypeError):
        return {}
    return {k: v for k, v in WATCHING.items() if k in fields}


class OnnxDriver(Driver):
    """The exported policy through export/sim2sim.PlainRunner: one plain MjData of the
    export's model.xml, the observation built by the runner from the contract."""

    def __init__(self, export_dir: Path, seed: int, course: bool = False):
        super().__init__(seed)
        self.runner = r = PlainRunner(export_dir, _exported_changes(export_dir), course)
        self.task, self.sim, self.name = r.task, r.sim, r.policy.contract.task
        self.model, self.data = r.model, r.data
        self.control_dt = float(r.sim.control_dt)
        self.max_steps = max(1, round(self.task.config.episode_seconds / self.control_dt))
        self.reset()

    def _start(self) -> None:
        qpos, qvel = self.task.initial_state(self.sim, self.gen)
        self.runner.start(qpos[0].double().numpy(), qvel[0].double().numpy(), self.gen)
        self.steps = 0

    def _advance(self):
        task, sim = self.task, self.sim
        action = torch.tensor(self.runner.step(self.gen), dtype=torch.float32)[None]
        self.steps += 1
        reward, terms = task.reward(sim, action)
        ended = task.truncated(sim)
        done = bool(task.terminated(sim)[0]) or self.steps >= self.max_steps or (
            ended is not None and bool(ended[0]))
        if done:
            self._start()
        return float(reward[0]), terms, done

    def draw(self) -> mujoco.MjData:
        mujoco.mj_kinematics(self.model, self.data)
        return self.data


def run_driver(run_dir: Path, seed: int, course: bool = False) -> EnvDriver:
    """A run's checkpoint acting deterministically (torch), on the cpu sim whatever the
    run trained on."""
    if not (Path(run_dir) / "config.json").is_file() and \
            (Path(run_dir) / "policy.onnx").is_file():
        raise ValueError(f"{run_dir} is an export (policy.onnx, no config.json), not a run: "
                         "view it with --onnx")
    cfg = run_config(run_dir)  # names a folder that is not a run
    task_cfg = cfg.env if cfg.env is not None else get_task(cfg.task).config
    run = load_run(run_dir, 1, seed, sim="cpu", course=course, changes=watching(task_cfg))
    act = Acting(run.ac.actor, 1, run.env.device)
    return EnvDriver(run.env, act, seed, act.ended)


def task_driver(task: str, actions: str, seed: int, course: bool = False) -> EnvDriver:
    """A registered task under zero or uniform random actions in [-1, 1]."""
    if actions not in ACTIONS:
        raise ValueError(f"--actions must be one of {', '.join(ACTIONS)}, got {actions!r}")
    config = get_task(task).config
    changes = watching(config) | (course_changes(task, config) if course else {})
    env = make_env(task, 1, "cpu", "cpu", seed, dataclasses.replace(config, **changes))
    gen = torch.Generator().manual_seed(seed)
    if actions == "zero":
        return EnvDriver(env, lambda obs: torch.zeros(1, env.action_dim), seed)
    return EnvDriver(env, lambda obs: 2 * torch.rand(1, env.action_dim, generator=gen) - 1,
                     seed)
