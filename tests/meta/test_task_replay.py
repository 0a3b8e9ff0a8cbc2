"""Per-task replay buffers: routing by task id, stacked minibatches, exact snapshots."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from corral.framework.batch import EpisodeBatch, StepType
from corral.meta.task_replay import TaskReplayBuffers


def episodes(task_ids: list[int], length: int = 4) -> EpisodeBatch:
    n = len(task_ids)
    steps = n * length
    types = np.tile([StepType.FIRST] + [StepType.MID] * (length - 2) + [StepType.TIMEOUT], n)
    # observation = task id, so a sample shows which buffer it came from
    obs = np.repeat(np.asarray(task_ids, dtype=np.float32), length)[:, None].repeat(2, 1)
    return EpisodeBatch(
        observations=obs, actions=np.zeros((steps, 1), np.float32), rewards=np.arange(steps, dtype=np.float32),
        step_types=types, lengths=np.full(n, length), last_observations=obs[::length],
        episode_infos={"task_id": np.asarray(task_ids)},
    )


def test_episodes_go_to_their_task_and_samples_stack_per_task() -> None:
    buffers = TaskReplayBuffers(100, np.random.SeedSequence(0))
    buffers.add(episodes([3, 1, 3, 7]))
    assert buffers.task_ids == [1, 3, 7]
    assert [len(buffers.buffers[t]) for t in (1, 3, 7)] == [4, 8, 4] and len(buffers) == 16
    batch = buffers.sample([7, 3, 3], 5)
    assert batch["observations"].shape == (3, 5, 2) and batch["rewards"].shape == (3, 5)
    assert (batch["observations"][0] == 7).all() and (batch["observations"][1:] == 3).all()


def test_episodes_without_tasks_are_refused() -> None:
    buffers = TaskReplayBuffers(100, np.random.SeedSequence(0))
    with pytest.raises(ValueError, match="task_id"):
        buffers.add(episodes([1, -1]))
    plain = episodes([1])
    with pytest.raises(ValueError, match="task_id"):
        buffers.add(EpisodeBatch(**{**plain.__dict__, "episode_infos": {}}))


def test_state_dict_round_trip_samples_identically() -> None:
    buffers = TaskReplayBuffers(10, np.random.SeedSequence(4))
    buffers.add(episodes([0, 1, 2, 0, 0]))  # task 0 overflows its 10 slots
    buffers.sample([0, 1], 3)
    state = copy.deepcopy(buffers.state_dict())
    following = buffers.sample([0, 1, 2], 6)
    fresh = TaskReplayBuffers(10, np.random.SeedSequence(99))
    fresh.load_state_dict(state)
    again = fresh.sample([0, 1, 2], 6)
    assert all(np.array_equal(following[k], again[k]) for k in following)
