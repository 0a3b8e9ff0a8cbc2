"""``algo=vpg``: vanilla policy gradient (REINFORCE with a learned baseline and GAE).

One full-batch policy-gradient step per epoch on ``-log pi(a|s) * A``, then ``vf_iters`` full-batch
steps fitting the value function to the GAE returns (as in Spinning Up's VPG).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

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
class VPGConfig:
    """VPG hyperparameters."""

    discount: float = field(default=0.99, metadata=check(ge=0, le=1, help="discount factor gamma"))
    gae_lambda: float = field(default=0.97, metadata=check(ge=0, le=1, help="GAE lambda"))
    policy_lr: float = field(default=1e-2, metadata=check(gt=0, help="Adam learning rate of the policy"))
    vf_lr: float = field(default=1e-3, metadata=check(gt=0, help="Adam learning rate of the value function"))
    vf_iters: int = field(default=80, metadata=check(ge=0, help="value-function steps per epoch"))
    ent_coef: float = field(default=0.0, metadata=check(ge=0, help="entropy-bonus weight"))
    normalize_advantages: bool = field(default=True, metadata={"help": "standardise advantages per batch"})
    vf_hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata=check(ge=1, help="value network widths"))


class VPG(OnPolicyAlgorithm):
    """Vanilla policy gradient. ``VPG(env_spec, policy, sampler, **VPGConfig fields)``."""

    def __init__(self, env_spec: EnvSpec, policy: Policy, sampler: Sampler | None = None, *, seed: int = 1,
                 **hyperparameters: Any) -> None:
        self.config = config = VPGConfig(**hyperparameters)
        super().__init__(env_spec, policy, sampler, seed=seed, discount=config.discount,
                         gae_lambda=config.gae_lambda, vf_hidden_sizes=config.vf_hidden_sizes)
        self.optimizers["policy"] = torch.optim.Adam(self.policy.parameters(), lr=config.policy_lr)  # type: ignore[attr-defined]
        self.optimizers["vf"] = torch.optim.Adam(self.value_function.parameters(), lr=config.vf_lr)

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """One policy-gradient step, then the value-function fit."""
        c = self.config
        data = self.process(episodes)
        adv = data["advantages"]
        if c.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        log_prob, entropy = self.policy.log_prob_entropy(data["observations"], data["actions"])  # type: ignore[attr-defined]
        pg_loss = -(log_prob * adv).mean() - c.ent_coef * entropy.mean()
        self.optimizers["policy"].zero_grad()
        pg_loss.backward()
        self.optimizers["policy"].step()
        vf_loss = None
        for _ in range(c.vf_iters):
            vf_loss = 0.5 * (self.values(data["observations"]) - data["returns"]).pow(2).mean()
            self.optimizers["vf"].zero_grad()
            vf_loss.backward()
            self.optimizers["vf"].step()
        if vf_loss is None:  # vf_iters=0: the value function is not fitted; its loss is still worth logging
            with torch.no_grad():
                vf_loss = 0.5 * (self.values(data["observations"]) - data["returns"]).pow(2).mean()
        return {
            "loss/policy": pg_loss.item(),
            "loss/value": vf_loss.item(),
            "loss/entropy": entropy.mean().item(),
            "vpg/explained_variance": self.explained_variance(data["values"], data["returns"]),
        }


def build_vpg(config: VPGConfig, *, env_spec: EnvSpec, policy: Policy, sampler: Sampler, seed: int) -> VPG:
    """Build VPG from its config."""
    return VPG(env_spec, policy, sampler, seed=seed, **dataclasses.asdict(config))


#: What the factory builds, so corral's composition checks read its ``accepts_fragments``.
build_vpg.component_class = VPG  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``algo=vpg``."""
    register("algo", "vpg", build_vpg, config=VPGConfig, help="vanilla policy gradient with GAE baseline")
