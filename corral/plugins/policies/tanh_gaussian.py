"""``policy=tanh_gaussian``: SAC's tanh-squashed diagonal Gaussian policy for Box actions.

The network outputs a mean and a log standard deviation per action dimension; an action is
``tanh(mean + std * eps)`` rescaled from ``[-1, 1]`` to the action space's bounds, and the
deterministic (evaluation) action is ``tanh(mean)`` rescaled. While its ``random_actions`` flag is
set (SAC sets it until the replay buffer holds ``min_buffer_size`` transitions) it acts uniformly
at random inside the bounds. Both the Gaussian and the uniform noise come from per-slot
:class:`~corral.rl.noise.NoiseStreams`, so an environment's actions depend only on its own seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
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

_LOG_2 = math.log(2.0)


@dataclass
class TanhGaussianPolicyConfig:
    """Settings of the tanh-Gaussian policy (SB3's SAC actor: ``net_arch=[256, 256]``, ReLU)."""

    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256], metadata=check(
        ge=1, help="actor widths (SAC's Q networks: algo.qf_hidden_sizes)"))
    activation: str = field(default="relu", metadata=check(
        choices=tuple(ACTIVATIONS), help="actor activation only (SAC's Q networks: algo.qf_activation)"))
    log_std_min: float = field(default=-20.0, metadata=check(lt_field="log_std_max", help="lower clip of the log standard deviation"))
    log_std_max: float = field(default=2.0, metadata=check(help="upper clip of the log standard deviation"))


class TanhGaussianPolicy(SlotNoiseMixin, Policy, nn.Module):
    """Squashed Gaussian policy; ``rsample`` gives reparameterised actions in ``[-1, 1]`` with log-probs.

    The ``random_actions`` buffer (0 or 1) travels with the parameters in every agent update, so
    workers switch from uniform exploration to the learned policy when the algorithm says so.
    """

    #: Algorithms this policy is made for (checked before any worker starts).
    algorithms: tuple[str, ...] = ("sac",)
    random_actions: torch.Tensor  # a registered buffer

    def __init__(self, env_spec: EnvSpec, hidden_sizes: Sequence[int] = (256, 256), activation: str = "relu",
                 log_std_min: float = -20.0, log_std_max: float = 2.0) -> None:
        nn.Module.__init__(self)
        obs_space, act_space = env_spec.observation_space, env_spec.action_space
        if not isinstance(act_space, gym.spaces.Box):
            raise ConfigError(
                f"policy=tanh_gaussian needs a Box (continuous) action space, got {act_space}; "
                "for Discrete actions use algo=dqn policy=qnet"
            )
        check_box_observations("policy=tanh_gaussian", obs_space)
        low, high = np.asarray(act_space.low, np.float64), np.asarray(act_space.high, np.float64)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ConfigError(
                f"policy=tanh_gaussian squashes actions into the action space's bounds, but {act_space} is unbounded; "
                "wrap the environment with gymnasium.wrappers.ClipAction or RescaleAction"
            )
        self.obs_dim = flat_dim(obs_space.shape)
        self.act_shape = tuple(act_space.shape)
        self.act_dim = flat_dim(act_space.shape)
        self.low, self.high = low.reshape(-1), high.reshape(-1)
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        self.net = mlp(self.obs_dim, hidden_sizes, 2 * self.act_dim, activation, out_gain=0.01)
        self.register_buffer("random_actions", torch.tensor(0.0))
        self.deterministic = False
        self._streams = None

    # ------------------------------------------------------------------ torch side (for SAC)
    def mean_log_std(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and clipped log standard deviation of the pre-squash Gaussian."""
        out = self.net(observations.reshape(observations.shape[0], -1).float())
        mean, log_std = out[:, : self.act_dim], out[:, self.act_dim :]
        return mean, log_std.clamp(self.log_std_min, self.log_std_max)

    def rsample(self, observations: torch.Tensor, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised squashed actions in ``[-1, 1]`` and their log-probabilities.

        The log-probability includes the tanh change of variables,
        ``log N(u) - sum log(1 - tanh(u)^2)``, computed stably as ``2 (log 2 - u - softplus(-2u))``.
        """
        mean, log_std = self.mean_log_std(observations)
        std = log_std.exp()
        eps = torch.randn(mean.shape, generator=generator, dtype=mean.dtype)
        u = mean + std * eps
        log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))).sum(-1)
        return torch.tanh(u), log_prob

    def scale_actions(self, squashed: np.ndarray) -> np.ndarray:
        """``[-1, 1]`` -> the action space's bounds."""
        return self.low + (squashed + 1.0) * 0.5 * (self.high - self.low)

    def unscale_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """The action space's bounds -> ``[-1, 1]`` (what the Q networks see)."""
        low = torch.as_tensor(self.low, dtype=torch.float32)
        high = torch.as_tensor(self.high, dtype=torch.float32)
        a = actions.reshape(actions.shape[0], -1).float()
        return 2.0 * (a - low) / (high - low) - 1.0

    # ------------------------------------------------------------------ numpy side (for workers)
    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Sample (or, when deterministic, take ``tanh(mean)``) one action per observation."""
        obs = np.asarray(observations, dtype=np.float32)
        n = obs.shape[0]
        out = batch_invariant_forward(self.net, obs.reshape(n, -1)).astype(np.float64)
        mean = out[:, : self.act_dim]
        if self.deterministic:
            squashed = np.tanh(mean)
        else:
            streams = self.streams_for(n)
            if float(self.random_actions) > 0.5:
                squashed = 2.0 * streams.uniform(self.act_dim) - 1.0
            else:
                log_std = np.clip(out[:, self.act_dim :], self.log_std_min, self.log_std_max)
                squashed = np.tanh(mean + np.exp(log_std) * streams.normal(self.act_dim))
            streams.advance()
        actions = self.scale_actions(squashed).astype(np.float32).reshape((n, *self.act_shape))
        return actions, {}

    def get_param_values(self) -> dict[str, np.ndarray]:
        """Parameters (and the ``random_actions`` flag) as numpy arrays."""
        return params_to_numpy(self)

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        """Load parameters."""
        numpy_to_params(self, params)


def build_tanh_gaussian_policy(config: TanhGaussianPolicyConfig, *, env_spec: EnvSpec) -> TanhGaussianPolicy:
    """Build the policy from its config."""
    return TanhGaussianPolicy(env_spec, config.hidden_sizes, config.activation, config.log_std_min, config.log_std_max)


build_tanh_gaussian_policy.component_class = TanhGaussianPolicy  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``policy=tanh_gaussian``."""
    register("policy", "tanh_gaussian", build_tanh_gaussian_policy, config=TanhGaussianPolicyConfig,
             help="tanh-squashed Gaussian for Box actions (SAC); deterministic = tanh(mean)")
