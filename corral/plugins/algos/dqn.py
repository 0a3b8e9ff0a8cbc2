"""``algo=dqn``: Deep Q-Network (Mnih et al. 2015) with double Q-learning (van Hasselt et al. 2016).

Read top to bottom: hyperparameters, the epsilon schedule (linear from ``exploration_initial_eps``
to ``exploration_final_eps`` over ``exploration_steps`` environment steps, 1 until the buffer holds
``min_buffer_size`` transitions), the target network update (every ``target_update_interval``
environment steps, Polyak with ``tau``; ``tau=1`` is the classic hard copy), then
:meth:`DQN.gradient_step`: the Huber loss between ``Q(s, a)`` and
``r + gamma * (1 - terminal) * Q_target(s', argmax_a' Q(s', a'))`` (double DQN; with ``double=false``
``max_a' Q_target(s', a')``), bootstrapping on TIMEOUT and fragment ends, not on TERMINAL. Discrete
actions only; the policy is ``policy=qnet`` (``policy.dueling=true`` for the dueling head), and
evaluation acts greedily.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import torch
import torch.nn.functional as F

from corral import hookimpl
from corral.framework.checks import check, checked
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.rl.off_policy import OffPolicyAlgorithm, polyak_update


@dataclass
@checked("algo")
class DQNConfig:
    """DQN hyperparameters. Defaults mirror Stable-Baselines3's ``DQN``:

    ``learning_rate`` = SB3 ``learning_rate`` (1e-4), ``buffer_size`` = ``buffer_size`` (1e6),
    ``min_buffer_size`` ~ ``learning_starts`` (100; see below), ``batch_size`` = ``batch_size`` (32),
    ``tau`` = ``tau`` (1.0), ``discount`` = ``gamma`` (0.99), ``utd_ratio`` = ``gradient_steps / train_freq``
    (1 / 4), ``gradient_steps`` ~ ``gradient_steps`` per epoch, ``target_update_interval`` =
    ``target_update_interval`` (10,000 environment steps), ``exploration_initial_eps`` /
    ``exploration_final_eps`` = the same names (1.0 / 0.05), ``exploration_steps`` =
    ``exploration_fraction * total_timesteps`` (0.1 * 100,000), ``max_grad_norm`` = ``max_grad_norm``
    (10), Huber loss as SB3's ``smooth_l1_loss``; the network widths are ``policy.hidden_sizes``
    (SB3's ``net_arch``, 64, 64). SB3's DQN is not double DQN: ``double=false`` gives its targets.
    One difference stays: ``policy=qnet`` initialises its layers orthogonally (``corral.rl.networks.mlp``),
    SB3 keeps PyTorch's default ``nn.Linear`` initialisation. And the workers' policy (its epsilon too)
    changes once per epoch (``trainer.batch_size`` steps), so ``min_buffer_size`` rounds up to whole
    epochs at epsilon 1 (a run says so when a given value is not a multiple of the batch). Its default,
    null, stands for SB3's 100 rounded up the same way, without the warning (the user did not ask for
    100 exactly): the first epoch with any ``trainer.batch_size`` of 100 or more.
    """

    discount: float = field(default=0.99, metadata=check(ge=0, le=1, help="discount factor gamma"))
    learning_rate: float = field(default=1e-4, metadata=check(gt=0, help="Adam learning rate"))
    buffer_size: int = field(default=1_000_000, metadata=check(ge=1, help="replay buffer capacity (transitions)"))
    min_buffer_size: Optional[int] = field(
        default=None, metadata=check(ge=0, le_field="buffer_size", help="transitions collected (epsilon = 1) before gradient steps start, in whole epochs of trainer.batch_size steps, rounded up (a run says so when it is not a multiple); null, the default: SB3's learning_starts of 100, rounded up the same way, without the warning")
    )
    batch_size: int = field(default=32, metadata=check(ge=1, help="transitions per gradient step"))
    utd_ratio: float = field(default=0.25, metadata=check(gt=0, applies_if=("gradient_steps", "==", None),
                                                         help="gradient steps per new environment step"))
    gradient_steps: Optional[int] = field(
        default=None, metadata=check(ge=0, help="fixed gradient steps per epoch, overriding utd_ratio when set (0: collect without training)")
    )
    tau: float = field(default=1.0, metadata=check(gt=0, le=1, help="target update coefficient (1: hard copy)"))
    target_update_interval: int = field(default=10_000, metadata=check(ge=1, help="environment steps between target updates"))
    exploration_initial_eps: float = field(default=1.0, metadata=check(ge=0, le=1, help="epsilon at the start of the schedule"))
    exploration_final_eps: float = field(default=0.05, metadata=check(ge=0, le=1, help="epsilon at the end of the schedule"))
    exploration_steps: int = field(
        default=10_000, metadata=check(ge=0, help="environment steps over which epsilon falls linearly")
    )
    max_grad_norm: float = field(default=10.0, metadata=check(gt=0, help="gradient-norm clip"))
    double: bool = field(default=True, metadata={"help": "double DQN targets (false: max over the target network)"})


class DQN(OffPolicyAlgorithm):
    """Double DQN. ``DQN(env_spec, policy, sampler, **DQNConfig fields)``; ``policy`` is a
    :class:`~corral.plugins.policies.qnet.QNetworkPolicy`."""

    policies = ("qnet",)
    action_spaces = ("discrete",)
    presets = ("dqn_cartpole",)  # named in the composition errors (corral.plugins.validation)
    warmup_actions = "act at epsilon 1 (uniformly random actions)"

    def __init__(self, env_spec: EnvSpec, policy: Policy, sampler: Sampler | None = None, *, seed: int = 1,
                 **hyperparameters: Any) -> None:
        self.config = c = DQNConfig(**hyperparameters)
        if not hasattr(policy, "q_values"):
            raise ConfigError(f"algo=dqn trains a Q-network policy, got {type(policy).__name__}; choose policy=qnet")
        if not env_spec.is_discrete:
            raise ConfigError(
                f"algo=dqn needs a Discrete action space, got {env_spec.action_space}; "
                "for continuous actions use algo=sac policy=tanh_gaussian"
            )
        if c.target_update_interval < 1:
            raise ConfigError(f"algo.target_update_interval must be >= 1, got {c.target_update_interval}")
        if not 0 < c.tau <= 1:
            raise ConfigError(f"algo.tau must be in (0, 1], got {c.tau}")
        for name in ("exploration_initial_eps", "exploration_final_eps"):
            if not 0 <= getattr(c, name) <= 1:
                raise ConfigError(f"algo.{name} must be in [0, 1], got {getattr(c, name)}")
        super().__init__(env_spec, policy, sampler, seed=seed, buffer_size=c.buffer_size,
                         min_buffer_size=c.min_buffer_size, batch_size=c.batch_size, utd_ratio=c.utd_ratio,
                         gradient_steps=c.gradient_steps)
        self.target = copy.deepcopy(policy).requires_grad_(False)  # type: ignore[attr-defined]
        self.modules["target"] = self.target
        self.optimizers["q"] = torch.optim.Adam(policy.parameters(), lr=c.learning_rate)  # type: ignore[attr-defined]
        self.update_exploration(0)

    # ------------------------------------------------------------------ exploration and targets
    def epsilon(self, env_steps: int) -> float:
        """The scheduled exploration rate after ``env_steps`` environment steps."""
        c = self.config
        if not self.learning_started:
            return 1.0
        frac = min(1.0, env_steps / c.exploration_steps) if c.exploration_steps > 0 else 1.0
        return c.exploration_initial_eps + frac * (c.exploration_final_eps - c.exploration_initial_eps)

    def warmup_note(self, steps: int) -> str:
        """An ``exploration_initial_eps`` below 1 is not what the first ``steps`` steps act with."""
        eps = self.config.exploration_initial_eps
        return (f", and the epsilon schedule (algo.exploration_initial_eps={eps}) starts only after them"
                if eps < 1 else "")

    def update_exploration(self, env_steps: int) -> None:
        """Write the scheduled epsilon into the policy (it travels in the next agent update)."""
        self.policy.epsilon.fill_(self.epsilon(env_steps))  # type: ignore[attr-defined]

    def exploration_stats(self) -> dict[str, float]:
        """The current epsilon."""
        return {"dqn/epsilon": float(self.policy.epsilon)}  # type: ignore[attr-defined]

    def before_gradient_steps(self, env_steps_before: int, env_steps_after: int) -> None:
        """Update the target network once per ``target_update_interval`` environment steps passed."""
        k = self.config.target_update_interval
        crossed = env_steps_after // k - env_steps_before // k
        n_updates = min(crossed, 1) if self.config.tau == 1.0 else crossed  # repeated hard copies are one copy
        for _ in range(n_updates):
            polyak_update(list(self.policy.parameters()), list(self.target.parameters()),  # type: ignore[attr-defined]
                          self.config.tau)

    # ------------------------------------------------------------------ one update
    def gradient_step(self, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """One Huber-loss step towards the (double) DQN target."""
        c = self.config
        policy: Any = self.policy
        actions = batch["actions"].reshape(-1, 1).long()
        with torch.no_grad():
            next_target = self.target.q_values(batch["next_observations"])
            if c.double:
                best = policy.q_values(batch["next_observations"]).argmax(dim=1, keepdim=True)
                next_q = next_target.gather(1, best).squeeze(1)
            else:
                next_q = next_target.max(dim=1).values
            target = batch["rewards"] + c.discount * (1.0 - batch["terminals"]) * next_q
        q = policy.q_values(batch["observations"]).gather(1, actions).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        optimizer = self.optimizers["q"]
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), c.max_grad_norm)
        optimizer.step()
        return {"loss/q": loss.item(), "dqn/q_mean": q.detach().mean().item()}


def build_dqn(config: DQNConfig, *, env_spec: EnvSpec, policy: Policy, sampler: Sampler, seed: int) -> DQN:
    """Build DQN from its config."""
    return DQN(env_spec, policy, sampler, seed=seed, **dataclasses.asdict(config))


build_dqn.component_class = DQN  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``algo=dqn``."""
    register("algo", "dqn", build_dqn, config=DQNConfig,
             help="double DQN with target network and epsilon schedule, Discrete actions (policy=qnet)")


__all__ = ["DQN", "DQNConfig", "build_dqn"]
