"""``algo=sac``: Soft Actor-Critic (Haarnoja et al. 2018) with twin Q, target Q and automatic entropy tuning.

Read top to bottom: hyperparameters, networks (two Q networks on ``[observation, action in
[-1, 1]]`` and their Polyak-averaged targets), then :meth:`SAC.gradient_step`: the temperature
step, the critic step on ``r + gamma * (1 - terminal) * (min Q_target(s', a') - alpha log pi(a'|s'))``
(bootstrapping on TIMEOUT and on fragment ends, not on TERMINAL), the actor step on
``alpha log pi(a|s) - min Q(s, a)``, and the target update. The loop around it (replay buffer,
gradient steps per environment step, exploration before ``min_buffer_size``) is
:class:`~corral.rl.off_policy.OffPolicyAlgorithm`. The policy is ``policy=tanh_gaussian``;
evaluation runs its deterministic action ``tanh(mean)``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from corral import hookimpl
from corral.framework.checks import check, checked
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.rl.networks import ACTIVATIONS, flat_dim, mlp
from corral.rl.off_policy import OffPolicyAlgorithm, polyak_update


@dataclass
@checked("algo")
class SACConfig:
    """SAC hyperparameters. Defaults mirror Stable-Baselines3's ``SAC``:

    ``learning_rate`` = SB3 ``learning_rate`` (3e-4, one rate for actor, critics and temperature),
    ``buffer_size`` = ``buffer_size`` (1e6), ``min_buffer_size`` ~ ``learning_starts`` (100; before it
    the policy acts uniformly at random and no gradient step runs; see below), ``batch_size`` =
    ``batch_size`` (256), ``tau`` = ``tau`` (0.005), ``discount`` = ``gamma`` (0.99), ``utd_ratio`` = ``gradient_steps
    / train_freq`` (1 / 1), ``gradient_steps`` (a fixed count per epoch instead) ~ ``gradient_steps``,
    ``target_update_interval`` = ``target_update_interval`` (1), ``auto_entropy`` + ``initial_alpha`` =
    ``ent_coef="auto"`` (starting at 1.0), ``target_entropy`` = ``target_entropy`` ("auto" = -dim(A)),
    ``qf_hidden_sizes`` = ``net_arch`` (256, 256; the actor's widths are ``policy.hidden_sizes``).
    What differs by design: corral's trainer updates the workers' policy once per epoch
    (``trainer.batch_size`` environment steps) instead of after every step, so ``min_buffer_size``
    rounds up to whole epochs of random actions (a run says so when a given value is not a multiple of
    the batch). Its default, null, stands for SB3's 100 rounded up the same way, without the warning
    (the user did not ask for 100 exactly): the first epoch with any ``trainer.batch_size`` of 100 or more.
    """

    discount: float = field(default=0.99, metadata=check(ge=0, le=1, help="discount factor gamma"))
    tau: float = field(default=0.005, metadata=check(gt=0, le=1, help="Polyak coefficient of the target Q networks"))
    learning_rate: float = field(default=3e-4, metadata=check(gt=0, help="Adam learning rate (actor, critics, temperature)"))
    buffer_size: int = field(default=1_000_000, metadata=check(ge=1, help="replay buffer capacity (transitions)"))
    min_buffer_size: Optional[int] = field(
        default=None, metadata=check(ge=0, le_field="buffer_size", help="transitions collected (uniformly random actions) before gradient steps start, in whole epochs of trainer.batch_size steps, rounded up (a run says so when it is not a multiple); null, the default: SB3's learning_starts of 100, rounded up the same way, without the warning")
    )
    batch_size: int = field(default=256, metadata=check(ge=1, help="transitions per gradient step"))
    utd_ratio: float = field(default=1.0, metadata=check(gt=0, applies_if=("gradient_steps", "==", None),
                                                         help="gradient steps per new environment step"))
    gradient_steps: Optional[int] = field(
        default=None, metadata=check(ge=0, help="fixed gradient steps per epoch, overriding utd_ratio when set (0: collect without training)")
    )
    target_update_interval: int = field(default=1, metadata=check(ge=1, help="gradient steps between target updates"))
    auto_entropy: bool = field(default=True, metadata={"help": "learn the temperature alpha to reach target_entropy"})
    initial_alpha: float = field(default=1.0, metadata=check(gt=0, help="starting temperature (fixed one when auto_entropy=false)"))
    target_entropy: Optional[float] = field(default=None, metadata=check(applies_if=("auto_entropy", "==", True),
                                                                       help="entropy target (null: -action_dim)"))
    qf_hidden_sizes: list[int] = field(default_factory=lambda: [256, 256], metadata=check(ge=1, help="Q network widths"))
    qf_activation: str = field(default="relu", metadata=check(choices=tuple(ACTIVATIONS), help="Q network activation"))


class SAC(OffPolicyAlgorithm):
    """Soft Actor-Critic. ``SAC(env_spec, policy, sampler, **SACConfig fields)``; ``policy`` is a
    :class:`~corral.plugins.policies.tanh_gaussian.TanhGaussianPolicy`."""

    policies = ("tanh_gaussian",)
    action_spaces = ("continuous",)
    presets = ("sac_pendulum",)  # named in the composition errors (corral.plugins.validation)
    warmup_actions = "act uniformly at random"

    def __init__(self, env_spec: EnvSpec, policy: Policy, sampler: Sampler | None = None, *, seed: int = 1,
                 **hyperparameters: Any) -> None:
        self.config = c = SACConfig(**hyperparameters)
        if not hasattr(policy, "rsample"):
            raise ConfigError(
                f"algo=sac trains a tanh-squashed Gaussian policy, got {type(policy).__name__}; choose policy=tanh_gaussian"
            )
        if c.target_update_interval < 1:
            raise ConfigError(f"algo.target_update_interval must be >= 1, got {c.target_update_interval}")
        if not 0 < c.tau <= 1:
            raise ConfigError(f"algo.tau must be in (0, 1], got {c.tau}")
        if c.initial_alpha <= 0:
            raise ConfigError(f"algo.initial_alpha must be > 0, got {c.initial_alpha}")
        super().__init__(env_spec, policy, sampler, seed=seed, buffer_size=c.buffer_size,
                         min_buffer_size=c.min_buffer_size, batch_size=c.batch_size, utd_ratio=c.utd_ratio,
                         gradient_steps=c.gradient_steps)
        obs_dim = flat_dim(env_spec.observation_space.shape)
        act_dim = flat_dim(env_spec.action_space.shape)
        self.qf1 = mlp(obs_dim + act_dim, c.qf_hidden_sizes, 1, c.qf_activation)
        self.qf2 = mlp(obs_dim + act_dim, c.qf_hidden_sizes, 1, c.qf_activation)
        self.target_qf1 = copy.deepcopy(self.qf1).requires_grad_(False)
        self.target_qf2 = copy.deepcopy(self.qf2).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(c.initial_alpha)), requires_grad=c.auto_entropy)
        self.target_entropy = float(-act_dim if c.target_entropy is None else c.target_entropy)
        self.modules.update(qf1=self.qf1, qf2=self.qf2, target_qf1=self.target_qf1, target_qf2=self.target_qf2)
        self.optimizers["policy"] = torch.optim.Adam(policy.parameters(), lr=c.learning_rate)  # type: ignore[attr-defined]
        self.optimizers["qf"] = torch.optim.Adam([*self.qf1.parameters(), *self.qf2.parameters()], lr=c.learning_rate)
        if c.auto_entropy:
            self.optimizers["alpha"] = torch.optim.Adam([self.log_alpha], lr=c.learning_rate)
        self.update_exploration(0)

    # ------------------------------------------------------------------ exploration
    def update_exploration(self, env_steps: int) -> None:
        """Uniformly random actions until the buffer holds ``min_buffer_size`` transitions."""
        self.policy.random_actions.fill_(0.0 if self.learning_started else 1.0)  # type: ignore[attr-defined]

    def exploration_stats(self) -> dict[str, float]:
        """The temperature."""
        return {"sac/alpha": float(self.log_alpha.detach().exp())}

    # ------------------------------------------------------------------ one update
    def q_values(self, observations: torch.Tensor, actions: torch.Tensor, target: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Both Q networks (or their targets) on observations and actions in ``[-1, 1]``."""
        x = torch.cat([observations.reshape(observations.shape[0], -1), actions], dim=1)
        q1, q2 = (self.target_qf1, self.target_qf2) if target else (self.qf1, self.qf2)
        return q1(x).squeeze(-1), q2(x).squeeze(-1)

    def gradient_step(self, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """Temperature, critic and actor steps on one minibatch, then the target update."""
        c = self.config
        policy: Any = self.policy
        obs, next_obs = batch["observations"], batch["next_observations"]
        actions = policy.unscale_actions(batch["actions"])
        new_actions, log_prob = policy.rsample(obs, self.torch_rng)

        alpha = self.log_alpha.detach().exp()
        stats: dict[str, float] = {}
        if c.auto_entropy:
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            self.optimizers["alpha"].zero_grad()
            alpha_loss.backward()
            self.optimizers["alpha"].step()
            stats["loss/alpha"] = alpha_loss.item()

        with torch.no_grad():
            next_actions, next_log_prob = policy.rsample(next_obs, self.torch_rng)
            tq1, tq2 = self.q_values(next_obs, next_actions, target=True)
            next_v = torch.min(tq1, tq2) - alpha * next_log_prob
            target_q = batch["rewards"] + c.discount * (1.0 - batch["terminals"]) * next_v
        q1, q2 = self.q_values(obs, actions)
        qf_loss = 0.5 * (F.mse_loss(q1, target_q) + F.mse_loss(q2, target_q))
        self.optimizers["qf"].zero_grad()
        qf_loss.backward()
        self.optimizers["qf"].step()

        pq1, pq2 = self.q_values(obs, new_actions)
        policy_loss = (alpha * log_prob - torch.min(pq1, pq2)).mean()
        self.optimizers["policy"].zero_grad()
        policy_loss.backward()
        self.optimizers["policy"].step()

        if (self.n_updates + 1) % c.target_update_interval == 0:
            polyak_update([*self.qf1.parameters(), *self.qf2.parameters()],
                          [*self.target_qf1.parameters(), *self.target_qf2.parameters()], c.tau)
        stats.update({
            "loss/qf": qf_loss.item(),
            "loss/policy": policy_loss.item(),
            "sac/q_mean": q1.detach().mean().item(),
            "sac/entropy": -log_prob.detach().mean().item(),
        })
        return stats

    # ------------------------------------------------------------------ snapshots
    def extra_state(self) -> dict[str, Any]:
        """The temperature."""
        return {"log_alpha": self.log_alpha.detach().clone()}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        """Restore the temperature."""
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])


def build_sac(config: SACConfig, *, env_spec: EnvSpec, policy: Policy, sampler: Sampler, seed: int) -> SAC:
    """Build SAC from its config."""
    return SAC(env_spec, policy, sampler, seed=seed, **dataclasses.asdict(config))


build_sac.component_class = SAC  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``algo=sac``."""
    register("algo", "sac", build_sac, config=SACConfig,
             help="Soft Actor-Critic: twin Q, target Q, automatic entropy tuning (policy=tanh_gaussian)")


__all__ = ["SAC", "SACConfig", "build_sac"]
