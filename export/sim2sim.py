"""`trot sim2sim RUN_DIR`: the exported policy drives one plain MuJoCo simulation (MjData,
mj_step) built from the exported model.xml, through the torch-free runner, exactly the
path a robot takes. The task's own code only samples start states and scores the result,
and checks the contract: what the task computes on model.xml (action affine, observation
layout) must be what the contract says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mujoco
import numpy as np
import torch

from trot.export.checks import ContractError, same_values
from trot.export.runner import ObservationBuilder, OnnxPolicy
from trot.export.schema import Contract, ObservationTerm
from trot.agents.runs import course_changes
from trot.sim.base import RNE_POST_FIELDS, check_field, sensor_slices, sensor_view
from trot.tasks.base import Task
from trot.tasks.observation import make_layout
from trot.tasks.registry import get_task, is_registered
from trot.tasks.sources import load_recorded


class PlainSim:
    """One MjData seen through the read side of `BatchedSim` (N = 1), for scoring."""

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, substeps: int):
        self.model, self.mjdata, self.substeps = model, data, substeps
        self.num_envs, self.device = 1, torch.device("cpu")
        self.control_dt = float(model.opt.timestep) * substeps
        self._sensors = sensor_slices(model)
        self.unstable = torch.zeros(1, dtype=torch.bool)
        self.all_stable = None
        self.refresh()

    def refresh(self) -> None:
        d = self.mjdata
        self.qpos = torch.tensor(d.qpos, dtype=torch.float32)[None]
        self.qvel = torch.tensor(d.qvel, dtype=torch.float32)[None]
        self.sensordata = torch.tensor(d.sensordata, dtype=torch.float32)[None]

    def sensor(self, name: str) -> torch.Tensor:
        return sensor_view(self, self._sensors, name)

    def data(self, name: str, precise: bool = False) -> torch.Tensor:
        """BatchedSim.data: the field as mj_step left it (cfrc_ext etc. completed)."""
        if name in RNE_POST_FIELDS:
            mujoco.mj_rnePostConstraint(self.model, self.mjdata)
        dtype = torch.float64 if precise else torch.float32
        return torch.tensor(getattr(self.mjdata, name), dtype=dtype)[None]

    def params(self, field: str) -> torch.Tensor:
        return torch.as_tensor(np.array(getattr(self.model, field)), dtype=torch.float32)[None]

    def set_params(self, field: str, mask: torch.Tensor, values: torch.Tensor) -> None:
        """Domain randomization lands in the one model (this sim's only env)."""
        check_field(self.model, field)
        if bool(mask[0]):
            getattr(self.model, field)[:] = values[0].double().numpy()
            if field in mujoco.MjModel._setconst_inputs:  # masses, inertial frames
                # mj_setConst works in the data at qpos0: keep the env's state around it
                m, d, spec = self.model, self.mjdata, mujoco.mjtState.mjSTATE_INTEGRATION
                state = np.empty(mujoco.mj_stateSize(m, spec))
                mujoco.mj_getState(m, d, state, spec)
                mujoco.mj_setConst(m, d)
                mujoco.mj_setState(m, d, state, spec)
                mujoco.mj_forward(m, d)
                self.refresh()

    def kick(self, mask: torch.Tensor, dqvel: torch.Tensor) -> None:
        if bool(mask[0]):
            self.mjdata.qvel[:] += dqvel[0].double().numpy()
            self.refresh()


def check_task(c: Contract, task: Task, model: mujoco.MjModel) -> None:
    """Refuse a contract that the task's own code, run on model.xml, contradicts: its
    action_scale, action_offset, command_dim and observation layout (ContractError naming
    the field). The robot runner checks the model side (checks.check_model)."""
    scale, offset = task.action_affine(model)
    dims = {k: v.size for k, v in sensor_slices(model).items()}
    layout = [ObservationTerm.from_json(t) for t in
              make_layout(task.policy_terms(), dims, task.command_dim, model.nu).to_json()]
    for name, got, want in (("action_scale", c.action_scale, scale),
                            ("action_offset", c.action_offset, offset),
                            ("command_dim", c.command_dim, task.command_dim)):
        if not same_values(got, want):
            raise ContractError(f"policy.json {name} is {got} but task {c.task!r} "
                                f"computes {want} on model.xml")
    if len(layout) != len(c.observation):
        raise ContractError(f"policy.json observation has {len(c.observation)} terms, "
                            f"task {c.task!r} has {len(layout)}")
    for k, (got, want) in enumerate(zip(c.observation, layout)):
        for f in dataclasses.fields(want):
            mine, theirs = getattr(got, f.name), getattr(want, f.name)
            if not same_values(mine, theirs):
                raise ContractError(f"policy.json observation[{k}].{f.name} ({want.name!r}) "
                                    f"is {mine} but task {c.task!r} computes "
                                    f"{theirs} on model.xml")


class PlainRunner:
    """The exported policy driving one plain MjData of model.xml, a control step at a time,
    through OnnxPolicy and ObservationBuilder: a robot loop. `task_changes` replace fields
    of the exported task config (e.g. randomize=False) for the task code that samples start
    states, commands and pushes, and scores."""

    def __init__(self, export_dir: Path, task_changes: dict | None = None,
                 course: bool = False):
        self.policy = policy = OnnxPolicy(export_dir)  # an export directory is self-contained
        c = policy.contract
        if not is_registered(c.task):  # a user task: its recorded source
            load_recorded(c.task_source, Path(export_dir))
        entry = get_task(c.task)
        cfg = type(entry.config).from_dict(c.task_config | (task_changes or {}))
        if course:
            cfg = dataclasses.replace(cfg, **course_changes(c.task, cfg))
        self.task = entry.task_cls(cfg)
        self.model = model = mujoco.MjModel.from_xml_path(str(policy.model_xml))
        self.data = mujoco.MjData(model)
        self.sim = PlainSim(model, self.data, int(c.substeps))
        self.task.bind_actions(self.sim)
        self.task.bind(self.sim)
        check_task(c, self.task, model)
        self.builder = ObservationBuilder(c, model)
        # the motors get each action this many control steps late, as in training: the
        # robot's own latency, which a plain simulation must add (the runner adds none)
        self.latency = int(c.action_latency_steps)
        self.pending: list[np.ndarray] = []

    def start(self, qpos: np.ndarray, qvel: np.ndarray, gen: torch.Generator) -> None:
        """A new episode from this state (task state reset, last action zero)."""
        m, d = self.model, self.data
        one = torch.ones(1, dtype=torch.bool)
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = qpos, qvel
        self.task.randomize(self.sim, one, gen)  # as Env: before the reset's forward
        mujoco.mj_forward(m, d)
        self.sim.refresh()
        self.task.on_reset(self.sim, one, gen)
        self.builder.last_action[:] = 0.0
        self.builder.time = 0.0
        self.policy.reset()  # a new episode's history and recurrent state
        self.pending = [np.zeros(self.policy.action_dim)] * self.latency

    def step(self, gen: torch.Generator) -> np.ndarray:
        """One control step: observe, act, `substeps` mj_steps. Returns the action."""
        task, d = self.task, self.data
        if task.command is not None:
            self.builder.command[:] = task.command[0].numpy()
        action = self.policy.act(self.builder.build(d))  # clipped inside the graph
        task.pre_step(self.sim, gen)
        self.pending.append(action)
        d.ctrl[:] = self.policy.ctrl(self.pending.pop(0))  # this step's, or L steps old
        for _ in range(self.sim.substeps):
            mujoco.mj_step(self.model, d)
        self.sim.refresh()
        task.post_step(self.sim, torch.tensor(action, dtype=torch.float32)[None])
        self.builder.last_action[:] = action
        self.builder.time += self.sim.control_dt
        return action


def run_sim2sim(run_dir: Path, episodes: int = 10, seed: int = 12345,
                trajectory: Path | None = None, course: bool = False) -> dict[str, float | None]:
    """course: on the task's fixed terrain course (runs.course_changes), whose heightfield
    model.xml carries beside the training terrain."""
    if episodes <= 0:
        raise ValueError(f"episodes must be a positive integer, got {episodes}")
    r = PlainRunner(run_dir, course=course)
    task, sim, data = r.task, r.sim, r.data
    gen = torch.Generator().manual_seed(seed)
    max_steps = max(1, round(task.config.episode_seconds / sim.control_dt))
    returns, lengths, falls, traj = [], [], 0, []
    metrics: dict[str, list[float]] = {}  # task eval metrics, one mean per episode
    outcomes: dict[str, list[float]] = {}  # Task.episode_outcomes at each episode's end
    for _ in range(episodes):  # no Task.episode_end: no curriculum between episodes
        qpos, qvel = task.initial_state(sim, gen)
        r.start(qpos[0].double().numpy(), qvel[0].double().numpy(), gen)
        ret, steps, trace = 0.0, 0, {}  # metric -> its value per step (NaN: undefined)
        for steps in range(1, max_steps + 1):
            action = r.step(gen)
            act_t = torch.tensor(action, dtype=torch.float32)[None]
            ret += float(task.reward(sim, act_t)[0][0])
            for k, v in task.eval_metrics(sim).items():
                trace.setdefault(k, []).append(float(v[0]))
            if trajectory is not None:
                traj.append(np.concatenate([data.qpos, data.qvel, action]))
            fell = bool(task.terminated(sim)[0])
            ended = task.truncated(sim)
            if fell or steps == max_steps or (ended is not None and bool(ended[0])):
                for k, v in task.episode_outcomes(sim).items():
                    if not np.isnan(float(v[0])):
                        outcomes.setdefault(k, []).append(float(v[0]))
                falls += fell
                break
        returns.append(ret)
        lengths.append(steps)
        for k, values in trace.items():  # over the episode and its second half, as eval
            for name, x in ((k, np.asarray(values)),
                            (f"{k}_second_half", np.asarray(values[steps // 2:]))):
                defined = x[~np.isnan(x)]
                metrics.setdefault(name, []).extend([defined.mean()] if len(defined) else [])
    if trajectory is not None:
        np.savez(trajectory, steps=np.asarray(traj), nq=r.model.nq, nv=r.model.nv)
    rets = np.asarray(returns)
    out = {"mean_return": float(rets.mean()), "std_return": float(rets.std()),
           "episodes": float(episodes), "mean_length": float(np.mean(lengths)),
           "terminated_rate": falls / episodes}
    out |= {k: float(np.mean(v)) if v else None for k, v in metrics.items()}
    out |= {k: float(np.mean(v)) for k, v in outcomes.items()}
    return out | task.summarize(out) | {
        "env_steps": float(r.policy.contract.training_env_steps),
        "max_return": task.max_return()}
