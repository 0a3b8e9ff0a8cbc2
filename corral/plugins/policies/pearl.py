"""``policy=pearl``: PEARL's agent (Rakelly et al. 2019): a context encoder and a latent-conditioned actor.

The agent holds, per environment slot, the *context* collected on the slot's current task
(transitions ``(observation, action in [-1, 1], reward)``) and a latent task variable ``z``. The
actor is a tanh-squashed Gaussian policy (:class:`~corral.plugins.policies.tanh_gaussian.TanhGaussianPolicy`)
on ``[observation, z]``; the encoder (:class:`~corral.meta.context_encoder.ContextEncoder`) maps
the context to a Gaussian posterior over ``z``.

A worker drives it (``worker=pearl``): ``clear_context(mask)`` when a slot starts a new task,
``reset(mask)`` at each episode start, ``sample_z(mask, posterior)`` to draw the episode's ``z``
(from the prior ``N(0, I)`` or from the posterior over the slot's context), and
``add_context(slot, ...)`` after each episode. ``z`` is drawn from the slot's own noise stream, so
the same seed gives the same ``z`` whatever the sampler.

``deterministic = True`` is really deterministic: actions are ``tanh(mean)`` and ``z`` is the
posterior *mean* (garage's PEARL evaluation ignored its deterministic flag). ``explore_z = True``
keeps drawing ``z`` from the prior or posterior even then (mean actions, posterior sampling: how
the PEARL paper evaluates, since a sparse-reward task is only found by acting out hypotheses).
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
from corral.framework.env import EnvSpec, child_seed
from corral.framework.errors import ConfigError
from corral.framework.policy import Policy, check_box_observations
from corral.meta.context_encoder import MIN_VARIANCE, ContextEncoder
from corral.plugins.policies.tanh_gaussian import TanhGaussianPolicy
from corral.rl.networks import ACTIVATIONS, batch_invariant_forward, flat_dim, numpy_to_params, params_to_numpy
from corral.rl.noise import NoiseStreams

#: Child of a slot's noise seed that ``z`` is drawn from (the actor's noise uses the seed itself).
Z_NOISE_BRANCH = 2


@dataclass
class PEARLPolicyConfig:
    """Settings of PEARL's agent (the paper's widths: actor 3 x 300, encoder 3 x 200, 5 latent dims)."""

    hidden_sizes: list[int] = field(default_factory=lambda: [300, 300, 300], metadata=check(
        ge=1, help="actor widths (algo=pearl's Q networks: algo.qf_hidden_sizes)"))
    encoder_hidden_sizes: list[int] = field(default_factory=lambda: [200, 200, 200],
                                            metadata=check(ge=1, help="context encoder widths"))
    latent_size: int = field(default=5, metadata=check(ge=1, help="dimensions of the latent task variable z"))
    activation: str = field(default="relu", metadata=check(
        choices=tuple(ACTIVATIONS),
        help="activation of the actor and the context encoder (algo=pearl's Q networks are always relu)"))
    log_std_min: float = field(default=-20.0, metadata=check(lt_field="log_std_max", help="lower clip of the actor's log standard deviation"))
    log_std_max: float = field(default=2.0, metadata=check(help="upper clip of the actor's log standard deviation"))


def softplus(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))``, stable for large ``|x|``."""
    return np.logaddexp(0.0, x)


class PEARLPolicy(Policy, nn.Module):
    """Context encoder + actor on ``[observation, z]``, with per-slot context and ``z`` (see the module docstring)."""

    #: Algorithms this policy is made for (checked before any worker starts).
    algorithms: tuple[str, ...] = ("pearl",)

    def __init__(self, env_spec: EnvSpec, hidden_sizes: Sequence[int] = (300, 300, 300),
                 encoder_hidden_sizes: Sequence[int] = (200, 200, 200), latent_size: int = 5,
                 activation: str = "relu", log_std_min: float = -20.0, log_std_max: float = 2.0) -> None:
        nn.Module.__init__(self)
        if latent_size < 1:
            raise ConfigError(f"policy.latent_size must be >= 1, got {latent_size}")
        check_box_observations("policy=pearl", env_spec.observation_space)
        self.obs_dim = flat_dim(env_spec.observation_space.shape)
        self.latent_dim = int(latent_size)
        with_z = gym.spaces.Box(-np.inf, np.inf, shape=(self.obs_dim + self.latent_dim,), dtype=np.float32)
        self.actor = TanhGaussianPolicy(EnvSpec(with_z, env_spec.action_space, env_spec.max_episode_length),
                                        hidden_sizes, activation, log_std_min, log_std_max)
        self.act_dim = self.actor.act_dim
        self.context_dim = self.obs_dim + self.act_dim + 1
        self.encoder = ContextEncoder(self.context_dim, self.latent_dim, encoder_hidden_sizes, activation)
        self.explore_z = False
        self._z_streams: NoiseStreams | None = None
        self._z = np.zeros((0, self.latent_dim), dtype=np.float32)
        self._context: list[list[np.ndarray]] = []

    # ------------------------------------------------------------------ flags
    @property
    def deterministic(self) -> bool:  # type: ignore[override]
        """Mean actions and the posterior mean ``z`` when true."""
        return bool(self.actor.deterministic)

    @deterministic.setter
    def deterministic(self, value: bool) -> None:
        self.actor.deterministic = bool(value)

    # ------------------------------------------------------------------ slots
    def seed(self, seeds: Sequence[np.random.SeedSequence]) -> None:
        """One actor-noise stream and one ``z`` stream per slot; every slot starts with empty context."""
        self.actor.seed(seeds)
        self._z_streams = NoiseStreams([child_seed(s, Z_NOISE_BRANCH) for s in seeds])
        self._z = np.zeros((len(seeds), self.latent_dim), dtype=np.float32)
        self._context = [[] for _ in seeds]

    def _slots(self, n: int) -> None:
        if self._z_streams is None or len(self._context) != n:
            self.seed(np.random.SeedSequence().spawn(n))

    def reset(self, dones: np.ndarray | None = None) -> None:
        """New episodes in the masked slots (their noise moves on; context and ``z`` stay)."""
        self.actor.reset(dones)
        if self._z_streams is not None:
            self._z_streams.reset(dones)

    def clear_context(self, mask: np.ndarray | None = None) -> None:
        """Forget the context of the masked slots (all when None): they start a new task."""
        for j in range(len(self._context)) if mask is None else np.flatnonzero(mask):
            self._context[j] = []

    # ------------------------------------------------------------------ context and z
    def context_features(self, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> np.ndarray:
        """``[N, context_dim]`` rows ``(observation, action scaled to [-1, 1], reward)``."""
        n = len(rewards)
        obs = np.asarray(observations, dtype=np.float32).reshape(n, -1)
        low, high = self.actor.low, self.actor.high
        act = (2.0 * (np.asarray(actions, dtype=np.float64).reshape(n, -1) - low) / (high - low) - 1.0)
        return np.concatenate([obs, act.astype(np.float32), np.asarray(rewards, dtype=np.float32).reshape(n, 1)], 1)

    def add_context(self, slot: int, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Append one episode's transitions to ``slot``'s context."""
        self._context[slot].append(self.context_features(observations, actions, rewards))

    def context_size(self, slot: int) -> int:
        """Transitions in ``slot``'s context."""
        return sum(len(c) for c in self._context[slot])

    def posterior(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of ``z`` given ``slot``'s context (the prior ``N(0, I)`` when empty)."""
        if not self._context[slot]:
            return np.zeros(self.latent_dim), np.ones(self.latent_dim)
        out = batch_invariant_forward(self.encoder.net, np.concatenate(self._context[slot])).astype(np.float64)
        means, variances = out[:, : self.latent_dim], softplus(out[:, self.latent_dim :])
        precision = 1.0 / np.maximum(variances, MIN_VARIANCE)
        variance = 1.0 / precision.sum(0)
        return variance * (means * precision).sum(0), variance

    def sample_z(self, mask: np.ndarray | None = None, posterior: bool = True) -> None:
        """Draw the masked slots' ``z`` for their next episode: from the posterior over their context
        (``posterior=True``) or from the prior; the mean instead of a draw when deterministic (unless
        ``explore_z``)."""
        assert self._z_streams is not None, "seed the policy (policy.seed) before sampling z"
        slots = range(len(self._context)) if mask is None else np.flatnonzero(mask)
        noise = self._z_streams.normal(self.latent_dim)
        use_mean = self.deterministic and not self.explore_z
        for j in slots:
            mean, var = self.posterior(int(j)) if posterior else (np.zeros(self.latent_dim), np.ones(self.latent_dim))
            self._z[j] = mean if use_mean else mean + np.sqrt(var) * noise[j]

    @property
    def z(self) -> np.ndarray:
        """The current ``z`` of every slot, ``[n_slots, latent_size]`` (a copy)."""
        return self._z.copy()

    # ------------------------------------------------------------------ acting
    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The actor's actions on ``[observation, z]`` of each slot."""
        obs = np.asarray(observations, dtype=np.float32)
        n = obs.shape[0]
        self._slots(n)
        return self.actor.get_actions(np.concatenate([obs.reshape(n, -1), self._z], axis=1))

    # ------------------------------------------------------------------ torch side (for the algorithm)
    def rsample(self, observations: torch.Tensor, z: torch.Tensor, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised actions in ``[-1, 1]`` and log-probabilities on ``[observation, z]``."""
        x = torch.cat([observations.reshape(observations.shape[0], -1).float(), z], dim=1)
        return self.actor.rsample(x, generator)

    def unscale_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """The action space's bounds -> ``[-1, 1]``."""
        return self.actor.unscale_actions(actions)

    # ------------------------------------------------------------------ parameters and state
    def get_param_values(self) -> dict[str, np.ndarray]:
        """Encoder and actor parameters as numpy arrays."""
        return params_to_numpy(self)

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        """Load parameters."""
        numpy_to_params(self, params)

    def get_sampling_state(self) -> dict[str, Any]:
        """Noise counters, ``z`` and the context of every slot."""
        return {
            "actor": self.actor.get_sampling_state(),
            "z_streams": self._z_streams.state_dict() if self._z_streams is not None else None,
            "z": self._z.copy(),
            "context": [[c.copy() for c in slot] for slot in self._context],
        }

    def set_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_sampling_state`'s output."""
        self.actor.set_sampling_state(state["actor"])
        if state.get("z_streams") is not None:
            self._z_streams = NoiseStreams([])
            self._z_streams.load_state_dict(state["z_streams"])
        self._z = np.array(state["z"], dtype=np.float32)
        self._context = [[np.array(c) for c in slot] for slot in state["context"]]


def build_pearl_policy(config: PEARLPolicyConfig, *, env_spec: EnvSpec) -> PEARLPolicy:
    """Build PEARL's agent from its config."""
    return PEARLPolicy(env_spec, config.hidden_sizes, config.encoder_hidden_sizes, config.latent_size,
                       config.activation, config.log_std_min, config.log_std_max)


build_pearl_policy.component_class = PEARLPolicy  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``policy=pearl``."""
    register("policy", "pearl", build_pearl_policy, config=PEARLPolicyConfig,
             help="PEARL agent: context encoder (posterior over z) + tanh-Gaussian actor on [obs, z] (algo=pearl)")


__all__ = ["PEARLPolicy", "PEARLPolicyConfig", "build_pearl_policy"]
