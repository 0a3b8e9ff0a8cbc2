"""``algo=reinforce``: REINFORCE with a learned value baseline (Williams 1992), read top to bottom.

Each epoch: the discounted return-to-go ``G_t`` of every step (an episode cut by a time limit,
TIMEOUT, bootstraps from the value of its last observation; a TERMINAL one does not); the
advantage ``G_t - V(s_t)``; one gradient step on ``-mean(log pi(a_t|s_t) * advantage)``; then
``vf_iters`` steps fitting ``V`` to ``G_t``.

What an algorithm plugin relies on, and how this one keeps corral's rules:

- **The policy's torch side.** corral builds the policy (``policy=mlp`` here) and hands it over.
  This algorithm uses only what every corral policy made for policy-gradient methods offers: it
  is a ``torch.nn.Module`` (``parameters()``, ``state_dict()``, ``load_state_dict()``) with
  ``log_prob_entropy(observations, actions) -> (log_prob, entropy)``. It declares that it trains
  ``policy=mlp`` (``policies``), so another choice fails at composition with a clear message.
- **Seeding.** corral seeds torch's global generator with the run's seed before it builds the
  policy; the algorithm builds its own networks from a generator derived from ``seed``
  (``numpy.random.SeedSequence(seed)``, never ``seed + 1``) inside ``torch.random.fork_rng``, so
  its initial weights depend on the seed alone, not on what was built before it.
- **Snapshots.** ``state_dict()`` holds the value network, both optimisers' states and the
  epoch counter: a resumed run trains bit for bit like an uninterrupted one.
- **Ranges.** Every numeric field declares what it accepts (``corral.check``); corral rejects
  ``algo.learning_rate=-1`` before anything starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from corral import Algorithm, EnvSpec, EpisodeBatch, Policy, Sampler, StepType, check

#: Child of the run's seed sequence that seeds this algorithm's own networks.
NETWORK_STREAM = 7


@dataclass
class ReinforceConfig:
    """REINFORCE hyperparameters (``algo.*`` on the command line)."""

    discount: float = field(default=0.99, metadata=check(ge=0, le=1, help="discount factor gamma"))
    learning_rate: float = field(default=1e-2, metadata=check(gt=0, help="Adam learning rate of the policy"))
    vf_learning_rate: float = field(default=1e-2, metadata=check(gt=0, help="Adam learning rate of the baseline"))
    vf_iters: int = field(default=25, metadata=check(ge=0, help="baseline fitting steps per epoch (0: no baseline)"))
    vf_hidden_sizes: list[int] = field(default_factory=lambda: [64], metadata=check(ge=1, help="baseline widths"))
    normalize_advantages: bool = field(default=True, metadata={"help": "standardise advantages per batch"})


class Reinforce(Algorithm):
    """REINFORCE with a value baseline. ``Reinforce(env_spec, policy, sampler, seed=1, **ReinforceConfig fields)``."""

    policies = ("mlp",)  # the registered policy options it trains (checked at composition)
    accepts_fragments = False  # needs whole episodes: worker=default or worker=vec

    def __init__(self, env_spec: EnvSpec, policy: Policy, sampler: Sampler | None = None, *, seed: int = 1,
                 **hyperparameters: Any) -> None:
        self.config = config = ReinforceConfig(**hyperparameters)
        self.policy = policy
        self.sampler = sampler
        obs_dim = int(np.prod(env_spec.observation_space.shape))
        network_seed = np.random.SeedSequence(seed).spawn(NETWORK_STREAM + 1)[NETWORK_STREAM]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(network_seed.generate_state(1, np.uint32)[0]))
            layers: list[nn.Module] = []
            width = obs_dim
            for size in config.vf_hidden_sizes:
                layers += [nn.Linear(width, size), nn.Tanh()]
                width = size
            self.value_function = nn.Sequential(*layers, nn.Linear(width, 1))
        self.policy_optimizer = torch.optim.Adam(self._policy_module().parameters(), lr=config.learning_rate)
        self.vf_optimizer = torch.optim.Adam(self.value_function.parameters(), lr=config.vf_learning_rate)
        self.epochs_trained = 0

    def _policy_module(self) -> nn.Module:
        if not isinstance(self.policy, nn.Module) or not hasattr(self.policy, "log_prob_entropy"):
            raise TypeError(f"algo=reinforce trains a torch policy with log_prob_entropy(); got {type(self.policy).__name__}")
        return self.policy

    def values(self, observations: torch.Tensor) -> torch.Tensor:
        """V(s) for a batch of observations."""
        return self.value_function(observations.reshape(observations.shape[0], -1).float()).squeeze(-1)

    def returns_to_go(self, episodes: EpisodeBatch) -> np.ndarray:
        """Discounted return-to-go of every step; a TIMEOUT end bootstraps from V(last observation)."""
        with torch.no_grad():
            last_values = self.values(torch.as_tensor(episodes.last_observations)).numpy()
        out = np.zeros(len(episodes), dtype=np.float64)
        for e, (start, length) in enumerate(zip(episodes.starts.tolist(), episodes.lengths.tolist())):
            end = start + length
            acc = 0.0 if episodes.step_types[end - 1] == StepType.TERMINAL else float(last_values[e])
            for i in range(end - 1, start - 1, -1):
                acc = float(episodes.rewards[i]) + self.config.discount * acc
                out[i] = acc
        return out

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """One policy-gradient step on this epoch's episodes, then the baseline fit."""
        c = self.config
        t = episodes.to_torch()
        obs, actions = t["observations"].float(), t["actions"]
        returns = torch.as_tensor(self.returns_to_go(episodes), dtype=torch.float32)
        with torch.no_grad():
            advantages = returns - (self.values(obs) if c.vf_iters else 0.0)
        if c.normalize_advantages and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_prob, entropy = self.policy.log_prob_entropy(obs, actions)  # type: ignore[attr-defined]
        policy_loss = -(log_prob * advantages).mean()
        self.policy_optimizer.zero_grad()
        policy_loss.backward()
        self.policy_optimizer.step()
        value_loss = torch.zeros(())
        for _ in range(c.vf_iters):
            value_loss = 0.5 * (self.values(obs) - returns).pow(2).mean()
            self.vf_optimizer.zero_grad()
            value_loss.backward()
            self.vf_optimizer.step()
        self.epochs_trained += 1
        return {"loss/policy": float(policy_loss.item()), "loss/value": float(value_loss.item()),
                "loss/entropy": float(entropy.mean().item())}

    def state_dict(self) -> dict[str, Any]:
        """Policy and baseline weights, both optimisers' states, the epoch counter."""
        return {
            "policy": {k: v.clone() for k, v in self._policy_module().state_dict().items()},
            "value_function": {k: v.clone() for k, v in self.value_function.state_dict().items()},
            "policy_optimizer": self.policy_optimizer.state_dict(),
            "vf_optimizer": self.vf_optimizer.state_dict(),
            "epochs_trained": self.epochs_trained,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self._policy_module().load_state_dict(state["policy"])
        self.value_function.load_state_dict(state["value_function"])
        self.policy_optimizer.load_state_dict(state["policy_optimizer"])
        self.vf_optimizer.load_state_dict(state["vf_optimizer"])
        self.epochs_trained = int(state["epochs_trained"])


def build_reinforce(config: ReinforceConfig, *, env_spec: EnvSpec, policy: Policy, sampler: Sampler,
                    seed: int) -> Reinforce:
    """The factory corral calls: the config's fields, the chosen policy, the run's sampler and seed."""
    return Reinforce(env_spec, policy, sampler, seed=seed, **dataclasses.asdict(config))


#: What the factory builds, so corral's composition checks read ``policies`` and ``accepts_fragments``.
build_reinforce.component_class = Reinforce  # type: ignore[attr-defined]
