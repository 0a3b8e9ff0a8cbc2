"""VecWorker: n_envs environments in lock-step give the same episodes as n_envs default workers."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvFactory, EnvSpec, child_seed
from corral.plugins.policies.mlp import MLPPolicy
from corral.plugins.workers.default import DefaultWorker
from corral.plugins.workers.vec import VecWorker

LIMITS = {"CartPole-v1": 200, "Pendulum-v1": 40}


def make_policy(env_id: str) -> MLPPolicy:
    torch.manual_seed(0)
    return MLPPolicy(EnvSpec.from_env(gym.make(env_id)), hidden_sizes=(32, 32))


def vec_and_defaults(env_id: str, k: int, root: int = 123) -> tuple[VecWorker, list[DefaultWorker]]:
    """A VecWorker with k envs and k DefaultWorkers, slot j of the one seeded like worker j."""
    seeds = np.random.SeedSequence(root).spawn(k)
    policy = make_policy(env_id)
    vec = VecWorker(seed=1, max_episode_length=LIMITS[env_id], n_envs=k, env_seeds=seeds)
    vec.update_env(EnvFactory(env_id))
    vec.update_agent(copy.deepcopy(policy))
    defaults = []
    for j in range(k):
        d = DefaultWorker(seed=1000 + j, max_episode_length=LIMITS[env_id], env_seeds=[seeds[j]])
        d.update_env(EnvFactory(env_id))
        d.update_agent(copy.deepcopy(policy))
        defaults.append(d)
    return vec, defaults


def assert_same(got: EpisodeBatch, expected: EpisodeBatch) -> None:
    for name in ("observations", "actions", "rewards", "step_types", "lengths", "last_observations"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)
    assert got.agent_infos.keys() == expected.agent_infos.keys() == {"log_prob"}
    np.testing.assert_allclose(got.agent_infos["log_prob"], expected.agent_infos["log_prob"], rtol=1e-5, atol=1e-6)
    assert got.equals(expected, infos_rtol=1e-5)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_vec_equals_k_default_workers(env_id: str) -> None:
    k = 4
    vec, defaults = vec_and_defaults(env_id, k)
    for _ in range(3):  # env RNG and noise streams carry over between rollouts
        got = vec.rollout()
        assert got.n_episodes == k and got.complete.all()
        assert_same(got, EpisodeBatch.concatenate(*[d.rollout() for d in defaults]))


def test_one_env_vec_worker_is_a_default_worker() -> None:
    """Without env_seeds both derive slot 0's stream from the worker seed the same way."""
    policy = make_policy("Pendulum-v1")
    vec = VecWorker(seed=77, max_episode_length=40, n_envs=1)
    default = DefaultWorker(seed=77, max_episode_length=40)
    for w in (vec, default):
        w.update_env(EnvFactory("Pendulum-v1"))
        w.update_agent(copy.deepcopy(policy))
    for _ in range(2):
        assert_same(vec.rollout(), default.rollout())


def test_slot_seeds_come_from_the_worker_seed() -> None:
    policy = make_policy("CartPole-v1")
    vec = VecWorker(seed=5, max_episode_length=200, n_envs=3)
    vec.update_env(EnvFactory("CartPole-v1"))
    vec.update_agent(copy.deepcopy(policy))
    expected = []
    for j in range(3):
        d = DefaultWorker(seed=0, max_episode_length=200, env_seeds=[child_seed(np.random.SeedSequence(5), j)])
        d.update_env(EnvFactory("CartPole-v1"))
        d.update_agent(copy.deepcopy(policy))
        expected.append(d.rollout())
    assert_same(vec.rollout(), EpisodeBatch.concatenate(*expected))


def slot_episodes(defaults: list[DefaultWorker], n: int) -> list[list[EpisodeBatch]]:
    return [d.rollout(n_episodes=n).split() for d in defaults]


def simulate(lengths: list[list[int]], n_episodes: int | None, min_steps: int | None) -> list[tuple[int, int]]:
    """(slot, index in slot) of the episodes a VecWorker runs, in start order (its contract)."""
    k = len(lengths)
    first = k if n_episodes is None else min(k, n_episodes)
    started = [(j, 0) for j in range(first)]
    current = {j: 0 for j in range(first)}
    elapsed = {j: 0 for j in range(first)}
    steps = 0
    while current:
        steps += len(current)
        for j in sorted(current):
            elapsed[j] += 1
        for j in sorted(current):
            if elapsed[j] == lengths[j][current[j]]:
                more = len(started) < n_episodes if n_episodes is not None else steps < (min_steps or 0)
                if more:
                    current[j] += 1
                    elapsed[j] = 0
                    started.append((j, current[j]))
                else:
                    del current[j]
    return started


@pytest.mark.parametrize("n", [1, 3, 4, 11])
def test_rollout_n_episodes_gives_exactly_n_in_start_order(n: int) -> None:
    k = 4
    vec, defaults = vec_and_defaults("CartPole-v1", k, root=8)
    got = vec.rollout(n_episodes=n)
    assert got.n_episodes == n and got.complete.all()
    per_slot = slot_episodes(defaults, max(1, n - k + 1))  # no slot can run more
    order = simulate([[len(e) for e in eps] for eps in per_slot], n, None)
    assert len(order) == n
    assert_same(got, EpisodeBatch.concatenate(*[per_slot[j][i] for j, i in order]))


@pytest.mark.parametrize("m", [1, 50, 250])
def test_rollout_min_steps_gives_whole_episodes_totalling_at_least_m(m: int) -> None:
    k = 3
    vec, defaults = vec_and_defaults("CartPole-v1", k, root=9)
    got = vec.rollout(min_steps=m)
    assert len(got) >= m and got.complete.all()
    assert got.n_episodes >= k  # every slot runs at least one episode
    per_slot = slot_episodes(defaults, got.n_episodes - k + 1)  # no slot can run more
    order = simulate([[len(e) for e in eps] for eps in per_slot], None, m)
    assert_same(got, EpisodeBatch.concatenate(*[per_slot[j][i] for j, i in order]))


def test_worker_limit_cuts_with_timeout() -> None:
    vec = VecWorker(seed=3, max_episode_length=12, n_envs=5)
    vec.update_env(EnvFactory("Pendulum-v1"))
    vec.update_agent(make_policy("Pendulum-v1"))
    got = vec.rollout(n_episodes=7)
    assert (got.lengths == 12).all()
    assert (got.step_types[got.starts] == StepType.FIRST).all()
    assert (got.step_types[np.cumsum(got.lengths) - 1] == StepType.TIMEOUT).all()


def test_continuous_actions_are_clipped_for_the_env_only() -> None:
    policy = make_policy("Pendulum-v1")
    params = policy.get_param_values()
    params["log_std"][:] = 1.5  # wide noise: many actions outside [-2, 2]
    policy.set_param_values(params)
    vec = VecWorker(seed=3, max_episode_length=30, n_envs=2)
    vec.update_env(EnvFactory("Pendulum-v1"))
    vec.update_agent(policy)
    got = vec.rollout()
    assert (np.abs(got.actions) > 2).any()  # recorded as sampled (log-probs refer to them)
    env = gym.make("Pendulum-v1")
    env.reset(seed=0)
    env.unwrapped.state = np.array([np.arctan2(got.observations[0, 1], got.observations[0, 0]), got.observations[0, 2]])
    _, reward, *_ = env.step(np.clip(got.actions[0], -2, 2))
    np.testing.assert_allclose(got.rewards[0], reward, rtol=1e-5)
