"""``policy=gru``: a recurrent (GRU) policy with one hidden state per environment slot (for RL2).

Sampling side (numpy in, numpy out, the Policy contract): ``get_actions`` advances each slot's
hidden state by one step; ``reset(mask)`` zeroes the hidden state (and restarts the noise
stream) of the masked slots only. The ``rl2`` worker calls ``reset`` at a trial's start and
never between the episodes of a trial, so the policy remembers what it learnt about the task.
The forward pass is a numpy GRU cell whose products are computed row by row
(:func:`~corral.rl.networks.rowwise_linear`), so a slot's actions do not depend on the batch it
is stepped in; noise comes from per-slot :class:`~corral.rl.noise.NoiseStreams` exactly as in
``policy=mlp``.

Training side (torch): ``log_prob_entropy_sequences(obs[B, T, D], actions[B, T, ...])`` runs
``torch.nn.GRU`` (the same parameters and the same equations) over whole padded sequences from a
zero state, for backpropagation through time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
from corral.plugins.policies.mlp import reject_log_std
from corral.rl.networks import flat_dim, numpy_to_params, params_to_numpy, rowwise_linear
from corral.rl.noise import NoiseStreams

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class GRUPolicyConfig:
    """Settings of the GRU policy."""

    hidden_size: int = field(default=64, metadata=check(
        ge=1, help="the policy's GRU hidden-state width (algo=rl2_ppo's value network: algo.vf_hidden_sizes)"))
    init_log_std: float = field(default=0.0, metadata=check(help="initial log standard deviation (Box actions only)"))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class GRUPolicy(SlotNoiseMixin, Policy, nn.Module):
    """Categorical (Discrete) or diagonal-Gaussian (Box) head on a one-layer GRU."""

    recurrent = True

    def __init__(self, env_spec: EnvSpec, hidden_size: int = 64, init_log_std: float = 0.0) -> None:
        nn.Module.__init__(self)
        obs_space, act_space = env_spec.observation_space, env_spec.action_space
        check_box_observations("policy=gru", obs_space)
        if hidden_size < 1:
            raise ConfigError(f"policy.hidden_size must be >= 1, got {hidden_size}")
        self.obs_dim = flat_dim(obs_space.shape)
        self.hidden_size = int(hidden_size)
        self.discrete = isinstance(act_space, gym.spaces.Discrete)
        if isinstance(act_space, gym.spaces.Discrete):
            reject_log_std("gru", init_log_std, act_space)
            out_dim = self.n_actions = int(act_space.n)
        elif isinstance(act_space, gym.spaces.Box):
            self.act_shape = act_space.shape
            out_dim = self.act_dim = flat_dim(act_space.shape)
            self.log_std = nn.Parameter(torch.full((self.act_dim,), float(init_log_std)))
        else:
            raise ConfigError(f"policy=gru supports Discrete and Box action spaces, got {act_space}")
        self.gru = nn.GRU(self.obs_dim, self.hidden_size, batch_first=True)
        self.head = nn.Linear(self.hidden_size, out_dim)
        nn.init.orthogonal_(self.head.weight, gain=0.01)
        nn.init.zeros_(self.head.bias)
        self.deterministic = False
        self._streams: NoiseStreams | None = None
        self._hidden: np.ndarray | None = None  # [n_slots, hidden_size]

    # ------------------------------------------------------------------ torch side (for algorithms)
    def sequence_distribution(self, observations: torch.Tensor) -> torch.distributions.Distribution:
        """Action distributions ``[B, T]`` for padded observation sequences ``[B, T, ...]`` that start
        from a zero hidden state (a trial's start)."""
        b, t = observations.shape[:2]
        hidden, _ = self.gru(observations.reshape(b, t, -1).float())
        out = self.head(hidden)
        if self.discrete:
            return torch.distributions.Categorical(logits=out)
        return torch.distributions.Independent(torch.distributions.Normal(out, self.log_std.exp()), 1)

    def log_prob_entropy_sequences(self, observations: torch.Tensor, actions: torch.Tensor
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of ``actions [B, T, ...]`` and entropies, both ``[B, T]``."""
        dist = self.sequence_distribution(observations)
        if not self.discrete:
            actions = actions.reshape(*actions.shape[:2], -1).float()
        return dist.log_prob(actions), dist.entropy()

    # ------------------------------------------------------------------ numpy side (for workers)
    def seed(self, seeds: Sequence[np.random.SeedSequence]) -> None:
        """One noise stream and one hidden state per environment slot."""
        super().seed(seeds)
        self._hidden = np.zeros((len(seeds), self.hidden_size), dtype=np.float32)

    def reset(self, dones: np.ndarray | None = None) -> None:
        """Zero the hidden state and restart the noise of the masked slots (all when None)."""
        super().reset(dones)
        if self._hidden is not None:
            if dones is None:
                self._hidden[:] = 0.0
            else:
                self._hidden[np.asarray(dones, dtype=bool)] = 0.0

    def _state_for(self, n: int) -> tuple[np.ndarray, NoiseStreams | None]:
        if self._hidden is None:
            self._hidden = np.zeros((n, self.hidden_size), dtype=np.float32)
        if len(self._hidden) != n:
            raise ValueError(
                f"the policy holds hidden states for {len(self._hidden)} environment slots but got {n} "
                "observations; call policy.seed() with one seed per slot"
            )
        return self._hidden, None if self.deterministic else self.streams_for(n)

    def _gru_step(self, x: np.ndarray, h: np.ndarray) -> np.ndarray:
        """One step of ``torch.nn.GRU``'s cell in numpy, row by row (batch-invariant)."""
        gru: Any = self.gru  # nn.GRU's per-layer weights are dynamic attributes (typed Tensor | Module)
        w_ih = gru.weight_ih_l0.detach().numpy()
        w_hh = gru.weight_hh_l0.detach().numpy()
        gi = rowwise_linear(x, w_ih) + gru.bias_ih_l0.detach().numpy()
        gh = rowwise_linear(h, w_hh) + gru.bias_hh_l0.detach().numpy()
        hs = self.hidden_size
        r = _sigmoid(gi[:, :hs] + gh[:, :hs])
        z = _sigmoid(gi[:, hs : 2 * hs] + gh[:, hs : 2 * hs])
        n = np.tanh(gi[:, 2 * hs :] + r * gh[:, 2 * hs :])
        return ((1.0 - z) * n + z * h).astype(np.float32)

    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Advance every slot's hidden state by one step; sample (or, deterministic, pick the mode)."""
        obs = np.asarray(observations, dtype=np.float32)
        n = obs.shape[0]
        hidden, streams = self._state_for(n)
        hidden = self._gru_step(obs.reshape(n, -1), hidden)
        self._hidden = hidden
        out = (rowwise_linear(hidden, self.head.weight.detach().numpy())
               + self.head.bias.detach().numpy()).astype(np.float64)
        if self.discrete:
            log_p = out - out.max(axis=1, keepdims=True)
            log_p -= np.log(np.exp(log_p).sum(axis=1, keepdims=True))
            if streams is None:
                actions = log_p.argmax(axis=1)
            else:
                cdf = np.cumsum(np.exp(log_p), axis=1)
                u = streams.uniform(1) * cdf[:, -1:]
                actions = np.minimum((cdf < u).sum(axis=1), self.n_actions - 1)
            logp = log_p[np.arange(n), actions]
            actions = actions.astype(np.int64)
        else:
            log_std = self.log_std.detach().numpy().astype(np.float64)
            eps = np.zeros_like(out) if streams is None else streams.normal(self.act_dim)
            actions = (out + np.exp(log_std) * eps).astype(np.float32).reshape((n, *self.act_shape))
            logp = (-0.5 * eps**2 - log_std - _LOG_SQRT_2PI).sum(axis=1)
        if streams is not None:
            streams.advance()
        return actions, {"log_prob": logp.astype(np.float32)}

    def get_param_values(self) -> dict[str, np.ndarray]:
        """Parameters as numpy arrays."""
        return params_to_numpy(self)

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        """Load parameters."""
        numpy_to_params(self, params)

    def get_sampling_state(self) -> dict[str, Any]:
        """Noise-stream counters and the hidden states."""
        return {**super().get_sampling_state(), "hidden": None if self._hidden is None else self._hidden.copy()}

    def set_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_sampling_state`'s output."""
        super().set_sampling_state(state)
        if state.get("hidden") is not None:
            self._hidden = np.array(state["hidden"], dtype=np.float32)


def build_gru_policy(config: GRUPolicyConfig, *, env_spec: EnvSpec) -> GRUPolicy:
    """Build the policy from its config."""
    return GRUPolicy(env_spec, config.hidden_size, config.init_log_std)


#: Read by composition checks: this option builds a recurrent policy.
build_gru_policy.recurrent = True  # type: ignore[attr-defined]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``policy=gru``."""
    register("policy", "gru", build_gru_policy, config=GRUPolicyConfig,
             help="recurrent GRU policy, one hidden state per environment slot (RL2)")
