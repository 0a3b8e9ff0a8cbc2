"""policy=tanh_gaussian: bounds, deterministic tanh(mean), uniform exploration, per-slot noise, log-probs."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.plugins.policies.tanh_gaussian import TanhGaussianPolicy

SPEC = EnvSpec(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)), 100)


def seeded(policy: TanhGaussianPolicy, n: int, root: int = 0) -> TanhGaussianPolicy:
    policy.seed(np.random.SeedSequence(root).spawn(n))
    return policy


def obs(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, 3)).astype(np.float32)


def test_actions_lie_in_the_bounds_and_deterministic_is_scaled_tanh_mean() -> None:
    torch.manual_seed(0)
    policy = seeded(TanhGaussianPolicy(SPEC, hidden_sizes=[16]), 64)
    actions, infos = policy.get_actions(obs(64))
    assert actions.shape == (64, 2) and actions.dtype == np.float32 and infos == {}
    assert (actions[:, 0] >= -2).all() and (actions[:, 0] <= 2).all() and (actions[:, 1] >= 0).all()
    policy.deterministic = True
    det, _ = policy.get_actions(obs(64))
    with torch.no_grad():
        mean, _ = policy.mean_log_std(torch.from_numpy(obs(64)))
    expected = policy.scale_actions(np.tanh(mean.numpy().astype(np.float64)))
    np.testing.assert_allclose(det, expected, rtol=1e-5, atol=1e-6)
    assert np.array_equal(det, policy.get_actions(obs(64))[0]), "deterministic actions must repeat"


def test_random_actions_flag_gives_uniform_actions_and_travels_with_the_parameters() -> None:
    policy = TanhGaussianPolicy(SPEC, hidden_sizes=[16])
    policy.random_actions.fill_(1.0)
    worker_copy = seeded(TanhGaussianPolicy(SPEC, hidden_sizes=[16]), 2000)
    worker_copy.set_param_values(policy.get_param_values())
    assert float(worker_copy.random_actions) == 1.0
    actions, _ = worker_copy.get_actions(np.zeros((2000, 3), np.float32))  # same observation everywhere
    assert abs(actions[:, 0].mean()) < 0.15 and actions[:, 0].min() < -1.8 and actions[:, 0].max() > 1.8
    assert abs(actions[:, 1].mean() - 0.5) < 0.05


def test_noise_is_per_slot_so_batching_does_not_change_actions() -> None:
    torch.manual_seed(1)
    policy = TanhGaussianPolicy(SPEC, hidden_sizes=[32, 32])
    seeds = np.random.SeedSequence(5).spawn(4)
    batched = copy.deepcopy(policy)
    batched.seed(seeds)
    singles = []
    for s in seeds:
        p = copy.deepcopy(policy)
        p.seed([s])
        singles.append(p)
    x = obs(4)
    for _ in range(3):
        together, _ = batched.get_actions(x)
        alone = np.concatenate([p.get_actions(x[i : i + 1])[0] for i, p in enumerate(singles)])
        assert np.array_equal(together, alone)
    other = copy.deepcopy(policy)
    other.seed(np.random.SeedSequence(6).spawn(4))
    assert not np.array_equal(other.get_actions(x)[0], batched.get_actions(x)[0])


def test_rsample_log_prob_matches_the_change_of_variables() -> None:
    torch.manual_seed(2)
    policy = TanhGaussianPolicy(SPEC, hidden_sizes=[16])
    x = torch.from_numpy(obs(256))
    squashed, log_prob = policy.rsample(x, torch.Generator().manual_seed(0))
    assert squashed.abs().max() < 1 and log_prob.shape == (256,)
    mean, log_std = policy.mean_log_std(x)
    u = torch.atanh(squashed.clamp(-1 + 1e-6, 1 - 1e-6))
    reference = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1) - torch.log1p(-squashed.pow(2)).sum(-1)
    torch.testing.assert_close(log_prob, reference, rtol=1e-3, atol=1e-3)
    log_prob.sum().backward()  # reparameterised: gradients reach the network
    assert policy.net[0].weight.grad is not None
    assert torch.allclose(policy.unscale_actions(torch.tensor([[-2.0, 1.0], [0.0, 0.5]])),
                          torch.tensor([[-1.0, 1.0], [0.0, 0.0]]))


def test_discrete_or_unbounded_actions_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="policy=tanh_gaussian needs a Box .* use algo=dqn policy=qnet"):
        TanhGaussianPolicy(EnvSpec(SPEC.observation_space, gym.spaces.Discrete(3)))
    with pytest.raises(ConfigError, match="unbounded"):
        TanhGaussianPolicy(EnvSpec(SPEC.observation_space, gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)))
