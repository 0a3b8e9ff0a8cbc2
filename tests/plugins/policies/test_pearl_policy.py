"""``policy=pearl``: the posterior in the workers matches the encoder, z from the prior or posterior,
deterministic mode, parameters and sampling state."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.errors import ConfigError
from corral.meta.task_envs import make_task_env
from corral.plugins.policies.pearl import PEARLPolicy

POINT = EnvFactory(make_task_env, {"entry_point": "corral.plugins.envs.point_nav:PointNavEnv", "max_episode_steps": 5})


def make_policy(seed: int = 0, n_slots: int = 2) -> PEARLPolicy:
    torch.manual_seed(seed)
    policy = PEARLPolicy(EnvSpec.from_env(POINT()), hidden_sizes=[16], encoder_hidden_sizes=[16], latent_size=3)
    policy.seed(np.random.SeedSequence(seed).spawn(n_slots))
    return policy


def context(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, 2)).astype(np.float32), rng.uniform(-0.1, 0.1, size=(n, 2)).astype(np.float32),
            rng.normal(size=n).astype(np.float32))


def test_posterior_in_numpy_equals_the_encoder() -> None:
    policy = make_policy()
    obs, act, rew = context(7)
    policy.add_context(0, obs[:3], act[:3], rew[:3])
    policy.add_context(0, obs[3:], act[3:], rew[3:])
    assert policy.context_size(0) == 7 and policy.context_size(1) == 0
    mean, var = policy.posterior(0)
    with torch.no_grad():
        tm, tv = policy.encoder(torch.from_numpy(policy.context_features(obs, act, rew))[None])
    assert np.allclose(mean, tm[0].numpy(), atol=1e-5) and np.allclose(var, tv[0].numpy(), atol=1e-5)
    # actions enter the context scaled to [-1, 1]
    assert np.allclose(policy.context_features(obs, act, rew)[:, 2:4], act / 0.1, atol=1e-6)
    assert np.array_equal(policy.posterior(1)[0], np.zeros(3)) and np.array_equal(policy.posterior(1)[1], np.ones(3))


def test_z_from_prior_posterior_and_mean() -> None:
    policy = make_policy()
    obs, act, rew = context(5)
    policy.add_context(1, obs, act, rew)
    policy.sample_z(posterior=False)
    prior_z = policy.z
    assert not np.allclose(prior_z[0], prior_z[1])  # each slot draws its own z
    policy.reset()
    policy.sample_z(posterior=True)
    assert not np.allclose(policy.z, prior_z)  # a new episode draws new noise
    policy.deterministic = True
    policy.sample_z(posterior=True)
    assert np.array_equal(policy.z[0], np.zeros(3)) and np.allclose(policy.z[1], policy.posterior(1)[0])
    policy.explore_z = True  # mean actions but z still drawn
    policy.sample_z(posterior=True)
    assert not np.allclose(policy.z[1], policy.posterior(1)[0])
    policy.clear_context(np.array([False, True]))
    assert policy.context_size(1) == 0


def test_actions_depend_on_z_and_deterministic_actions_ignore_noise() -> None:
    policy = make_policy()
    obs = np.zeros((2, 2), np.float32)
    policy.deterministic = True
    policy.sample_z(posterior=False)  # z = 0 for both slots
    a0, _ = policy.get_actions(obs)
    assert np.array_equal(a0[0], a0[1])
    policy._z[1] = 3.0
    a1, _ = policy.get_actions(obs)
    assert np.array_equal(a1[0], a0[0]) and not np.allclose(a1[1], a0[1])
    assert np.array_equal(policy.get_actions(obs)[0], a1)  # no noise


def test_parameters_and_sampling_state_round_trip() -> None:
    policy, other = make_policy(0), make_policy(1)
    other.set_param_values(policy.get_param_values())
    assert all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), other.state_dict().values()))
    obs, act, rew = context(4)
    policy.add_context(0, obs, act, rew)
    policy.sample_z()
    state = copy.deepcopy(policy.get_sampling_state())
    following = policy.get_actions(np.ones((2, 2), np.float32))[0]
    other.set_sampling_state(state)
    assert np.array_equal(other.z, policy.z) and other.context_size(0) == 4
    assert np.array_equal(other.get_actions(np.ones((2, 2), np.float32))[0], following)


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="latent_size"):
        PEARLPolicy(EnvSpec.from_env(POINT()), latent_size=0)
    import gymnasium as gym

    with pytest.raises(ConfigError, match="Box"):
        PEARLPolicy(EnvSpec.from_env(gym.make("CartPole-v1")))
