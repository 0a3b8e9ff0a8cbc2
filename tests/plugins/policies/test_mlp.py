"""MLPPolicy: batch-invariant sampling, correct distributions, parameters and sampling state."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.plugins.policies.mlp import MLPPolicy

ENVS = ["CartPole-v1", "Pendulum-v1"]


def make_policy(env_id: str, seed: int = 0, **kw: object) -> MLPPolicy:
    torch.manual_seed(seed)
    return MLPPolicy(EnvSpec.from_env(gym.make(env_id)), **kw)


def observations(env_id: str, n: int, seed: int = 0) -> np.ndarray:
    space = gym.make(env_id).observation_space
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, *space.shape)) * 2).astype(np.float32)


@pytest.mark.parametrize("env_id", ENVS)
def test_a_slots_actions_do_not_depend_on_its_batch(env_id: str) -> None:
    """Same slot seed, same observation: bit-identical action and log-prob, alone or batched."""
    k = 7
    seeds = np.random.SeedSequence(3).spawn(k)
    base = make_policy(env_id)
    batched = copy.deepcopy(base)
    batched.seed(seeds)
    alone = []
    for s in seeds:
        p = copy.deepcopy(base)
        p.seed([s])
        alone.append(p)
    subset = copy.deepcopy(base)
    subset.seed([seeds[5], seeds[2]])
    for step in range(6):
        if step == 3:  # a new episode in some slots
            mask = np.array([True, False, True, False, False, True, False])
            batched.reset(mask)
            subset.reset(mask[[5, 2]])
            for p, m in zip(alone, mask):
                if m:
                    p.reset()
        obs = observations(env_id, k, seed=step)
        actions, infos = batched.get_actions(obs)
        for j, p in enumerate(alone):
            a, i = p.get_actions(obs[j : j + 1])
            np.testing.assert_array_equal(a[0], actions[j])
            np.testing.assert_array_equal(i["log_prob"][0], infos["log_prob"][j])
        a, i = subset.get_actions(obs[[5, 2]])
        np.testing.assert_array_equal(a, actions[[5, 2]])
        np.testing.assert_array_equal(i["log_prob"], infos["log_prob"][[5, 2]])


@pytest.mark.parametrize("env_id", ENVS)
def test_log_prob_matches_the_torch_distribution(env_id: str) -> None:
    box = isinstance(gym.make(env_id).action_space, gym.spaces.Box)
    policy = make_policy(env_id, **({"init_log_std": -0.3} if box else {}))
    policy.seed(np.random.SeedSequence(0).spawn(32))
    obs = observations(env_id, 32)
    actions, infos = policy.get_actions(obs)
    with torch.no_grad():
        logp, entropy = policy.log_prob_entropy(torch.from_numpy(obs), torch.as_tensor(actions))
    np.testing.assert_allclose(infos["log_prob"], logp.numpy(), rtol=1e-4, atol=1e-4)
    space = gym.make(env_id).action_space
    assert all(space.contains(a) for a in actions) or not isinstance(space, gym.spaces.Discrete)
    if isinstance(space, gym.spaces.Box):
        assert actions.shape == (32, *space.shape) and actions.dtype == np.float32
    else:
        assert actions.shape == (32,) and actions.dtype == np.int64


def test_categorical_samples_follow_the_probabilities() -> None:
    policy = make_policy("CartPole-v1")
    params = policy.get_param_values()
    last_w = max(k for k in params if k.endswith(".weight"))
    last_b = max(k for k in params if k.endswith(".bias"))
    params[last_w][:] = 0
    params[last_b][:] = [0.0, np.log(3.0)]  # p = [0.25, 0.75] everywhere
    policy.set_param_values(params)
    policy.seed(np.random.SeedSequence(1).spawn(100))
    obs = observations("CartPole-v1", 100)
    counts = np.zeros(2)
    for _ in range(40):
        a, infos = policy.get_actions(obs)
        counts += np.bincount(a, minlength=2)
        np.testing.assert_allclose(infos["log_prob"], np.log(np.where(a == 1, 0.75, 0.25)), rtol=1e-6)
    assert abs(counts[1] / counts.sum() - 0.75) < 0.02


def test_gaussian_samples_follow_mean_and_std() -> None:
    policy = make_policy("Pendulum-v1", init_log_std=-0.5)
    policy.seed(np.random.SeedSequence(2).spawn(50))
    obs = observations("Pendulum-v1", 50)
    with torch.no_grad():
        mean = policy.distribution(torch.from_numpy(obs)).mean.numpy()
    samples = []
    for _ in range(80):
        samples.append(policy.get_actions(obs)[0])
    dev = (np.stack(samples) - mean[None]).ravel()
    assert abs(dev.mean()) < 0.03
    assert abs(dev.std() - np.exp(-0.5)) < 0.03


@pytest.mark.parametrize("env_id", ENVS)
def test_deterministic_mode_returns_the_mode(env_id: str) -> None:
    policy = make_policy(env_id)
    policy.seed(np.random.SeedSequence(0).spawn(16))
    policy.deterministic = True
    obs = observations(env_id, 16)
    a1, _ = policy.get_actions(obs)
    a2, _ = policy.get_actions(obs)
    np.testing.assert_array_equal(a1, a2)
    with torch.no_grad():
        dist = policy.distribution(torch.from_numpy(obs))
        mode = dist.probs.argmax(-1).numpy() if policy.discrete else dist.mean.numpy()
    if policy.discrete:
        np.testing.assert_array_equal(a1, mode)
    else:
        np.testing.assert_allclose(a1, mode, rtol=1e-5, atol=1e-6)
    policy.deterministic = False
    assert not np.array_equal(policy.get_actions(obs)[0], policy.get_actions(obs)[0])


def test_param_values_round_trip_and_change_actions() -> None:
    a, b = make_policy("Pendulum-v1", seed=0), make_policy("Pendulum-v1", seed=1)
    for p in (a, b):
        p.deterministic = True
    obs = observations("Pendulum-v1", 8)
    assert not np.array_equal(a.get_actions(obs)[0], b.get_actions(obs)[0])
    params = b.get_param_values()
    assert all(isinstance(v, np.ndarray) for v in params.values())
    assert "log_std" in params
    a.set_param_values(params)
    np.testing.assert_array_equal(a.get_actions(obs)[0], b.get_actions(obs)[0])
    # The values are copies: changing them does not touch the policy.
    params["log_std"][:] = 5.0
    assert float(b.log_std.detach()[0]) == 0.0


def test_get_action_single() -> None:
    policy = make_policy("CartPole-v1")
    policy.seed([np.random.SeedSequence(0)])
    action, info = policy.get_action(observations("CartPole-v1", 1)[0])
    assert action in (0, 1) and np.ndim(info["log_prob"]) == 0


def test_seed_count_must_match_the_batch() -> None:
    policy = make_policy("CartPole-v1")
    policy.seed(np.random.SeedSequence(0).spawn(3))
    with pytest.raises(ValueError, match="3 environment slots"):
        policy.get_actions(observations("CartPole-v1", 4))
    unseeded = make_policy("CartPole-v1")
    assert unseeded.get_actions(observations("CartPole-v1", 4))[0].shape == (4,)


def test_sampling_state_round_trip() -> None:
    policy = make_policy("Pendulum-v1")
    policy.seed(np.random.SeedSequence(4).spawn(3))
    obs = observations("Pendulum-v1", 3)
    policy.reset()
    policy.get_actions(obs)
    state = copy.deepcopy(policy.get_sampling_state())
    expected = [policy.get_actions(obs)[0] for _ in range(3)]
    other = make_policy("Pendulum-v1")  # same weights (same torch seed), no streams yet
    other.set_sampling_state(state)
    for e in expected:
        np.testing.assert_array_equal(other.get_actions(obs)[0], e)


def test_unsupported_spaces_are_config_errors() -> None:
    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    with pytest.raises(ConfigError) as info:
        MLPPolicy(EnvSpec(gym.spaces.Discrete(3), gym.spaces.Discrete(2)))
    # how to give the environment one: "flatten it with a wrapper" did not say where or with what
    assert str(info.value) == ("policy=mlp needs a Box observation space (numbers), got Discrete(3); an environment "
                               "plugin can wrap the environment in gymnasium.wrappers.FlattenObservation (one-hot for "
                               "Discrete) to give it one (docs/plugins.md)")
    with pytest.raises(ConfigError, match="Discrete and Box"):
        MLPPolicy(EnvSpec(box, gym.spaces.MultiBinary(2)))


def test_init_log_std_for_discrete_actions_is_a_config_error_not_ignored() -> None:
    """Discrete actions have no log std: a value other than the default is refused, for policy=mlp and gru."""
    from corral.plugins.policies.gru import GRUPolicy

    spec = EnvSpec.from_env(gym.make("CartPole-v1"))
    for make in (lambda s, v: MLPPolicy(s, init_log_std=v), lambda s, v: GRUPolicy(s, init_log_std=v)):
        with pytest.raises(ConfigError, match=r"policy.init_log_std=-1.0 sets the log std of Box actions.*Discrete\(2\)"):
            make(spec, -1.0)
        make(spec, 0.0)
