"""``algo=trpo``: Trust Region Policy Optimization (Schulman et al. 2015), with a GAE value function.

Read top to bottom: hyperparameters, the conjugate-gradient solver, then ``train_once``:

1. advantages with GAE (bootstrapping on TIMEOUT, not on TERMINAL), standardised per batch;
2. the gradient ``g`` of the surrogate ``mean(pi(a|s) / pi_old(a|s) * A)``;
3. the natural-gradient direction ``s ~= F^-1 g`` by conjugate gradient, where ``F v`` is the
   Hessian-vector product of the mean KL divergence ``KL(pi_old || pi)`` (plus ``cg_damping * v``),
   so the Fisher matrix is never formed;
4. the largest step along ``s`` whose quadratic KL estimate is ``max_kl``, shrunk by
   ``backtrack_ratio`` until the measured KL is <= ``max_kl`` and the surrogate improves (after
   ``max_backtracks`` failures the policy is left unchanged);
5. ``vf_epochs`` passes of Adam minibatch steps fitting the value network to the GAE returns.

What it logs: ``loss/policy`` is minus the surrogate at the parameters the update ends with (after
the accepted step; at the old parameters when the line search kept them), i.e. what the step achieved:
at the old parameters the ratio is 1, so the surrogate there is just the mean of the advantages (0
when they are standardised) and says nothing. ``trpo/improvement`` is the surrogate's gain from the
step, so ``loss/policy`` is ``-(mean advantage + trpo/improvement)``: ``-trpo/improvement`` with
standardised advantages. ``loss/value`` is the plain mean squared error (no 0.5) of the last value-function
minibatch, ``loss/entropy`` the mean entropy of the policy that collected the batch.

Hyperparameters mirror sb3-contrib's ``TRPO`` (its defaults, its names in brackets):
``max_kl`` [target_kl] 0.01, ``cg_iters`` [cg_max_steps] 15, ``cg_damping`` [cg_damping] 0.1,
``backtrack_ratio`` [line_search_shrinking_factor] 0.8, ``max_backtracks`` [line_search_max_iter]
10, ``vf_lr`` [learning_rate] 1e-3, ``vf_epochs`` [n_critic_updates] 10, ``vf_minibatch_size``
[batch_size] 128, ``discount`` [gamma] 0.99, ``gae_lambda`` [gae_lambda] 0.95,
``normalize_advantages`` [normalize_advantage] True; sb3's ``n_steps * n_envs`` is corral's
``trainer.batch_size``. Differences: the KL is ``KL(old || new)`` (the paper's; sb3 measures
``KL(new || old)``; both have the same Fisher matrix at the old policy), the Fisher product uses
the whole batch (sb3's ``sub_sampling_factor=1``), and corral's batches are whole episodes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn

from corral import hookimpl
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check, checked
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.rl.on_policy import OnPolicyAlgorithm


@dataclass
@checked("algo")
class TRPOConfig:
    """TRPO hyperparameters (defaults follow sb3-contrib's TRPO; see the module docstring)."""

    discount: float = field(default=0.99, metadata=check(ge=0, le=1, help="discount factor gamma"))
    gae_lambda: float = field(default=0.95, metadata=check(ge=0, le=1, help="GAE lambda"))
    max_kl: float = field(default=0.01, metadata=check(gt=0, help="trust region: largest mean KL(old || new) per update"))
    cg_iters: int = field(default=15, metadata=check(ge=1, help="conjugate-gradient iterations for the natural gradient"))
    cg_damping: float = field(default=0.1, metadata=check(ge=0, help="damping added to the Fisher-vector product"))
    backtrack_ratio: float = field(default=0.8, metadata=check(gt=0, lt=1, help="line search: step shrink factor per try"))
    max_backtracks: int = field(default=10, metadata=check(ge=1, help="line search: tries before keeping the old policy"))
    vf_lr: float = field(default=1e-3, metadata=check(gt=0, help="Adam learning rate of the value function"))
    vf_epochs: int = field(default=10, metadata=check(ge=1, help="passes of value-function minibatch steps per batch"))
    vf_minibatch_size: int = field(default=128, metadata=check(ge=1, help="steps per value-function gradient step"))
    normalize_advantages: bool = field(default=True, metadata={"help": "standardise advantages per batch"})
    vf_hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata=check(ge=1, help="value network widths"))


def conjugate_gradient(matvec: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, n_iters: int,
                       tol: float = 1e-10) -> torch.Tensor:
    """Approximately solve ``A x = b`` for symmetric positive-definite ``A`` given only ``v -> A v``.

    Starts from ``x = 0`` and stops after ``n_iters`` iterations or when the squared residual
    falls below ``tol``.
    """
    x = torch.zeros_like(b)
    r = b.clone()
    p = b.clone()
    rr = torch.dot(r, r)
    for _ in range(n_iters):
        if rr <= tol:
            break
        ap = matvec(p)
        alpha = rr / torch.dot(p, ap)
        x += alpha * p
        r -= alpha * ap
        rr_new = torch.dot(r, r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _assign(params: Sequence[nn.Parameter], flat: torch.Tensor) -> None:
    """Copy a flat vector into ``params`` in place (their storage stays the same)."""
    with torch.no_grad():
        offset = 0
        for p in params:
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n


class TRPO(OnPolicyAlgorithm):
    """TRPO with a GAE value function. ``TRPO(env_spec, policy, sampler, **TRPOConfig fields)``."""

    def __init__(self, env_spec: EnvSpec, policy: Policy, sampler: Sampler | None = None, *, seed: int = 1,
                 **hyperparameters: Any) -> None:
        self.config = config = TRPOConfig(**hyperparameters)
        super().__init__(env_spec, policy, sampler, seed=seed, discount=config.discount,
                         gae_lambda=config.gae_lambda, vf_hidden_sizes=config.vf_hidden_sizes)
        if not hasattr(policy, "distribution"):
            raise ConfigError(f"algo=trpo needs a policy with distribution(observations) (policy=mlp); "
                              f"got {type(policy).__name__}")
        # Adam's eps as in sb3's policies, so the value fit matches sb3's.
        self.optimizers["vf"] = torch.optim.Adam(self.value_function.parameters(), lr=config.vf_lr, eps=1e-5)

    def policy_step(self, observations: torch.Tensor, actions: torch.Tensor, old_log_prob: torch.Tensor,
                    advantages: torch.Tensor) -> dict[str, float]:
        """One natural-gradient step with a backtracking line search inside the trust region.

        Returns ``loss/policy`` (minus the surrogate at the parameters it leaves: the accepted step's,
        or the old ones when no try was accepted) and the ``trpo/*`` line-search statistics, with
        ``trpo/improvement`` the surrogate's gain over the old parameters (0 without a step)."""
        c = self.config
        params = [p for p in self.policy.parameters() if p.requires_grad]  # type: ignore[attr-defined]
        with torch.no_grad():
            old_dist = self.policy.distribution(observations)  # type: ignore[attr-defined]

        def surrogate() -> tuple[torch.Tensor, torch.Tensor]:
            log_prob, _ = self.policy.log_prob_entropy(observations, actions)  # type: ignore[attr-defined]
            return (torch.exp(log_prob - old_log_prob) * advantages).mean(), log_prob

        def mean_kl() -> torch.Tensor:
            new_dist = self.policy.distribution(observations)  # type: ignore[attr-defined]
            return torch.distributions.kl_divergence(old_dist, new_dist).mean()

        objective, _ = surrogate()
        grad = _flat(torch.autograd.grad(objective, params))
        kl_grad = _flat(torch.autograd.grad(mean_kl(), params, create_graph=True))

        def fisher_vector(v: torch.Tensor) -> torch.Tensor:
            hv = _flat(torch.autograd.grad(torch.dot(kl_grad, v), params, retain_graph=True))
            return hv + c.cg_damping * v

        direction = conjugate_gradient(fisher_vector, grad, c.cg_iters)
        shs = 0.5 * torch.dot(direction, fisher_vector(direction))
        old_params = _flat([p.detach() for p in params]).clone()
        old_objective = objective.item()
        stats = {"loss/policy": -old_objective, "trpo/kl": 0.0, "trpo/step_fraction": 0.0,
                 "trpo/line_search_tries": float(c.max_backtracks), "trpo/improvement": 0.0}
        if not (torch.isfinite(shs) and shs > 0):
            return stats
        full_step = torch.sqrt(2 * c.max_kl / shs) * direction
        for i in range(c.max_backtracks):
            fraction = c.backtrack_ratio**i
            _assign(params, old_params + fraction * full_step)
            with torch.no_grad():
                new_objective = surrogate()[0].item()
                kl = mean_kl().item()
            improvement = new_objective - old_objective
            if math.isfinite(kl) and kl <= c.max_kl and improvement > 0:
                return {"loss/policy": -new_objective, "trpo/kl": kl, "trpo/step_fraction": fraction,
                        "trpo/line_search_tries": float(i + 1), "trpo/improvement": improvement}
        _assign(params, old_params)
        return stats

    def fit_value_function(self, observations: torch.Tensor, returns: torch.Tensor) -> float:
        """``vf_epochs`` passes of shuffled minibatch Adam steps on the squared error; the last minibatch's
        mean squared error (no 0.5, unlike VPG's and PPO's ``loss/value``)."""
        c = self.config
        optimizer = self.optimizers["vf"]
        n = observations.shape[0]
        loss = torch.zeros(())
        for _ in range(c.vf_epochs):
            order = torch.from_numpy(self.rng.permutation(n))
            for start in self.minibatch_starts("vf_minibatch_size", c.vf_minibatch_size, n):
                idx = order[start : start + c.vf_minibatch_size]
                loss = (self.values(observations[idx]) - returns[idx]).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        return loss.item()

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """A trust-region policy step, then the value-function fit (the logged values: module docstring)."""
        data = self.process(episodes)
        adv = data["advantages"]
        if self.config.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        obs, actions = data["observations"], data["actions"]
        with torch.no_grad():
            entropy = self.policy.log_prob_entropy(obs, actions)[1]  # type: ignore[attr-defined]
        stats = self.policy_step(obs, actions, data["old_log_prob"], adv)
        vf_loss = self.fit_value_function(obs, data["returns"])
        return {
            "loss/policy": stats.pop("loss/policy"),
            "loss/value": vf_loss,
            "loss/entropy": float(entropy.mean()),
            **stats,
            "trpo/explained_variance": self.explained_variance(data["values"], data["returns"]),
        }


def build_trpo(config: TRPOConfig, *, env_spec: EnvSpec, policy: Policy, sampler: Sampler, seed: int) -> TRPO:
    """Build TRPO from its config."""
    return TRPO(env_spec, policy, sampler, seed=seed, **dataclasses.asdict(config))


#: What the factory builds, so corral's composition checks read its ``accepts_fragments``.
build_trpo.component_class = TRPO  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``algo=trpo``."""
    register("algo", "trpo", build_trpo, config=TRPOConfig,
             help="Trust Region Policy Optimization (conjugate gradient, KL line search, GAE)")
