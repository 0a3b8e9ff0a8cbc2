"""``policy=mlp``: an MLP policy, categorical for Discrete actions, Gaussian for Box actions."""

from __future__ import annotations

import math
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
from corral.rl import networks
from corral.rl.device_forward import GraphedDeviceForward
from corral.rl.networks import (
    batch_invariant_forward,
    flat_dim,
    mlp,
    numpy_to_params,
    params_to_numpy,
    rowwise_linear,
)
from corral.rl.noise import NoiseStreams

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class MLPPolicyConfig:
    """Settings of the MLP policy."""

    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64], metadata=check(
        ge=1, help="this policy's hidden layer widths (the value network's: algo.vf_hidden_sizes)"))
    activation: str = field(default="tanh", metadata=check(
        choices=tuple(networks.ACTIVATIONS),
        help="activation of this policy's hidden layers only; the value network of algo=ppo, vpg and trpo is always tanh"))
    init_log_std: float = field(default=0.0, metadata=check(help="initial log standard deviation (Box actions only)"))


def reject_log_std(policy: str, init_log_std: float, act_space: gym.Space) -> None:
    """``policy.init_log_std`` set for Discrete actions, where there is no log std: a ConfigError
    rather than a value silently ignored."""
    if float(init_log_std) != 0.0:
        raise ConfigError(f"policy.init_log_std={init_log_std} sets the log std of Box actions, but the environment's "
                          f"actions are {act_space}, which policy={policy} samples from a categorical distribution; "
                          "leave policy.init_log_std at 0.0")


class _NumpyForward:
    """:func:`~corral.rl.networks.batch_invariant_forward` of one ``mlp()``, with its per-call work
    (walking the modules, ``weight.detach().numpy()``) done once.

    The numpy views share storage with the parameters, so in-place updates (``set_param_values``,
    an optimizer step) show through; :meth:`valid` notices a replaced module, parameter or storage
    (``param.data = ...``, ``.to()``) and the policy rebuilds the cache. The steps are the same
    numpy operations as ``batch_invariant_forward`` (same results, bit for bit); a probe at build
    time compares the two and the cache is not used (``exact`` false) if they ever disagree.
    """

    def __init__(self, net: nn.Sequential) -> None:
        self.net = net
        self.modules = list(net._modules.values())
        self.params: list[tuple[nn.Module, str, torch.Tensor, int]] = []
        self.steps: list[tuple[Any, Any]] = []  # (weight view, bias view or None) or (activation fn, module)
        activations = getattr(networks, "_NUMPY_ACTIVATIONS", {})
        self.exact = True
        for layer in self.modules:
            if isinstance(layer, nn.Linear):
                views = []
                for name in ("weight", "bias"):
                    p = layer._parameters.get(name)
                    if p is not None:
                        self.params.append((layer, name, p, p.data_ptr()))
                    views.append(None if p is None else p.detach().numpy())
                self.steps.append((views[0], views[1]))
            elif type(layer) in activations:
                self.steps.append((activations[type(layer)], layer))
            else:  # a layer batch_invariant_forward runs through torch: use it as it is
                self.exact = False
        linears = [m for m in self.modules if isinstance(m, nn.Linear)]
        self.exact = self.exact and bool(linears)
        if self.exact:
            probe = np.linspace(-2.0, 2.0, 3 * linears[0].in_features, dtype=np.float32).reshape(3, -1)
            expected = networks.batch_invariant_forward(net, probe)
            got = self(probe)
            self.exact = got.dtype == expected.dtype and np.array_equal(got, expected)

    def valid(self, net: nn.Sequential) -> bool:
        """True while ``net`` still holds the modules, parameters and storage the views were made from."""
        if net is not self.net or list(net._modules.values()) != self.modules:
            return False
        for module, name, p, ptr in self.params:
            if module._parameters.get(name) is not p or p.data_ptr() != ptr:
                return False
        return True

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = np.ascontiguousarray(x, dtype=np.float32)
        for a, b in self.steps:
            if isinstance(a, np.ndarray):
                h = rowwise_linear(h, a)
                if b is not None:
                    h += b
            else:
                h = a(h, b)
        return h


class MLPPolicy(SlotNoiseMixin, Policy, nn.Module):
    """Categorical (Discrete) or diagonal-Gaussian (Box) policy on an MLP.

    Exploration noise comes from per-slot :class:`~corral.rl.noise.NoiseStreams`, so an
    environment's actions depend only on its own seed, not on how it was batched.
    """

    def __init__(self, env_spec: EnvSpec, hidden_sizes: Sequence[int] = (64, 64), activation: str = "tanh",
                 init_log_std: float = 0.0) -> None:
        nn.Module.__init__(self)
        obs_space, act_space = env_spec.observation_space, env_spec.action_space
        check_box_observations("policy=mlp", obs_space)
        self.obs_dim = flat_dim(obs_space.shape)
        self.discrete = isinstance(act_space, gym.spaces.Discrete)
        if isinstance(act_space, gym.spaces.Discrete):
            reject_log_std("mlp", init_log_std, act_space)
            self.n_actions = int(act_space.n)
            self.net = mlp(self.obs_dim, hidden_sizes, self.n_actions, activation, out_gain=0.01)
        elif isinstance(act_space, gym.spaces.Box):
            self.act_shape = act_space.shape
            self.act_dim = flat_dim(act_space.shape)
            self.net = mlp(self.obs_dim, hidden_sizes, self.act_dim, activation, out_gain=0.01)
            self.log_std = nn.Parameter(torch.full((self.act_dim,), float(init_log_std)))
        else:
            raise ConfigError(f"policy=mlp supports Discrete and Box action spaces, got {act_space}")
        self.deterministic = False
        self._streams: NoiseStreams | None = None
        self._forward_cache: _NumpyForward | None = None
        self._device_forward: GraphedDeviceForward | None = None  # the forward pass on a GPU
        self._rows: np.ndarray = np.arange(0)  # np.arange(n) for the last batch size

    # ------------------------------------------------------------------ torch side (for algorithms)
    def distribution(self, observations: torch.Tensor) -> torch.distributions.Distribution:
        """The action distribution for a batch of observations."""
        out = self.net(observations.reshape(observations.shape[0], -1).float())
        if self.discrete:
            return torch.distributions.Categorical(logits=out)
        return torch.distributions.Independent(torch.distributions.Normal(out, self.log_std.exp()), 1)

    def log_prob_entropy(self, observations: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of ``actions`` and the entropy of the distribution."""
        dist = self.distribution(observations)
        if not self.discrete:
            actions = actions.reshape(actions.shape[0], -1)
        return dist.log_prob(actions), dist.entropy()

    # ------------------------------------------------------------------ numpy side (for workers)
    def _forward_numpy(self, x: np.ndarray) -> np.ndarray:
        """``batch_invariant_forward(self.net, x)``, from cached views of the weights when possible
        (on a GPU: torch's forward, replayed as a CUDA graph)."""
        device = self.net[0].weight.device
        if device.type != "cpu":
            return self._forward_on(device, x)  # type: ignore[arg-type]  # net[0] is a Linear: a Tensor weight
        cache = self._forward_cache
        if cache is None or not cache.valid(self.net):
            cache = self._forward_cache = _NumpyForward(self.net)
        if cache.exact:
            return cache(x)
        return batch_invariant_forward(self.net, x)

    def _forward_on(self, device: torch.device, x: np.ndarray) -> np.ndarray:
        """The forward pass on a GPU: one CUDA graph replay per call, through pinned host buffers
        kept per batch shape (:class:`~corral.rl.device_forward.GraphedDeviceForward`); actions then
        come from the same numpy sampling code as on cpu."""
        forward = getattr(self, "_device_forward", None)  # None also for a policy pickled before it existed
        if forward is None or not forward.valid(self.net):
            forward = self._device_forward = GraphedDeviceForward(self.net, device)
        return forward(x)

    def __getstate__(self) -> dict[str, Any]:
        # The forward caches hold views of this object's parameters (and the GPU one pinned buffers
        # and CUDA graphs): never copy or pickle them.
        state = self.__dict__.copy()
        state["_forward_cache"] = None
        state["_device_forward"] = None
        return state

    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Sample (or, when deterministic, pick the mode of) one action per observation."""
        obs = np.asarray(observations, dtype=np.float32)
        n = obs.shape[0]
        # Batch-invariant forward: a slot's actions must not depend on the batch it is in.
        out = self._forward_numpy(obs.reshape(n, -1)).astype(np.float64)
        streams = None if self.deterministic else self.streams_for(n)
        if self.discrete:
            # The ufuncs' own reduce/accumulate are what max/sum/cumsum run, minus a python layer.
            log_p = out - np.maximum.reduce(out, axis=1, keepdims=True)
            log_p -= np.log(np.add.reduce(np.exp(log_p), axis=1, keepdims=True))
            if streams is None:
                actions = log_p.argmax(axis=1)
            else:
                cdf = np.add.accumulate(np.exp(log_p), axis=1)
                u = streams.uniform(1) * cdf[:, -1:]
                actions = np.minimum(np.add.reduce(cdf < u, axis=1), self.n_actions - 1)
            rows = self._rows
            if len(rows) != n:
                rows = self._rows = np.arange(n)
            logp = log_p[rows, actions]
            actions = actions.astype(np.int64, copy=False)
        else:
            log_std = self.log_std.detach().cpu().numpy().astype(np.float64)
            if streams is None:
                eps = np.zeros_like(out)
            else:
                eps = streams.normal(self.act_dim)
            actions = out + np.exp(log_std) * eps
            logp = (-0.5 * eps**2 - log_std - _LOG_SQRT_2PI).sum(axis=1)
            actions = actions.astype(np.float32).reshape((n, *self.act_shape))
        if streams is not None:
            streams.advance()
        return actions, {"log_prob": logp.astype(np.float32)}

    def get_param_values(self) -> dict[str, np.ndarray]:
        """Parameters as numpy arrays."""
        return params_to_numpy(self)

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        """Load parameters."""
        numpy_to_params(self, params)


def build_mlp_policy(config: MLPPolicyConfig, *, env_spec: EnvSpec) -> MLPPolicy:
    """Build the policy from its config."""
    return MLPPolicy(env_spec, config.hidden_sizes, config.activation, config.init_log_std)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``policy=mlp``."""
    register("policy", "mlp", build_mlp_policy, config=MLPPolicyConfig,
             help="MLP policy: categorical for Discrete, Gaussian for Box actions")
