"""``policy=qnet``: a Q-network acting epsilon-greedily over Discrete actions (DQN's agent).

``Q(s, .)`` comes from an MLP, or with ``dueling=true`` from a shared trunk and two heads,
``Q = V(s) + A(s, a) - mean_a A(s, a)`` (Wang et al. 2016). The exploration rate is the
``epsilon`` buffer: it travels with the parameters in every agent update, so workers follow the
algorithm's schedule. Whether to explore and which random action to take come from per-slot
:class:`~corral.rl.noise.NoiseStreams`, so an environment's actions depend only on its own seed.
The deterministic (evaluation) action is ``argmax_a Q(s, a)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from corral import hookimpl
from corral.framework.checks import check
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.policy import Policy, check_box_observations
from corral.parallel.slot_noise import SlotNoiseMixin
from corral.rl.networks import (
    ACTIVATIONS,
    batch_invariant_forward,
    flat_dim,
    mlp,
    numpy_to_params,
    params_to_numpy,
)
from corral.rl.networks import activation as activation_class


@dataclass
class QNetworkPolicyConfig:
    """Settings of the Q-network (SB3's DQN default is ``net_arch=[64, 64]``, ReLU)."""

    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata=check(
        ge=1, help="Q network widths (DQN's target network is a copy of it)"))
    activation: str = field(default="relu", metadata=check(
        choices=tuple(ACTIVATIONS), help="Q network activation (DQN's target network is a copy of it)"))
    dueling: bool = field(default=False, metadata={"help": "dueling head: Q = V + A - mean(A)"})


class QNetworkPolicy(SlotNoiseMixin, Policy, nn.Module):
    """Epsilon-greedy policy on a Q-network; ``q_values(obs)`` is the torch side DQN trains."""

    #: Algorithms this policy is made for (checked before any worker starts).
    algorithms: tuple[str, ...] = ("dqn",)
    epsilon: torch.Tensor  # a registered buffer

    def __init__(self, env_spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64), activation: str = "relu",
                 dueling: bool = False) -> None:
        nn.Module.__init__(self)
        obs_space, act_space = env_spec.observation_space, env_spec.action_space
        if not isinstance(act_space, gym.spaces.Discrete):
            raise ConfigError(
                f"policy=qnet needs a Discrete action space, got {act_space}; "
                "for continuous (Box) actions use algo=sac policy=tanh_gaussian"
            )
        check_box_observations("policy=qnet", obs_space)
        self.obs_dim = flat_dim(obs_space.shape)
        self.n_actions = int(act_space.n)
        self.dueling = bool(dueling)
        if self.dueling:
            if not hidden_sizes:
                raise ConfigError("policy.dueling=true needs at least one hidden layer (policy.hidden_sizes)")
            *inner, last = [int(h) for h in hidden_sizes]
            self.trunk = nn.Sequential(*mlp(self.obs_dim, inner, last, activation), activation_class(activation)())
            self.value_head = mlp(last, [], 1, activation)
            self.advantage_head = mlp(last, [], self.n_actions, activation)
        else:
            self.net = mlp(self.obs_dim, hidden_sizes, self.n_actions, activation)
        self.register_buffer("epsilon", torch.tensor(1.0))
        self.deterministic = False
        self._streams = None

    # ------------------------------------------------------------------ torch side (for DQN)
    def q_values(self, observations: torch.Tensor) -> torch.Tensor:
        """``Q(s, a)`` for every action: ``[n, n_actions]``."""
        x = observations.reshape(observations.shape[0], -1).float()
        if not self.dueling:
            return self.net(x)
        h = self.trunk(x)
        adv = self.advantage_head(h)
        return self.value_head(h) + adv - adv.mean(dim=1, keepdim=True)

    def _q_numpy(self, obs: np.ndarray) -> np.ndarray:
        """Batch-invariant numpy ``Q(s, .)``: a row's values do not depend on the other rows."""
        if not self.dueling:
            return batch_invariant_forward(self.net, obs)
        h = batch_invariant_forward(self.trunk, obs)
        adv = batch_invariant_forward(self.advantage_head, h)
        return batch_invariant_forward(self.value_head, h) + adv - adv.mean(axis=1, keepdims=True)

    # ------------------------------------------------------------------ numpy side (for workers)
    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Greedy actions, each replaced by a uniformly random one with probability ``epsilon``."""
        obs = np.asarray(observations, dtype=np.float32)
        n = obs.shape[0]
        greedy = self._q_numpy(obs.reshape(n, -1)).argmax(axis=1)
        if self.deterministic:
            return greedy.astype(np.int64), {}
        streams = self.streams_for(n)
        u = streams.uniform(2)
        streams.advance()
        explore = u[:, 0] < float(self.epsilon)
        random_actions = np.minimum((u[:, 1] * self.n_actions).astype(np.int64), self.n_actions - 1)
        return np.where(explore, random_actions, greedy).astype(np.int64), {}

    def get_param_values(self) -> dict[str, np.ndarray]:
        """Parameters (and ``epsilon``) as numpy arrays."""
        return params_to_numpy(self)

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        """Load parameters."""
        numpy_to_params(self, params)


def build_qnet_policy(config: QNetworkPolicyConfig, *, env_spec: EnvSpec) -> QNetworkPolicy:
    """Build the policy from its config."""
    return QNetworkPolicy(env_spec, config.hidden_sizes, config.activation, config.dueling)


build_qnet_policy.component_class = QNetworkPolicy  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``policy=qnet``."""
    register("policy", "qnet", build_qnet_policy, config=QNetworkPolicyConfig,
             help="epsilon-greedy Q-network for Discrete actions (DQN), optional dueling head")
