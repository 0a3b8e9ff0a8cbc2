"""corral.rl.episode_stitching: fragments joined to the kept steps of the episodes they continue."""

from __future__ import annotations

import numpy as np
import pytest

from corral.framework.batch import EpisodeBatch, StepType
from corral.rl.episode_stitching import RunningEpisodes, join_fragments

F, M, T, X = StepType.FIRST, StepType.MID, StepType.TERMINAL, StepType.TIMEOUT


def fragments(pieces: list[tuple[int, list[int], int]]) -> EpisodeBatch:
    """Fragments given as (prior_length, step types, first observation value); observation ``i`` of a piece
    is ``value + i``, its action ``10 * value + i``."""
    obs, acts, types, lengths, prior, last = [], [], [], [], [], []
    for p, t, v in pieces:
        obs += [[float(v + i)] for i in range(len(t))]
        acts += [10 * v + i for i in range(len(t))]
        types += t
        lengths.append(len(t))
        prior.append(p)
        last.append([float(v + len(t))])
    n = len(obs)
    return EpisodeBatch(observations=np.array(obs, dtype=np.float32), actions=np.array(acts),
                        rewards=np.ones(n, dtype=np.float32), step_types=np.array(types, dtype=np.uint8),
                        lengths=np.array(lengths), last_observations=np.array(last, dtype=np.float32),
                        agent_infos={"log_prob": np.arange(n, dtype=np.float32)},
                        episode_infos={"prior_length": np.array(prior), "prior_return": np.array(prior, dtype=float)},
                        allow_fragments=True)


def test_a_continued_episode_is_joined_and_a_running_one_kept() -> None:
    """Slot 0's episode ends in the second rollout and comes out whole, its steps in order; slot 1's still runs."""
    first = fragments([(0, [F, M], 100), (0, [F], 200)])
    done, running = join_fragments(None, first, np.array([0, 1]))
    assert done is None and running is not None
    assert running.slots.tolist() == [0, 1] and running.pieces.lengths.tolist() == [2, 1]

    second = fragments([(1, [M, M], 201), (2, [M, T], 102), (0, [F], 300)])
    done, running = join_fragments(running, second, np.array([1, 0, 2]))
    assert done is not None and done.n_episodes == 1 and done.complete.all()
    assert done.observations[:, 0].tolist() == [100, 101, 102, 103]
    assert done.actions.tolist() == [1000, 1001, 1020, 1021]
    assert done.step_types.tolist() == [F, M, M, T]
    assert done.last_observations[:, 0].tolist() == [104]
    assert done.agent_infos["log_prob"].tolist() == [0, 1, 2, 3]  # the kept steps' infos, then the fragment's
    assert not done.episode_infos and not done.allow_fragments
    assert running is not None and running.slots.tolist() == [1, 2]
    assert running.pieces.observations[:, 0].tolist() == [200, 201, 202, 300]
    assert running.pieces.step_types.tolist() == [F, M, M, F]


def test_episodes_that_end_within_one_rollout_come_out_as_they_are() -> None:
    """Nothing kept, fragments that start and end in one rollout: the joined batch is those episodes."""
    batch = fragments([(0, [F, M, X], 0), (0, [F, T], 50)])
    done, running = join_fragments(None, batch, np.array([0, 1]))
    assert running is None and done is not None
    assert done.lengths.tolist() == [3, 2] and done.step_types.tolist() == [F, M, X, F, T]


def test_a_fragment_that_continues_nothing_kept_is_an_error() -> None:
    """A continuation without the episode's earlier steps would make a wrong episode: refused."""
    with pytest.raises(ValueError, match="earlier steps were not kept"):
        join_fragments(None, fragments([(3, [M, T], 0)]), np.array([0]))
    _, kept = join_fragments(None, fragments([(0, [F], 0)]), np.array([0]))
    with pytest.raises(ValueError, match="earlier steps were not kept"):
        join_fragments(kept, fragments([(1, [M, T], 0)]), np.array([1]))


def test_a_kept_episode_that_is_not_continued_is_an_error() -> None:
    """Every running episode must be continued by the next rollout; otherwise its steps would be lost."""
    _, kept = join_fragments(None, fragments([(0, [F], 0), (0, [F], 5)]), np.array([0, 1]))
    assert isinstance(kept, RunningEpisodes) and kept.slots.tolist() == [0, 1]
    with pytest.raises(ValueError, match="2 episodes were running but 1 fragments continue one"):
        join_fragments(kept, fragments([(1, [M, T], 0), (0, [F], 9)]), np.array([0, 1]))
