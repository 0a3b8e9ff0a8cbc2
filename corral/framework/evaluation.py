"""Deterministic evaluation episodes, independent of the training sampler's RNG streams."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from corral.framework.env import child_seed, make_env, seed_int
from corral.framework.policy import Policy

#: Spawn-key branch reserved for evaluation seeds (workers use 0, 1, ...).
EVAL_BRANCH = 2**31 - 1


def evaluate(
    policy: Policy,
    envs: Any,
    *,
    n_episodes: int,
    seed: int,
    max_episode_length: int,
) -> dict[str, float]:
    """Run ``n_episodes`` with a deterministic copy of ``policy``; same seeds every call.

    Returns ``eval/return_mean``, ``eval/return_std``, ``eval/return_min``, ``eval/return_max``
    and ``eval/episode_length``.
    """
    agent = copy.deepcopy(policy)
    agent.deterministic = True
    root = child_seed(np.random.SeedSequence(seed), EVAL_BRANCH)
    agent.seed([child_seed(root, i, 1) for i in range(1)])
    env = make_env(envs)
    returns, lengths = [], []
    try:
        for i in range(n_episodes):
            obs, _ = env.reset(seed=seed_int(child_seed(root, i, 0)))
            agent.reset()
            total, steps = 0.0, 0
            while True:
                action, _ = agent.get_action(obs)
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                steps += 1
                if terminated or truncated or steps >= max_episode_length:
                    break
            returns.append(total)
            lengths.append(steps)
    finally:
        env.close()
    r = np.asarray(returns)
    return {
        "eval/return_mean": float(r.mean()),
        "eval/return_std": float(r.std()),
        "eval/return_min": float(r.min()),
        "eval/return_max": float(r.max()),
        "eval/episode_length": float(np.mean(lengths)),
    }


__all__ = ["evaluate", "EVAL_BRANCH"]
