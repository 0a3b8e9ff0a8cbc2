"""Preallocated per-slot storage for episodes while a worker builds them."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from corral.framework.batch import EpisodeBatch, StepType


def space_dtype(space: gym.Space) -> np.dtype:
    """The numpy dtype a worker stores for values of ``space``."""
    if isinstance(space, gym.spaces.Discrete):
        return np.dtype(np.int64)
    if isinstance(space, gym.spaces.Box):
        return np.dtype(space.dtype) if np.issubdtype(space.dtype, np.floating) else np.dtype(np.float32)
    return np.dtype(getattr(space, "dtype", None) or np.float32)


class EpisodeBuffers:
    """``[n_slots, max_length, ...]`` arrays for observations, actions, rewards, step types and agent infos."""

    def __init__(self, n_slots: int, max_length: int, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.n_slots = n_slots
        self.max_length = max_length
        obs_shape = observation_space.shape or ()
        act_shape = action_space.shape or ()
        self.observations = np.zeros((n_slots, max_length, *obs_shape), dtype=space_dtype(observation_space))
        self.actions = np.zeros((n_slots, max_length, *act_shape), dtype=space_dtype(action_space))
        self.rewards = np.zeros((n_slots, max_length), dtype=np.float32)
        self.step_types = np.full((n_slots, max_length), StepType.MID, dtype=np.uint8)
        self.agent_infos: dict[str, np.ndarray] = {}

    def write_agent_infos(self, slots: np.ndarray | int, steps: np.ndarray | int, infos: dict[str, np.ndarray], rows: Any) -> None:
        """Store ``infos[key][rows]`` at ``[slots, steps]``, allocating a key's buffer on first sight."""
        for key, value in infos.items():
            buf = self.agent_infos.get(key)
            if buf is None:
                value = np.asarray(value)
                buf = np.zeros((self.n_slots, self.max_length, *value.shape[1:]), dtype=value.dtype)
                self.agent_infos[key] = buf
            buf[slots, steps] = value[rows]

    def take(self, slot: int, start: int, stop: int, last_observation: np.ndarray) -> dict[str, Any]:
        """Copy steps ``[start, stop)`` of ``slot`` out as one episode's arrays."""
        return {
            "observations": self.observations[slot, start:stop].copy(),
            "actions": self.actions[slot, start:stop].copy(),
            "rewards": self.rewards[slot, start:stop].copy(),
            "step_types": self.step_types[slot, start:stop].copy(),
            "agent_infos": {k: v[slot, start:stop].copy() for k, v in self.agent_infos.items()},
            "last_observation": np.array(last_observation, dtype=self.observations.dtype, copy=True),
        }


class StepLog:
    """Time-major log of a vectorised rollout: row ``r`` holds what every slot saw and did at step ``r``.

    The per-step cost is a few whole-row copies (``observations[r] = obs`` for all slots at once),
    with no fancy indexing and no per-episode bookkeeping; an episode is just (slot, first row,
    length), and :meth:`gather` turns a list of them into an EpisodeBatch with one gather per array.
    Storage grows by doubling and is reused by later rollouts.
    """

    def __init__(self, n_slots: int, observation_space: gym.Space, action_space: gym.Space, capacity: int = 64) -> None:
        self.n_slots = n_slots
        self.capacity = max(1, int(capacity))
        obs_shape = observation_space.shape or ()
        act_shape = action_space.shape or ()
        self.observations = np.zeros((self.capacity, n_slots, *obs_shape), dtype=space_dtype(observation_space))
        self.actions = np.zeros((self.capacity, n_slots, *act_shape), dtype=space_dtype(action_space))
        self.rewards = np.zeros((self.capacity, n_slots), dtype=np.float32)
        self.agent_infos: dict[str, np.ndarray] = {}

    def reserve(self, rows: int, keep: int = 0) -> None:
        """Make room for ``rows`` rows, keeping the first ``keep`` rows' contents."""
        if rows <= self.capacity:
            return
        capacity = max(rows, 2 * self.capacity)

        def grown(a: np.ndarray) -> np.ndarray:
            b = np.zeros((capacity, *a.shape[1:]), dtype=a.dtype)
            b[:keep] = a[:keep]
            return b

        self.observations, self.actions, self.rewards = grown(self.observations), grown(self.actions), grown(self.rewards)
        self.agent_infos = {k: grown(v) for k, v in self.agent_infos.items()}
        self.capacity = capacity

    def write(self, row: int, observations: np.ndarray, actions: np.ndarray, infos: dict[str, np.ndarray]) -> None:
        """Store one step of every slot (rewards are written separately, after the step)."""
        self.observations[row] = observations
        self.actions[row] = actions
        for key, value in infos.items():
            buf = self.agent_infos.get(key)
            if buf is None:
                value = np.asarray(value)
                buf = np.zeros((self.capacity, self.n_slots, *value.shape[1:]), dtype=value.dtype)
                self.agent_infos[key] = buf
            buf[row] = value

    def gather(self, slots: np.ndarray, first_rows: np.ndarray, lengths: np.ndarray, terminated: np.ndarray,
               last_observations: list[np.ndarray]) -> EpisodeBatch:
        """An EpisodeBatch of the episodes given in batch order: episode ``i`` is slot ``slots[i]``'s
        rows ``first_rows[i] : first_rows[i] + lengths[i]``, ended by termination or by a cut."""
        if not len(lengths):
            raise ValueError("no episodes to batch")
        lengths = np.asarray(lengths, dtype=np.int64)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        total = int(ends[-1]) if len(ends) else 0
        offset_in_episode = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        rows = np.repeat(np.asarray(first_rows, dtype=np.int64), lengths) + offset_in_episode
        cols = np.repeat(np.asarray(slots, dtype=np.int64), lengths)
        step_types = np.full(total, StepType.MID, dtype=np.uint8)
        step_types[starts] = StepType.FIRST
        step_types[ends - 1] = np.where(terminated, StepType.TERMINAL, StepType.TIMEOUT)
        return EpisodeBatch(
            observations=self.observations[rows, cols],
            actions=self.actions[rows, cols],
            rewards=self.rewards[rows, cols],
            step_types=step_types,
            lengths=lengths,
            last_observations=np.stack(last_observations),
            agent_infos={k: v[rows, cols] for k, v in self.agent_infos.items()},
            episode_infos={},
        )


def batch_from_episodes(episodes: list[dict[str, Any]], allow_fragments: bool = False) -> EpisodeBatch:
    """Join episodes produced by :meth:`EpisodeBuffers.take` into one EpisodeBatch.

    An episode dict may carry ``episode_infos`` (one scalar per key; every episode the same keys).
    """
    if not episodes:
        raise ValueError("no episodes to batch")
    keys = episodes[0]["agent_infos"].keys()
    episode_keys = episodes[0].get("episode_infos", {}).keys()
    return EpisodeBatch(
        observations=np.concatenate([e["observations"] for e in episodes]),
        actions=np.concatenate([e["actions"] for e in episodes]),
        rewards=np.concatenate([e["rewards"] for e in episodes]),
        step_types=np.concatenate([e["step_types"] for e in episodes]),
        lengths=np.array([len(e["rewards"]) for e in episodes], dtype=np.int64),
        last_observations=np.stack([e["last_observation"] for e in episodes]),
        agent_infos={k: np.concatenate([e["agent_infos"][k] for e in episodes]) for k in keys},
        episode_infos={k: np.asarray([e["episode_infos"][k] for e in episodes]) for k in episode_keys},
        allow_fragments=allow_fragments,
    )


def action_clipper(space: gym.Space) -> Callable[[np.ndarray], np.ndarray] | None:
    """For a Box action space, a function clipping actions to its bounds; otherwise None."""
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        low, high = space.low, space.high
        return lambda a: np.clip(a, low, high)
    return None
