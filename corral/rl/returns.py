"""Discounted returns and generalised advantage estimation over an EpisodeBatch."""

from __future__ import annotations

import numpy as np

from corral.framework.batch import EpisodeBatch, StepType


def gae(
    episodes: EpisodeBatch,
    values: np.ndarray,
    last_values: np.ndarray,
    discount: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and value targets (``advantages + values``), one per step.

    ``values[i]`` is V(observation i); ``last_values[e]`` is V(last observation of episode e).
    A TERMINAL end has no future value; a TIMEOUT end (or a fragment) bootstraps from
    ``last_values`` - the difference that makes time limits harmless.
    """
    values = np.asarray(values, dtype=np.float64)
    rewards = episodes.rewards.astype(np.float64)
    advantages = np.zeros(len(episodes), dtype=np.float64)
    for e, (start, length) in enumerate(zip(episodes.starts.tolist(), episodes.lengths.tolist())):
        end = start + length
        terminal = episodes.step_types[end - 1] == StepType.TERMINAL
        next_values = np.empty(length)
        next_values[:-1] = values[start + 1 : end]
        next_values[-1] = 0.0 if terminal else float(last_values[e])
        deltas = rewards[start:end] + discount * next_values - values[start:end]
        acc = 0.0
        coef = discount * gae_lambda
        out = advantages[start:end]
        for i in range(length - 1, -1, -1):
            acc = deltas[i] + coef * acc
            out[i] = acc
    return advantages, advantages + values


def discounted_returns(episodes: EpisodeBatch, discount: float) -> np.ndarray:
    """Reward-to-go per step, restarting at every episode (no bootstrapping)."""
    out = np.zeros(len(episodes), dtype=np.float64)
    for start, length in zip(episodes.starts.tolist(), episodes.lengths.tolist()):
        acc = 0.0
        for i in range(start + length - 1, start - 1, -1):
            acc = episodes.rewards[i] + discount * acc
            out[i] = acc
    return out
