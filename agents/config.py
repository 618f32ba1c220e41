"""Learner configuration: frozen dataclasses whose field docstrings become `--help`.

A2C is not a separate config: `PPOConfig.as_a2c()` returns the PPO settings under which the
PPO update *is* the A2C update (one epoch, one minibatch, no clipping, a fixed rate).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, fields, replace
from typing import Any, Literal


@dataclass(frozen=True)
class PPOConfig:
    rollout_steps: int = 16
    """T: control steps per env per iteration (batch = T * num_envs)"""
    epochs: int = 5
    """passes over each batch"""
    minibatches: int = 4
    """minibatches per epoch; the batch must divide evenly"""
    learning_rate: float = 1e-3
    """Adam step size (initial value when the KL-adaptive schedule is on)"""
    gamma: float = 0.99
    """discount"""
    lam: float = 0.95
    """GAE lambda"""
    clip_low: float = 0.2
    """ratio clip below: 1 - clip_low"""
    clip_high: float = 0.2
    """ratio clip above: 1 + clip_high (set > clip_low for asymmetric clipping)"""
    clip: bool = True
    """clip the surrogate; False gives the plain policy gradient (A2C)"""
    value_clip: float = 0.0
    """clip the value update to +- this around the old prediction (0: off)"""
    value_coef: float = 1.0
    """weight of the value loss"""
    entropy_coef: float = 0.0
    """weight of the entropy bonus"""
    max_grad_norm: float = 1.0
    """global gradient-norm clip"""
    desired_kl: float = 0.01
    """the target KL between the policy before and after an update: the KL-adaptive
    learning rate's (0: a fixed rate); under kl_penalty, the target that steers the
    penalty's weight (the rate then stays fixed); under --algo trpo, the trust region's
    radius delta (no step leaves the mean KL above it)"""
    kl_penalty: float = 0.0
    """PPO's KL-penalized objective (Schulman et al. 2017, sec. 4): the loss gains
    beta * KL(pi_old || pi), beta starting here (0: off) and, after each update, doubled
    where the batch's KL came out above 1.5 x desired_kl and halved below desired_kl / 1.5.
    It adds to the clip; with clip=False it is the paper's penalty-only objective"""
    cg_iters: int = 10
    """--algo trpo: conjugate-gradient iterations solving F x = g (a fixed count: no host
    sync to test the residual)"""
    cg_damping: float = 0.1
    """--algo trpo: F + damping * I, keeping the solve well-posed where the KL is flat"""
    backtracks: int = 10
    """--algo trpo: step sizes tried by the line search, halving from the full natural
    step; the first whose mean KL <= desired_kl and whose surrogate improves is taken,
    none: the policy stays"""
    advantage_norm: Literal["batch", "minibatch", "none"] = "batch"
    """normalize advantages over the whole batch, per minibatch, or not at all"""
    popart: bool = True
    """PopArt value normalization (the critic regresses normalized targets)"""
    value_scale: float = 1.0
    """the critic's output multiplied by this constant: Lab 9's x10, which lets a critic
    whose outputs start near 1 reach values near 100 in fewer updates; the hand-tuned fix
    that PopArt automates, so only with --agent.no-popart"""
    popart_beta: float = 0.02
    """PopArt statistics step size per update"""
    popart_tasks: Literal["per-task", "shared"] = "per-task"
    """several tasks (`trot train TASK_A TASK_B`): each task's value output normalized by
    its own PopArt statistics, and its advantages divided by its own return scale (the
    multi-task PopArt of Hessel et al. 2019); or one set of statistics over all tasks'
    returns (the baseline in which a task of small rewards is drowned out)"""
    obs_norm: bool = True
    """running mean/std observation normalizer (inside the exported policy)"""
    actor_hidden: tuple[int, ...] = (64, 64)
    """actor MLP hidden sizes"""
    critic_hidden: tuple[int, ...] = (64, 64)
    """critic MLP hidden sizes"""
    share_torso: bool = False
    """actor and critic share their hidden layers (needs equal sizes and no privileged obs)"""
    init_log_std: float = 0.0
    """initial log standard deviation of the Gaussian policy"""
    activation: Literal["elu", "tanh", "relu"] = "elu"
    """hidden activation"""
    rnn: Literal["none", "gru", "lstm"] = "none"
    """a recurrent actor: normalized obs -> GRU/LSTM cell -> actor MLP (the critic stays an
    MLP). Updates run whole rollouts of whole envs (minibatches over envs, truncated BPTT
    over the rollout) from the hidden state stored at the rollout's start"""
    rnn_hidden: int = 64
    """recurrent actor: hidden state size H (an LSTM's state is h and c, 2H numbers)"""
    off_policy: Literal["ratio", "ignore", "vtrace"] = "ratio"
    """how the update treats data from a lagging behaviour policy mu (TrainConfig.actor_lag):
    ratio: GAE, surrogate on pi/mu from the stored behaviour log-probs (clipped if `clip`:
    PPO; unclipped: A2C); ignore: GAE, loss -log pi * A (the lag is ignored; needs
    clip=False); vtrace: V-trace critic targets, and -log pi * rho * A (IMPALA) without
    `clip`, or the clipped pi/mu surrogate on unweighted V-trace advantages with `clip`"""
    rho_bar: float = 1.0
    """V-trace: truncation of the importance weights in the TD errors (sets the fixed point)"""
    c_bar: float = 1.0
    """V-trace: truncation of the traces (lam * min(c_bar, pi/mu))"""
    symmetry: Literal["none", "augment"] = "none"
    """augment: each batch also holds its left-right mirror image (the task's Task.mirror:
    observations, critic observations and actions mirrored, advantages, returns and
    behaviour log-probs shared), as in rsl_rl's symmetry extension; doubles the update"""
    update_dtype: Literal["float32", "bfloat16", "auto"] = "float32"
    """precision of the update's forward passes (actor and critic under autocast; weights,
    Adam, gradients' accumulation, losses, the rollout and acting stay float32). bfloat16
    cut go2-flat's update from 0.75 to 0.42 s per iteration on a CPU with AVX512-BF16
    (docs/journal/go2.md); auto: bfloat16 where the CPU (AVX512-BF16, AMX) or GPU has it
    natively, else float32"""

    def as_a2c(self) -> "PPOConfig":
        """A2C is PPO with one epoch over the whole batch as one minibatch and no clipping,
        at a fixed learning rate: the KL-adaptive rule acts from an update's second
        minibatch, and A2C has one (its KL is measured before its only step)."""
        return replace(self, epochs=1, minibatches=1, clip=False, value_clip=0.0,
                       desired_kl=0.0)

    def validate(self, num_envs: int) -> None:
        """Raise ValueError naming the bad field and what is accepted."""
        checks = [
            (self.rollout_steps > 0, "rollout_steps must be > 0"),
            (self.epochs > 0, "epochs must be > 0"),
            (self.minibatches > 0, "minibatches must be > 0"),
            (self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}"),
            (0 < self.gamma <= 1, f"gamma must be in (0, 1], got {self.gamma}"),
            (0 <= self.lam <= 1, f"lam must be in [0, 1], got {self.lam}"),
            (self.clip_low >= 0 and self.clip_high >= 0, "clip_low/clip_high must be >= 0"),
            (self.max_grad_norm > 0, "max_grad_norm must be > 0"),
            (self.kl_penalty >= 0, f"kl_penalty must be >= 0 (0: off), got {self.kl_penalty}"),
            (self.kl_penalty == 0 or self.desired_kl > 0,
             ("kl_penalty steers its weight toward desired_kl, which is 0 here (a2c fixes "
              "it at 0): use --algo ppo with desired_kl > 0")),
            (self.cg_iters > 0 and self.backtracks > 0 and self.cg_damping >= 0,
             (f"cg_iters and backtracks must be > 0 and cg_damping >= 0, got "
              f"{self.cg_iters}, {self.backtracks}, {self.cg_damping}")),
            (0 < self.popart_beta <= 1, "popart_beta must be in (0, 1]"),
            (0 < self.value_scale < float("inf"),
             f"value_scale must be a finite number > 0, got {self.value_scale}"),
            # PopArt's rescaling of the head keeps sigma * head(x) + mu unchanged; a fixed
            # factor on the head would make it change the values it means to preserve
            (self.value_scale == 1.0 or not self.popart,
             (f"value_scale {self.value_scale} scales the critic by hand while popart "
              "normalizes its targets (PopArt automates that scale, and its rescaling of "
              "the head assumes none): give --agent.no-popart with value_scale, or "
              "value_scale 1.0 with popart")),
            (self.off_policy in ("ratio", "ignore", "vtrace"),
             f"off_policy must be ratio, ignore or vtrace, got {self.off_policy!r}"),
            (not (self.off_policy == "ignore" and self.clip),
             "off_policy='ignore' has no importance ratio to clip; set clip=False"),
            (self.rho_bar > 0 and self.c_bar > 0, "rho_bar and c_bar must be > 0"),
            (self.symmetry in ("none", "augment"),
             f"symmetry must be none or augment, got {self.symmetry!r}"),
            (self.update_dtype in ("float32", "bfloat16", "auto"),
             f"update_dtype must be float32, bfloat16 or auto, got {self.update_dtype!r}"),
            (self.rnn in ("none", "gru", "lstm"),
             f"rnn must be none, gru or lstm, got {self.rnn!r}"),
            (self.rnn_hidden > 0, f"rnn_hidden must be > 0, got {self.rnn_hidden}"),
            (self.rnn == "none" or num_envs % self.minibatches == 0,
             f"a recurrent actor's minibatches are groups of whole envs: num_envs "
             f"{num_envs} does not divide into {self.minibatches} minibatches"),
            (self.rnn == "none" or self.symmetry == "none",
             "symmetry='augment' mirrors single observations; a recurrent actor's hidden "
             "state has no mirror image: use rnn='none' or symmetry='none'"),
            (self.rnn == "none" or not self.share_torso,
             "share_torso shares an MLP torso; with rnn the critic stays a separate MLP"),
            ((self.rollout_steps * num_envs) % self.minibatches == 0,
             f"batch of rollout_steps * num_envs = {self.rollout_steps} * {num_envs} = "
             f"{self.rollout_steps * num_envs} does not divide into {self.minibatches} "
             "minibatches"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)


def parse_override(text: str) -> tuple[str, Any]:
    """FIELD=VALUE from a command line (benchmarks' --agent): the value a Python literal
    where it parses as one, else the string."""
    field, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"an agent override is FIELD=VALUE, got {text!r}")
    try:
        return field, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return field, value


def tuned(overrides: tuple[tuple[str, Any], ...] | None) -> PPOConfig:
    """The PPOConfig of a task's registered agent overrides (`register(..., agent={...})`:
    plain data, so tasks never import the agents). Unknown names are refused."""
    names = {f.name for f in fields(PPOConfig)}
    given = dict(overrides or ())
    unknown = sorted(set(given) - names)
    if unknown:
        raise ValueError(f"agent overrides name unknown PPOConfig fields {unknown}; "
                         f"accepted: {', '.join(sorted(names))}")
    return PPOConfig(**given)


@dataclass(frozen=True)
class DistillSettings:
    """Teacher-student distillation (agents/distill.py): DAgger's schedule and the
    student's regression."""

    teacher_iterations: int = 20
    """iterations over which the chance of executing the teacher's action falls from 1 to
    0 (DAgger's beta); the student acts alone after them"""
    rollout_steps: int = 24
    """env steps per iteration"""
    epochs: int = 5
    """passes over each iteration's states"""
    minibatches: int = 4
    """minibatches per epoch"""
    learning_rate: float = 1e-3
    """Adam's learning rate"""
    max_grad_norm: float = 1.0
    """gradient norm clip"""

    def validate(self, num_envs: int) -> None:
        if min(self.teacher_iterations, self.rollout_steps, self.epochs,
               self.minibatches) < 1 or self.learning_rate <= 0:
            raise ValueError("teacher_iterations, rollout_steps, epochs and minibatches must "
                             "be >= 1 and learning_rate > 0")
        if num_envs % self.minibatches:
            raise ValueError(f"num_envs {num_envs} must divide into {self.minibatches} "
                             "minibatches (a recurrent student's minibatch is a set of envs)")
