"""``algo=ppo``: Proximal Policy Optimization (Schulman et al. 2017), clipped objective, GAE.

Read top to bottom: hyperparameters, then ``train_once``: advantages with GAE (bootstrapping on
TIMEOUT, not on TERMINAL), then ``n_epochs`` passes of shuffled minibatches over the clipped
surrogate plus value loss and entropy bonus, one Adam optimiser, gradient-norm clipping.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

from corral import hookimpl
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check, checked
from corral.framework.env import EnvSpec
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.rl.on_policy import OnPolicyAlgorithm


@dataclass
@checked("algo")
class PPOConfig:
    """PPO hyperparameters."""

    discount: float = field(default=0.99, metadata=check(ge=0, le=1, help="discount factor gamma"))
    gae_lambda: float = field(default=0.95, metadata=check(ge=0, le=1, help="GAE lambda"))
    learning_rate: float = field(default=3e-4, metadata=check(gt=0, help="Adam learning rate (policy and value)"))
    n_epochs: int = field(default=10, metadata=check(ge=1, help="passes over each batch"))
    minibatch_size: int = field(default=64, metadata=check(ge=2, help="steps per gradient step"))
    clip_range: float = field(default=0.2, metadata=check(gt=0, help="probability-ratio clip epsilon"))
    vf_coef: float = field(default=0.5, metadata=check(ge=0, help="value-loss weight"))
    ent_coef: float = field(default=0.0, metadata=check(ge=0, help="entropy-bonus weight"))
    max_grad_norm: float = field(default=0.5, metadata=check(gt=0, help="gradient-norm clip"))
    normalize_advantages: bool = field(default=True, metadata={"help": "standardise advantages per minibatch"})
    target_kl: Optional[float] = field(default=None, metadata=check(gt=0, help="stop the epoch loop early above this KL"))
    vf_hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata=check(ge=1, help="value network widths"))
    anneal_lr: bool = field(default=False, metadata={
        "help": "decay the learning rate linearly over the run's budget (CleanRL's anneal_lr, SB3's linear schedule): "
                "learning_rate x (1 - the fraction of trainer.max_env_steps, else trainer.n_epochs, done before the "
                "update); logged as ppo/learning_rate"})


class PPO(OnPolicyAlgorithm):
    """PPO with the clipped surrogate objective. ``PPO(env_spec, policy, sampler, **PPOConfig fields)``."""

    def __init__(self, env_spec: EnvSpec, policy: Policy, sampler: Sampler | None = None, *, seed: int = 1,
                 **hyperparameters: Any) -> None:
        self.config = config = PPOConfig(**hyperparameters)
        super().__init__(env_spec, policy, sampler, seed=seed, discount=config.discount,
                         gae_lambda=config.gae_lambda, vf_hidden_sizes=config.vf_hidden_sizes)
        self.optimizers["adam"] = torch.optim.Adam(self.parameters(), lr=config.learning_rate, eps=1e-5)

    def scheduled_learning_rate(self) -> dict[str, float]:
        """Set the optimiser's learning rate for this update (``algo.anneal_lr``: decayed linearly with
        :attr:`training_progress`); return ``{"ppo/learning_rate": lr}``, or ``{}`` without a schedule."""
        if not self.config.anneal_lr:
            return {}
        lr = self.config.learning_rate * (1.0 - self.training_progress)
        for group in self.optimizers["adam"].param_groups:
            group["lr"] = lr
        return {"ppo/learning_rate": lr}

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """Several epochs of minibatch updates on one batch of episodes."""
        c = self.config
        learning_rate = self.scheduled_learning_rate()
        data = self.process(episodes)
        n = len(episodes)
        stats: dict[str, list[float]] = {}
        for _ in range(c.n_epochs):
            order = torch.from_numpy(self.rng.permutation(n))
            stop = False
            for start in self.minibatch_starts("minibatch_size", c.minibatch_size, n):
                idx = order[start : start + c.minibatch_size]
                if len(idx) < 2:
                    continue
                log_prob, entropy = self.policy.log_prob_entropy(  # type: ignore[attr-defined]  # torch side of mlp/gru
                    data["observations"][idx], data["actions"][idx])
                stop = self.clipped_step(data["advantages"][idx], log_prob, data["old_log_prob"][idx],
                                         self.values(data["observations"][idx]), data["returns"][idx], entropy, stats)
                if stop:
                    break
            if stop:
                break
        return {**self.summarize(stats), **learning_rate,
                "ppo/explained_variance": self.explained_variance(data["values"], data["returns"])}

    def clipped_step(self, advantages: torch.Tensor, log_prob: torch.Tensor, old_log_prob: torch.Tensor,
                     values: torch.Tensor, returns: torch.Tensor, entropy: torch.Tensor,
                     stats: dict[str, list[float]]) -> bool:
        """One Adam step on the clipped surrogate + value loss - entropy bonus over one minibatch
        (advantages standardised here when configured); appends its statistics to ``stats``; True
        when the approximate KL passed 1.5 x ``target_kl`` and the epoch loop should stop."""
        c = self.config
        adv = advantages
        if c.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        log_ratio = log_prob - old_log_prob
        ratio = log_ratio.exp()
        pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - c.clip_range, 1 + c.clip_range)).mean()
        vf_loss = 0.5 * (values - returns).pow(2).mean()
        ent = entropy.mean()
        loss = pg_loss + c.vf_coef * vf_loss - c.ent_coef * ent
        optimizer = self.optimizers["adam"]
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.parameters(), c.max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            approx_kl = float(((ratio - 1) - log_ratio).mean())
        for key, value in (("loss/policy", pg_loss.item()), ("loss/value", vf_loss.item()),
                           ("loss/entropy", ent.item()), ("ppo/approx_kl", approx_kl),
                           ("ppo/clip_fraction", float(((ratio - 1).abs() > c.clip_range).float().mean()))):
            stats.setdefault(key, []).append(value)
        return c.target_kl is not None and approx_kl > 1.5 * c.target_kl

    @staticmethod
    def summarize(stats: dict[str, list[float]]) -> dict[str, float]:
        """Means of the statistics :meth:`clipped_step` collected."""
        return {key: float(np.mean(values)) for key, values in stats.items()}


def build_ppo(config: PPOConfig, *, env_spec: EnvSpec, policy: Policy, sampler: Sampler, seed: int) -> PPO:
    """Build PPO from its config."""
    return PPO(env_spec, policy, sampler, seed=seed, **dataclasses.asdict(config))


#: What the factory builds, so corral's composition checks read its ``accepts_fragments``.
build_ppo.component_class = PPO  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``algo=ppo``."""
    register("algo", "ppo", build_ppo, config=PPOConfig, help="Proximal Policy Optimization (clipped, GAE)")
