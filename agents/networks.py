"""Actor-critic MLPs. The observation normalizer lives inside the actor (and the critic) so
that the exported policy carries it; the critic's output layer is PopArt-normalized."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from trot.agents.config import PPOConfig
from trot.agents.distributed import ONE_PROCESS, Comm
from trot.agents.normalization import PopArt, RunningMeanStd

# ELU and ReLU in place: each follows a Linear whose backward does not need its output, and
# their own backward then reads their output (no second exp), with one [B, H] buffer less
_ACT = {"elu": lambda: nn.ELU(inplace=True), "tanh": nn.Tanh,
        "relu": lambda: nn.ReLU(inplace=True)}
NARROW_INPUT = 16  # below this many input features, Linear takes the fast weight gradient


class _NarrowLinear(torch.autograd.Function):
    """x @ W^T + b whose weight gradient is computed as (x^T g)^T. autograd computes
    g^T x, and MKL runs that product 3-8x slower when x has few columns (a first layer on
    a 6-number cartpole observation); the transposed product is the same numbers."""

    generate_vmap_rule = True  # K stacked seeds (agents/seeds.py) run it under vmap

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:  # [B, I] -> [B, O]
        return torch.addmm(bias, x, weight.t())

    @staticmethod
    def setup_context(ctx, inputs: tuple[Tensor, Tensor, Tensor], output: Tensor) -> None:
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor | None, Tensor, Tensor]:  # g [B, O]
        x, weight = ctx.saved_tensors
        gx = g @ weight if ctx.needs_input_grad[0] else None
        return gx, (x.t() @ g).t(), g.sum(0)


class Linear(nn.Linear):
    """nn.Linear, with the fast weight gradient for narrow inputs while training (export
    and inference run the plain nn.Linear graph; so does autocast, whose bf16 gradient
    would not meet the float32 weight in _NarrowLinear's backward)."""

    def forward(self, x: Tensor) -> Tensor:
        if (torch.is_grad_enabled() and self.in_features < NARROW_INPUT and x.dim() == 2
                and self.bias is not None and not torch.is_autocast_enabled(x.device.type)):
            return _NarrowLinear.apply(x, self.weight, self.bias)
        return super().forward(x)


def mlp(in_dim: int, hidden: tuple[int, ...], activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [Linear(in_dim, h), _ACT[activation]()]
        in_dim = h
    return nn.Sequential(*layers)


def _init_linear(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class Memory(nn.Module):
    """One GRU or LSTM cell step. Its state is one tensor [B, S]: h (GRU, S = H), or h and
    c side by side (LSTM, S = 2H), so that storage, resets and checkpoints treat both alike."""

    def __init__(self, kind: str, in_dim: int, hidden: int):
        super().__init__()
        self.kind, self.hidden = kind, hidden
        cell = {"gru": nn.GRUCell, "lstm": nn.LSTMCell}[kind]
        self.cell = cell(in_dim, hidden)
        self.size = hidden * (2 if kind == "lstm" else 1)

    def forward(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, I], state [B, S] -> output h [B, H], new state [B, S]."""
        if self.kind == "gru":
            h = self.cell(x, state)
            return h, h
        h, c = self.cell(x, (state[:, :self.hidden], state[:, self.hidden:]))
        return h, torch.cat([h, c], 1)


def reset_state(state: Tensor, done: Tensor) -> Tensor:
    """state [B, S] with the rows of ended episodes (done [B] bool) zeroed: the next step
    starts a new episode from the zero state, the rule the export states."""
    return state.masked_fill(done[:, None], 0.0)


class Actor(nn.Module):
    """Gaussian policy with a state-independent log-std: normalizer -> (memory) -> MLP ->
    mean. `step` is the deterministic action (the mean) and the next memory state, the
    graph that export writes to ONNX after clipping; without memory the state is [B, 0]."""

    def __init__(self, obs_dim: int, action_dim: int, cfg: PPOConfig):
        super().__init__()
        self.normalizer = RunningMeanStd(obs_dim) if cfg.obs_norm else nn.Identity()
        self.memory = Memory(cfg.rnn, obs_dim, cfg.rnn_hidden) if cfg.rnn != "none" else None
        torso_in = cfg.rnn_hidden if self.memory is not None else obs_dim
        self.torso = mlp(torso_in, cfg.actor_hidden, cfg.activation)
        width = cfg.actor_hidden[-1] if cfg.actor_hidden else torso_in
        self.mean = _init_linear(Linear(width, action_dim), 0.01)
        self.log_std = nn.Parameter(torch.full((action_dim,), cfg.init_log_std))

    @property
    def state_size(self) -> int:
        return 0 if self.memory is None else self.memory.size

    def initial_state(self, n: int, device: torch.device | None = None) -> Tensor:
        """The zero state of n new episodes: [n, S]."""
        return torch.zeros(n, self.state_size, device=device or self.log_std.device)

    def forward(self, obs: Tensor) -> Tensor:  # [B, P] -> [B, A]; memoryless actors only
        if self.memory is not None:
            raise TypeError("a recurrent actor needs its state: use step(obs, state)")
        return self.mean(self.torso(self.normalizer(obs)))

    def step(self, obs: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """obs [B, P], state [B, S] -> mean [B, A], next state [B, S]."""
        if self.memory is None:
            return self(obs), state
        h, state = self.memory(self.normalizer(obs), state)
        return self.mean(self.torso(h)), state

    def sequence(self, obs: Tensor, state: Tensor, starts: Tensor) -> Tensor:
        """Means [T, B, A] along rollouts: obs [T, B, P] from state [B, S], the state zeroed
        before each step t where starts[t] [B] (an episode began there). Gradients flow
        through the whole rollout and stop at its start (truncated BPTT)."""
        if self.memory is None:
            return self(obs)
        means = []
        for t in range(obs.shape[0]):
            mean, state = self.step(obs[t], reset_state(state, starts[t]))
            means.append(mean)
        return torch.stack(means)

    def sample(self, obs: Tensor, gen: torch.Generator | None = None,
               state: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Actions [B, A] = mean + std * eps, their log-probs [B], the means [B, A] and the
        next state [B, S] (`state` None: a memoryless actor). eps is drawn from `gen` (the
        trainer's checkpointed noise generator; default torch's global one), then
        `sample_with` does the rest."""
        if state is None:
            state = self.initial_state(obs.shape[0], obs.device)
        return self.sample_with(obs, self.noise(obs.shape[0], gen), state)

    def noise(self, n: int, gen: torch.Generator | None = None) -> Tensor:
        """The standard normal draws eps [n, A] of n actions, from `gen`."""
        return torch.randn((n, self.log_std.shape[0]), dtype=self.log_std.dtype,
                           device=self.log_std.device, generator=gen)

    def sample_with(self, obs: Tensor, eps: Tensor, state: Tensor
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """`sample` given its noise eps [B, A]: no random draw, so ready for graph capture.
        The log-prob comes from eps directly: -|eps|^2 / 2 - sum(log std) - A log(2 pi) / 2,
        a few ops fewer per control step than torch.distributions.Normal."""
        mean, state = self.step(obs, state)
        action = torch.addcmul(mean, eps, self.log_std.exp())
        const = self.log_std.sum() + 0.5 * math.log(2 * math.pi) * mean.shape[-1]
        return action, eps.square().sum(-1).mul_(-0.5).sub_(const), mean, state

    def dist_of(self, mean: Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean),
                                          validate_args=False)  # NaN guard handles it

    def dist(self, obs: Tensor) -> torch.distributions.Normal:
        return self.dist_of(self(obs))


class Acting:
    """Deterministic acting for evaluation loops: clip(mean) with the memory carried
    between calls and zeroed where episodes end (`ended`)."""

    def __init__(self, actor: Actor, n: int, device: torch.device):
        self.actor, self.state = actor, actor.initial_state(n, device)

    @torch.no_grad()
    def __call__(self, obs: Tensor) -> Tensor:  # [N, P] -> [N, A]
        mean, self.state = self.actor.step(obs, self.state)
        return mean.clamp(-1.0, 1.0)

    def ended(self, done: Tensor) -> None:  # done [N] bool
        self.state = reset_state(self.state, done)


class Critic(nn.Module):
    """V(s). `forward` is the PopArt-normalized value; `value` the value in reward units.
    With `tasks` T > 1 (agents/multitask.py) the head has one output per task, each with
    its own PopArt statistics, and a row's value is its task's output: the task is the
    one-hot index in the last T columns of the critic observation (tasks/multi.py)."""

    def __init__(self, obs_dim: int, cfg: PPOConfig, torso: nn.Sequential | None = None,
                 normalizer: nn.Module | None = None, tasks: int = 1):
        super().__init__()
        if normalizer is None:
            normalizer = RunningMeanStd(obs_dim) if cfg.obs_norm else nn.Identity()
        self.normalizer = normalizer
        self.torso = torso if torso is not None else mlp(obs_dim, cfg.critic_hidden,
                                                          cfg.activation)
        hidden = cfg.actor_hidden if torso is not None else cfg.critic_hidden
        width = hidden[-1] if hidden else obs_dim
        self.tasks = tasks
        self.head = _init_linear(Linear(width, tasks), 1.0)
        self.popart = PopArt(self.head, cfg.popart_beta) if cfg.popart else None
        # a plain float, not a buffer: a setting of the run (its config), not a learned state
        self.value_scale = float(cfg.value_scale)

    def outputs(self, obs: Tensor) -> Tensor:  # [B, C] -> [B, T], normalized
        out = self.head(self.torso(self.normalizer(obs)))
        return out if self.value_scale == 1.0 else out * self.value_scale

    def task_of(self, obs: Tensor) -> Tensor:  # [B, C] -> [B, T], the one-hot task index
        return obs[:, -self.tasks:]

    def forward(self, obs: Tensor) -> Tensor:  # [B, C] -> [B]
        if self.tasks == 1:
            return self.outputs(obs).squeeze(-1)
        return (self.outputs(obs) * self.task_of(obs)).sum(-1)

    def value(self, obs: Tensor) -> Tensor:  # [B, C] -> [B], unnormalized
        if self.tasks == 1:
            v = self(obs)
            return self.popart.denormalize(v) if self.popart is not None else v
        v = self.outputs(obs)  # [B, T]
        v = self.popart.denormalize(v) if self.popart is not None else v
        return (v * self.task_of(obs)).sum(-1)

    def normalize_targets(self, x: Tensor, obs: Tensor) -> Tensor:
        """x [B] in reward units -> normalized by the PopArt statistics of each row's task
        (obs [B, C], its critic observation)."""
        if self.popart is None:
            return x
        if self.tasks == 1:
            return self.popart.normalize(x)
        return (self.popart.normalize(x[:, None]) * self.task_of(obs)).sum(-1)


class ActorCritic(nn.Module):
    def __init__(self, obs_dim: int, critic_obs_dim: int, action_dim: int, cfg: PPOConfig,
                 tasks: int = 1):
        """tasks: T > 1 trains one policy on T tasks whose observations end in the one-hot
        task index (tasks/multi.py); the critic then has a value output per task."""
        super().__init__()
        self.actor = Actor(obs_dim, action_dim, cfg)
        if cfg.share_torso:
            if critic_obs_dim != obs_dim:
                raise ValueError("share_torso needs the critic to see the policy observation; "
                                 f"this task's critic has {critic_obs_dim} dims, policy {obs_dim}")
            self.critic = Critic(obs_dim, cfg, self.actor.torso, self.actor.normalizer, tasks)
        else:
            self.critic = Critic(critic_obs_dim, cfg, tasks=tasks)
        self.shared = cfg.share_torso

    @torch.no_grad()
    def update_normalizers(self, obs: Tensor, critic_obs: Tensor, comm: Comm = ONE_PROCESS,
                           keep_policy: bool = False) -> None:
        """obs [B, P], critic_obs [B, C]: fold a batch (of every rank) into the statistics,
        outlier rows left out (RunningMeanStd.inliers, on each rank's own rows).
        keep_policy: the actor's first layer absorbs its normalizer's move, so the policy's
        means stay as they were (inputs within the normalizer's clip): TRPO's trust region
        then bounds all of an iteration's policy change, not only its step's."""
        norm = self.actor.normalizer
        if isinstance(norm, RunningMeanStd):
            before = (norm.mean.clone(), norm.std())
            seen = norm.count > 0  # 0-d: the first fold sets the scale, nothing to keep
            fold(norm, obs, comm)
            if keep_policy:
                absorb_shift(first_linear(self.actor), *before, norm.mean, norm.std(), seen)
            if not self.shared:
                fold(self.critic.normalizer, critic_obs, comm)


def first_linear(actor: Actor) -> nn.Linear:
    """The layer a memoryless actor's normalized observation enters."""
    if actor.memory is not None:
        raise ValueError("a recurrent actor's observation enters its memory cell")
    return actor.torso[0] if len(actor.torso) else actor.mean


@torch.no_grad()
def absorb_shift(layer: nn.Linear, mean0: Tensor, std0: Tensor, mean1: Tensor,
                 std1: Tensor, where: Tensor) -> None:
    """Rescale `layer` (W, b), fed (x - mean) / std, so that its output on any x is the same
    under the statistics (mean1, std1) [I] as it was under (mean0, std0) [I], where `where`
    (0-d bool, on the device: no host sync): W' = W diag(std1 / std0),
    b' = b + W (mean1 - mean0) / std0."""
    w = layer.weight.double()  # [O, I]
    shift = torch.where(where, w @ ((mean1 - mean0) / std0), 0.0)  # [O]
    scale = torch.where(where, std1 / std0, 1.0)  # [I]
    layer.bias.add_(shift.to(layer.bias.dtype))
    layer.weight.mul_(scale.to(layer.weight.dtype))


def fold(norm: nn.Module, x: Tensor, comm: Comm = ONE_PROCESS) -> None:
    """Fold a batch x [B, D] (of every rank) into a RunningMeanStd normalizer, outlier rows
    left out (RunningMeanStd.inliers, on each rank's own rows); nothing for another one."""
    if isinstance(norm, RunningMeanStd):
        norm.merge(*comm.moments(x, norm.inliers(x)))


def gaussian_kl(mu0: Tensor, log_std0: Tensor, mu1: Tensor, log_std1: Tensor) -> Tensor:
    """KL(N0 || N1) summed over the action dimension: [B, A] -> [B]."""
    var0, var1 = (2 * log_std0).exp(), (2 * log_std1).exp()
    kl = log_std1 - log_std0 + (var0 + (mu0 - mu1).square()) / (2 * var1) - 0.5
    return kl.sum(-1)

