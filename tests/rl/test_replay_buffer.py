"""ReplayBuffer: TERMINAL vs TIMEOUT vs fragment bootstrap flags, ring overwrite, seeded sampling, snapshots."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from corral.framework.batch import EpisodeBatch, StepType
from corral.rl.replay_buffer import ReplayBuffer

F, M, T, O = StepType.FIRST, StepType.MID, StepType.TERMINAL, StepType.TIMEOUT


def batch() -> EpisodeBatch:
    """Three episodes: one TERMINAL, one TIMEOUT, one fragment cut at the batch boundary (last step MID)."""
    obs = np.arange(8, dtype=np.float32).reshape(8, 1)
    return EpisodeBatch(
        observations=obs,
        actions=np.arange(8, dtype=np.int64),
        rewards=np.ones(8, dtype=np.float32),
        step_types=np.array([F, M, T, F, O, F, M, M], dtype=np.uint8),
        lengths=np.array([3, 2, 3]),
        last_observations=np.array([[100.0], [200.0], [300.0]], dtype=np.float32),
        allow_fragments=True,
    )


def test_terminal_timeout_and_fragment_ends_are_kept_apart() -> None:
    buf = ReplayBuffer(100, seed=0)
    assert buf.add(batch()) == 8 and len(buf) == 8
    data = buf.get(np.arange(8))
    # Only the TERMINAL step stops bootstrapping; TIMEOUT and the fragment's MID end bootstrap.
    assert data["terminals"].tolist() == [False, False, True, False, False, False, False, False]
    assert data["step_types"].tolist() == [F, M, T, F, O, F, M, M]
    # The next observation is the next row inside an episode and last_observations at its end.
    assert data["next_observations"][:, 0].tolist() == [1, 2, 100, 4, 200, 6, 7, 300]
    assert data["actions"].dtype == np.int64 and data["actions"].tolist() == list(range(8))


def test_ring_overwrites_the_oldest_transitions() -> None:
    buf = ReplayBuffer(5, seed=0)
    buf.add(batch())
    assert len(buf) == 5 and buf.total_added == 8
    assert sorted(buf.get(np.arange(5))["observations"][:, 0].tolist()) == [3, 4, 5, 6, 7]
    buf.add(batch())
    assert sorted(buf.get(np.arange(5))["observations"][:, 0].tolist()) == [3, 4, 5, 6, 7]
    assert buf.total_added == 16


def test_sampling_is_seeded_and_resumes_exactly_from_state_dict() -> None:
    a, b = ReplayBuffer(50, seed=7), ReplayBuffer(50, seed=7)
    a.add(batch())
    b.add(batch())
    assert np.array_equal(a.sample_indices(32), b.sample_indices(32))
    other = ReplayBuffer(50, seed=8)
    other.add(batch())
    assert not np.array_equal(b.sample_indices(32), other.sample_indices(32)), "the seed must matter"
    b.sample_indices(32)
    state = copy.deepcopy(a.state_dict())
    expected = [a.sample(16) for _ in range(3)]
    restored = ReplayBuffer(50, seed=123)
    restored.load_state_dict(state)
    for want in expected:
        got = restored.sample(16)
        assert all(np.array_equal(got[k], want[k]) for k in want)
    # The filled part only: a snapshot of a large, mostly empty buffer stays small.
    assert len(state["data"]["observations"]) == 8


def test_sample_torch_types_and_errors() -> None:
    buf = ReplayBuffer(10, seed=0)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(4)
    buf.add(batch())
    t = buf.sample_torch(4)
    assert str(t["actions"].dtype) == "torch.int64" and str(t["observations"].dtype) == "torch.float32"
    assert str(t["terminals"].dtype) == "torch.float32" and tuple(t["next_observations"].shape) == (4, 1)
    other = EpisodeBatch(observations=np.zeros((1, 3), np.float32), actions=np.zeros(1, np.int64),
                         rewards=np.zeros(1), step_types=[T], lengths=[1], last_observations=np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match="shape"):
        buf.add(other)
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(11).load_state_dict(buf.state_dict())
