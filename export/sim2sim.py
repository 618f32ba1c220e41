"""`trot sim2sim RUN_DIR`: the exported policy drives one plain MuJoCo simulation (MjData,
mj_step) built from the exported model.xml, through the torch-free runner, exactly the
path a robot takes. The task's own code only samples start states and scores the result."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import torch

from trot.export.runner import ObservationBuilder, OnnxPolicy
from trot.tasks.registry import get_task, is_registered
from trot.tasks.sources import load_recorded
from trot.sim.base import RNE_POST_FIELDS, check_field, sensor_slices, sensor_view


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


def run_sim2sim(run_dir: Path, episodes: int = 10, seed: int = 12345,
                trajectory: Path | None = None) -> dict[str, float | None]:
    if episodes <= 0:
        raise ValueError(f"episodes must be a positive integer, got {episodes}")
    policy = OnnxPolicy(run_dir)  # an export directory is self-contained
    if not is_registered(policy.contract["task"]):  # a user task: its recorded source
        load_recorded(policy.contract.get("task_source"), Path(run_dir))
    entry = get_task(policy.contract["task"])
    task = entry.task_cls(type(entry.config).from_dict(policy.contract["task_config"]))
    model = mujoco.MjModel.from_xml_path(str(policy.model_xml))
    data = mujoco.MjData(model)
    sim = PlainSim(model, data, int(policy.contract["substeps"]))
    task.bind_actions(sim)
    task.bind(sim)
    builder = ObservationBuilder(policy.contract, model)
    gen = torch.Generator().manual_seed(seed)
    max_steps = max(1, round(task.config.episode_seconds / sim.control_dt))
    returns, lengths, falls, traj = [], [], 0, []
    metrics: dict[str, list[float]] = {}  # task eval metrics, one mean per episode
    everyone = torch.ones(1, dtype=torch.bool)
    for _ in range(episodes):
        qpos, qvel = task.initial_state(sim, gen)
        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:] = qpos[0].double().numpy(), qvel[0].double().numpy()
        mujoco.mj_forward(model, data)
        sim.refresh()
        task.on_reset(sim, everyone, gen)
        builder.last_action[:] = 0.0
        ret, steps, sums = 0.0, 0, {}
        for steps in range(1, max_steps + 1):
            if task.command is not None:
                builder.command[:] = task.command[0].numpy()
            action = np.clip(policy.act(builder.build(data)), -1.0, 1.0)
            task.pre_step(sim, gen)
            data.ctrl[:] = policy.ctrl(action)
            for _ in range(sim.substeps):
                mujoco.mj_step(model, data)
            sim.refresh()
            builder.last_action[:] = action
            act_t = torch.tensor(action, dtype=torch.float32)[None]
            ret += float(task.reward(sim, act_t)[0][0])
            for k, v in task.eval_metrics(sim).items():
                sums[k] = sums.get(k, 0.0) + float(v[0])
            if trajectory is not None:
                traj.append(np.concatenate([data.qpos, data.qvel, action]))
            if bool(task.terminated(sim)[0]):
                falls += 1
                break
        returns.append(ret)
        lengths.append(steps)
        for k, v in sums.items():
            metrics.setdefault(k, []).append(v / steps)
    if trajectory is not None:
        np.savez(trajectory, steps=np.asarray(traj), nq=model.nq, nv=model.nv)
    r = np.asarray(returns)
    out = {"mean_return": float(r.mean()), "std_return": float(r.std()),
           "episodes": float(episodes), "mean_length": float(np.mean(lengths)),
           "terminated_rate": falls / episodes}
    out |= {k: float(np.mean(v)) for k, v in metrics.items()}
    return out | task.summarize(out) | {
        "env_steps": float(policy.contract["training_env_steps"]),
        "max_return": task.max_return()}
