"""Teacher-student distillation: `trot distill TEACHER_RUN STUDENT_TASK`. A student that
sees only what the robot has learns to act as a trained teacher whose policy saw
privileged inputs (a height scan, friction, full state).

The method is DAgger (Ross et al., 2011) without aggregation, as in rsl_rl 5's
Distillation. Each iteration steps the student's envs T times:
- in every env and step, the teacher's action is executed with probability beta, the
  student's otherwise. beta falls linearly from 1 to 0 over `teacher_iterations`, so the
  student first sees the states the teacher leads to, then its own;
- every visited state is labelled with the teacher's deterministic action
  clip(mean_teacher(o_teacher), -1, 1). The teacher reads its observation from the
  student's env each step (`Env.observer`): the same sim, command and task state;
- the student's mean regresses onto the labels: mean squared error, `epochs` x
  `minibatches` of Adam steps, gradient norm clipped. An MLP student's rows are shuffled;
  a recurrent student learns on whole rollouts of a subset of envs (truncated BPTT from
  the rollout's first state, as PPO's recurrent update).
The student's loss is on the action the robot runs, clip(mean), so the exported policy is
the one that was fitted. The student's observation normalizer follows its visited states.

The distiller is a learner of the one loop (agents/loop.py): budgets, signals, logs,
checkpoints and resume are the loop's, as for every way of training. The run directory is a
trot run: config.json is the student's TrainConfig, whose mode (`Distill`) records the
teacher and the distillation settings, and the checkpoint holds an ActorCritic, with a
critic that is never trained. So `trot eval`, `export`, `play` and `sim2sim` read it as
they read any run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from trot.agents.checkpoint import Checkpoint, require_keys
from trot.agents.distributed import ONE_PROCESS
from trot.agents.loop import OneRun
from trot.agents.networks import Acting, ActorCritic, fold, reset_state
from trot.agents.runs import LoadedRun, load_run
from trot.agents.train_config import TrainConfig
from trot.core.files import atomic_write
from trot.tasks.env import Env, stack_history
from trot.tasks.registry import make_env

RECORD = "distill.json"  # the teacher: its task, observation terms and history
STATE_KEYS = ("model", "optimizer", "env", "gen", "torch_rng", "student_state", "fresh",
              "teacher_obs", "teacher_state")


class Teacher:
    """The teacher's deterministic action, read in the student's env: its observation
    terms compiled against that env (with the teacher's own history length), its actor
    (normalizer and memory included) acting on them."""

    def __init__(self, run: LoadedRun, env: Env):
        check_compatible(run.env, env)
        self.layout, self._read = env.observer(run.env.task.policy_terms())
        self.k = run.env.history
        self.acting = Acting(run.ac.actor.requires_grad_(False), env.num_envs, env.device)
        self.obs: Tensor | None = None  # [N, K * P]

    @torch.no_grad()
    def act(self, fresh: Tensor | None) -> Tensor:
        """clip(mean) [N, A] at the env's current state; fresh [N]: envs that just began
        an episode (their history refills, their memory restarts)."""
        if fresh is not None:
            self.acting.ended(fresh)
        self.obs = stack_history(self.obs, self._read(), fresh, self.k)
        return self.acting(self.obs)


def check_compatible(teacher: Env, student: Env) -> None:
    """The teacher's actions must mean what the student's mean: the same actuators, the
    same action scale and offset, and a command of the same layout."""
    mt, ms = teacher.sim.model, student.sim.model
    names = lambda m: [m.actuator(i).name for i in range(m.nu)]  # noqa: E731
    problems = []
    if names(mt) != names(ms):
        problems.append(f"actuators {names(mt)} against {names(ms)}")
    elif not all(torch.allclose(torch.as_tensor(a), torch.as_tensor(b)) for a, b in
                 zip(teacher.task.action_affine(mt), student.task.action_affine(ms))):
        problems.append("action scale or offset differ")
    if teacher.task.command_dim != student.task.command_dim:
        problems.append(f"command dims {teacher.task.command_dim} and "
                        f"{student.task.command_dim}")
    if problems:
        raise ValueError(f"teacher task {teacher.name!r} and student task {student.name!r} "
                         f"do not share an action space: {'; '.join(problems)}")


class Distiller(OneRun):
    """The student, its env and optimizer, the teacher (agents/loop.py's `Learner`);
    `iterate` is one DAgger round."""

    kind: ClassVar[str] = "distill"

    def __init__(self, cfg: TrainConfig, run_dir: Path | None = None):
        cfg.validate()
        torch.manual_seed(cfg.seed)
        self.cfg, self.s, self.comm = cfg, cfg.mode.distill, ONE_PROCESS
        self.env = env = make_env(cfg.task, cfg.num_envs, cfg.sim, cfg.device, cfg.seed,
                                  cfg.env)
        self.device = env.device
        run = load_run(Path(cfg.mode.teacher), num_envs=1, device=cfg.device, sim="cpu")
        self.teacher = Teacher(run, env)
        self.teacher_task = run.cfg.task
        self.ac = ActorCritic(env.obs_dim, env.critic_obs_dim, env.action_dim,
                              cfg.agent_effective).to(env.device)
        self.optimizer = torch.optim.Adam(self.ac.actor.parameters(), lr=self.s.learning_rate)
        self.gen = torch.Generator(device=env.device).manual_seed(cfg.seed + 1)
        self.state = self.ac.actor.initial_state(env.num_envs, env.device)  # [N, S]
        self.iteration = self.env_steps = 0
        env.reset(stagger=cfg.stagger_start)
        self._fresh: Tensor | None = torch.ones(env.num_envs, dtype=torch.bool,
                                                device=env.device)

    def beta(self) -> float:
        return max(0.0, 1.0 - self.iteration / self.s.teacher_iterations)

    @torch.no_grad()
    def collect(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """T steps: the student's observations [T, N, P], the teacher's labels [T, N, A],
        episode starts [T, N] and the student's state [N, S] before the first step."""
        env, actor, beta = self.env, self.ac.actor, self.beta()
        state0, obs, labels, starts = self.state.clone(), [], [], []
        for _ in range(self.s.rollout_steps):
            o = env.obs.policy
            label = self.teacher.act(self._fresh)  # [N, A]
            mean, self.state = actor.step(o, self.state)
            led = torch.rand(env.num_envs, generator=self.gen, device=env.device) < beta
            res = env.step(torch.where(led[:, None], label, mean.clamp(-1.0, 1.0)))
            obs.append(o)
            labels.append(label)
            starts.append(torch.zeros_like(led) if self._fresh is None else self._fresh)
            self._fresh = res.terminated | res.truncated
            self.state = reset_state(self.state, self._fresh)
        self.env_steps += self.s.rollout_steps * env.num_envs
        return torch.stack(obs), torch.stack(labels), torch.stack(starts), state0

    def update(self, obs: Tensor, labels: Tensor, starts: Tensor, state0: Tensor) -> Tensor:
        """Epochs of minibatch regression of clip(mean) onto the labels; the mean loss."""
        t, n = starts.shape
        actor, k = self.ac.actor, self.s.minibatches
        fold(actor.normalizer, obs.flatten(0, 1))  # the states the student visits
        total = torch.zeros((), device=obs.device)
        for _ in range(self.s.epochs):
            perm = torch.randperm(n if actor.memory else t * n, generator=self.gen,
                                  device=obs.device)
            for idx in perm.chunk(k):
                if actor.memory is None:  # rows
                    mean = actor(obs.flatten(0, 1)[idx])
                    want = labels.flatten(0, 1)[idx]
                else:  # whole rollouts of the envs idx
                    mean = actor.sequence(obs[:, idx], state0[idx], starts[:, idx])
                    want = labels[:, idx]
                loss = (mean.clamp(-1.0, 1.0) - want).square().sum(-1).mean()
                self.optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(actor.parameters(), self.s.max_grad_norm)
                self.optimizer.step()
                total += loss.detach()
        return total / (self.s.epochs * k)

    def iterate(self) -> dict[str, float]:
        beta = self.beta()
        loss = self.update(*self.collect())
        self.iteration += 1
        stats = self.env.stats.drain(self.env.reward_terms)  # host syncs: these and vals
        task_m = self.env.iteration_metrics()  # e.g. the terrain curriculum's level
        vals = torch.stack([loss, self.env.nonfinite.fired().float(),
                            *(v.float() for v in task_m.values())]).tolist()
        if vals[1]:  # the student's task made NaN (tasks/nonfinite.py): named now
            raise self.env.nonfinite.error(f" (iteration {self.iteration})")
        return {"iteration": self.iteration, "env_steps": self.env_steps, "beta": beta,
                "distill_loss": vals[0]} | {f"task/{k}": v for k, v in
                                            zip(task_m, vals[2:])} | stats

    # ------------------------------------------------------------------ the run
    def progress(self, m: dict[str, float]) -> str:
        return super().progress(m) + f" | beta {m['beta']:.2f} | loss " \
            f"{m['distill_loss']:.4f}"

    def write_views(self, run_dir: Path, checkpoint: Checkpoint) -> None:
        """distill.json: what the teacher is (config.json's mode has its path and the
        settings), for whoever reads the run."""
        record = {"teacher": self.cfg.mode.teacher, "teacher_task": self.teacher_task,
                  "teacher_terms": [s.term.name for s in self.teacher.layout.slots],
                  "teacher_history": self.teacher.k}
        text = json.dumps(record, indent=1) + "\n"
        if not (run_dir / RECORD).is_file() or (run_dir / RECORD).read_text() != text:
            atomic_write(run_dir / RECORD, lambda p: p.write_text(text))

    def state_dict(self) -> dict:
        """Everything the next iteration reads: a resumed distillation continues bitwise
        on the cpu backend (tests/test_distill.py)."""
        t = self.teacher
        return {"model": self.ac.state_dict(), "optimizer": self.optimizer.state_dict(),
                "env": self.env.state_dict(), "gen": self.gen.get_state(),
                "torch_rng": torch.get_rng_state(), "student_state": self.state,
                "fresh": self._fresh, "teacher_obs": t.obs, "teacher_state": t.acting.state}

    def load_state_dict(self, state: dict) -> None:
        require_keys(state, STATE_KEYS, "the distillation checkpoint's state")
        self.ac.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.env.load_state_dict(state["env"])
        self.gen.set_state(state["gen"])
        torch.set_rng_state(state["torch_rng"])
        self.state, self._fresh = state["student_state"], state["fresh"]
        self.teacher.obs, self.teacher.acting.state = state["teacher_obs"], \
            state["teacher_state"]
