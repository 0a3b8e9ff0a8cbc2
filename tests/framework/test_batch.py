"""EpisodeBatch and StepType: validation, views, split/concatenate, torch views."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pytest
import torch

from corral.framework.batch import EpisodeBatch, StepType, concatenate, episode_from_arrays
from corral.framework.errors import BatchError

F, M, T, O = StepType.FIRST, StepType.MID, StepType.TERMINAL, StepType.TIMEOUT
OBS_DIM = 3


def step_types_for(lengths: Sequence[int], ends: Sequence[StepType]) -> np.ndarray:
    """FIRST, MID..., end for each episode (a one-step episode is just its end)."""
    out: list[int] = []
    for n, end in zip(lengths, ends):
        out += [end] if n == 1 else [F] + [M] * (n - 2) + [end]
    return np.array(out, dtype=np.uint8)


def arrays(lengths: Sequence[int], ends: Sequence[StepType] | None = None) -> dict[str, Any]:
    """Keyword arguments of a valid batch with distinct values everywhere."""
    lengths = list(lengths)
    n, e = sum(lengths), len(lengths)
    ends = list(ends) if ends is not None else [T if i % 2 == 0 else O for i in range(e)]
    return dict(
        observations=np.arange(n * OBS_DIM, dtype=np.float32).reshape(n, OBS_DIM),
        actions=np.arange(n, dtype=np.int64) % 2,
        rewards=np.arange(1, n + 1, dtype=np.float32),
        step_types=step_types_for(lengths, ends),
        lengths=np.array(lengths),
        last_observations=-np.arange(1, e * OBS_DIM + 1, dtype=np.float32).reshape(e, OBS_DIM),
        env_infos={"x": np.arange(n, dtype=np.float64)},
        agent_infos={"log_prob": -np.arange(n, dtype=np.float32) / 10},
        episode_infos={"task": np.arange(e) + 100},
    )


def batch(lengths: Sequence[int] = (3, 1, 4), **overrides: Any) -> EpisodeBatch:
    kw = arrays(lengths)
    kw.update(overrides)
    return EpisodeBatch(**kw)


# ---------------------------------------------------------------------- StepType
def test_step_type_from_gymnasium_flags() -> None:
    assert StepType.get_step_type(1, terminated=False, truncated=False) == F
    assert StepType.get_step_type(5, terminated=False, truncated=False) == M
    assert StepType.get_step_type(5, terminated=True, truncated=False) == T
    assert StepType.get_step_type(5, terminated=False, truncated=True) == O
    # Both flags: the environment really ended, nothing to bootstrap.
    assert StepType.get_step_type(5, terminated=True, truncated=True) == T
    assert StepType.get_step_type(1, terminated=False, truncated=True) == O


# ---------------------------------------------------------------------- validation
def test_valid_batch_sizes() -> None:
    b = batch()
    assert b.n_episodes == 3 and len(b) == 8
    np.testing.assert_array_equal(b.starts, [0, 3, 4])
    np.testing.assert_array_equal(b.complete, [True, True, True])
    assert b.step_types.dtype == np.uint8 and b.lengths.dtype == np.int64


@pytest.mark.parametrize("name", ["observations", "actions", "rewards", "step_types"])
def test_per_step_arrays_need_one_row_per_step(name: str) -> None:
    kw = arrays((3, 1, 4))
    kw[name] = kw[name][:-1]
    with pytest.raises(BatchError, match=name):
        EpisodeBatch(**kw)


def test_last_observations_need_one_row_per_episode() -> None:
    kw = arrays((3, 1, 4))
    with pytest.raises(BatchError, match="last_observations"):
        EpisodeBatch(**{**kw, "last_observations": kw["last_observations"][:2]})
    with pytest.raises(BatchError, match="last_observations"):
        EpisodeBatch(**{**kw, "last_observations": np.zeros((3, OBS_DIM + 1), np.float32)})


@pytest.mark.parametrize("kind", ["env_infos", "agent_infos", "episode_infos"])
def test_info_rows_are_checked(kind: str) -> None:
    kw = arrays((3, 1, 4))
    (key,) = kw[kind]
    with pytest.raises(BatchError, match=kind):
        EpisodeBatch(**{**kw, kind: {key: kw[kind][key][:-1]}})
    with pytest.raises(BatchError, match=kind):
        EpisodeBatch(**{**kw, kind: {key: np.float32(1.0)}})


def test_empty_episode_is_rejected() -> None:
    kw = arrays((3, 1, 4))
    with pytest.raises(BatchError, match="at least one step"):
        EpisodeBatch(**{**kw, "lengths": np.array([3, 0, 5])})


@pytest.mark.parametrize(
    "step_types, message",
    [
        ([F, F, T, T, F, M, M, O], "MID"),  # FIRST inside an episode
        ([F, T, T, T, F, M, M, O], "MID"),  # TERMINAL inside an episode
        ([F, M, O, T, F, M, O, O], "MID"),  # TIMEOUT inside an episode
        ([M, M, T, T, F, M, M, O], "FIRST"),  # does not start with FIRST
        ([T, M, T, T, F, M, M, O], "FIRST"),
        ([F, M, T, T, F, M, M, 7], "unknown step type"),
        ([F, M, M, T, F, M, M, O], "TERMINAL or"),  # ends MID: a fragment
        ([F, M, T, F, F, M, M, O], "TERMINAL or"),  # one-step episode that is FIRST only
    ],
)
def test_bad_step_type_sequences(step_types: list[int], message: str) -> None:
    with pytest.raises(BatchError, match=message):
        batch(step_types=np.array(step_types, dtype=np.uint8))


def test_fragments_only_with_allow_fragments() -> None:
    # Episode 0 is cut at the end of a batch (ends MID), episode 2 continues one (starts MID).
    st = np.array([F, M, M, T, M, M, M, O], dtype=np.uint8)
    with pytest.raises(BatchError, match="allow_fragments"):
        batch(step_types=st)
    with pytest.raises(BatchError, match="FIRST"):
        batch(step_types=np.array([F, M, O, T, M, M, M, O], dtype=np.uint8))
    b = batch(step_types=st, allow_fragments=True)
    np.testing.assert_array_equal(b.complete, [False, True, True])
    # A single MID step is a fragment too (continued and cut again).
    assert batch(step_types=np.array([F, M, M, M, M, M, M, M], np.uint8), allow_fragments=True).n_episodes == 3


def test_fragments_still_need_sane_step_types() -> None:
    with pytest.raises(BatchError):  # FIRST inside
        batch(step_types=np.array([F, F, M, T, F, M, M, O], np.uint8), allow_fragments=True)
    with pytest.raises(BatchError):  # a multi-step episode cannot end with FIRST
        batch(step_types=np.array([F, M, F, T, F, M, M, O], np.uint8), allow_fragments=True)
    with pytest.raises(BatchError):  # nor start with TERMINAL
        batch(step_types=np.array([T, M, M, T, F, M, M, O], np.uint8), allow_fragments=True)


# ---------------------------------------------------------------------- views
def test_next_observations() -> None:
    b = batch()
    nxt = b.next_observations
    obs, last = b.observations, b.last_observations
    expected = np.stack([obs[1], obs[2], last[0], last[1], obs[5], obs[6], obs[7], last[2]])
    np.testing.assert_array_equal(nxt, expected)
    assert nxt.dtype == obs.dtype


def test_pad_and_valids() -> None:
    b = batch((3, 1, 4))
    valids = b.valids()
    np.testing.assert_array_equal(
        valids, [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    )
    padded = b.pad(b.rewards, fill=-1)
    np.testing.assert_array_equal(padded, [[1, 2, 3, -1], [4, -1, -1, -1], [5, 6, 7, 8]])
    assert padded.dtype == np.float32
    obs = b.padded_observations
    assert obs.shape == (3, 4, OBS_DIM)
    np.testing.assert_array_equal(obs[valids], b.observations)
    assert (obs[~valids] == 0).all()
    np.testing.assert_array_equal(b.padded_actions[valids], b.actions)
    np.testing.assert_array_equal(b.padded_rewards[valids], b.rewards)
    # A longer padding than needed.
    assert b.pad(b.rewards, max_length=6).shape == (3, 6)
    assert b.valids(6).sum() == len(b)


def test_episode_returns() -> None:
    b = batch((3, 1, 4))
    np.testing.assert_allclose(b.episode_returns, [1 + 2 + 3, 4, 5 + 6 + 7 + 8])


def test_terminals_and_timeouts() -> None:
    b = batch((3, 1, 4))
    # Episode ends alternate TERMINAL, TIMEOUT, TERMINAL.
    np.testing.assert_array_equal(np.flatnonzero(b.terminals), [2, 7])
    np.testing.assert_array_equal(np.flatnonzero(b.timeouts), [3])


# ---------------------------------------------------------------------- split / concatenate
def test_split_then_concatenate_round_trips() -> None:
    b = batch((3, 1, 4))
    parts = b.split()
    assert [p.n_episodes for p in parts] == [1, 1, 1]
    assert [len(p) for p in parts] == [3, 1, 4]
    np.testing.assert_array_equal(parts[2].observations, b.observations[4:])
    np.testing.assert_array_equal(parts[2].last_observations, b.last_observations[2:])
    np.testing.assert_array_equal(parts[1].episode_infos["task"], [101])
    assert EpisodeBatch.concatenate(*parts).equals(b)
    assert EpisodeBatch.concatenate(parts).equals(b)
    assert concatenate(parts).equals(b)
    assert EpisodeBatch.concatenate(parts[0], EpisodeBatch.concatenate(*parts[1:])).equals(b)
    # Order matters.
    assert not EpisodeBatch.concatenate(parts[1], parts[0], parts[2]).equals(b)


def test_split_concatenate_keeps_fragments() -> None:
    st = np.array([F, M, M, T, M, M, M, O], dtype=np.uint8)
    b = batch(step_types=st, allow_fragments=True)
    parts = b.split()
    assert all(p.allow_fragments for p in parts)
    again = EpisodeBatch.concatenate(*parts)
    assert again.allow_fragments and again.equals(b)


@pytest.mark.parametrize("kind", ["env_infos", "agent_infos", "episode_infos"])
def test_concatenate_rejects_mismatched_info_keys(kind: str) -> None:
    a = batch((2, 2))
    kw = arrays((2, 3))
    kw[kind] = {"other": next(iter(kw[kind].values()))}
    with pytest.raises(BatchError, match=kind):
        EpisodeBatch.concatenate(a, EpisodeBatch(**kw))


def test_concatenate_needs_episodes() -> None:
    with pytest.raises(BatchError):
        EpisodeBatch.concatenate()


def test_equals_and_differences() -> None:
    a, b = batch(), batch()
    assert a.equals(b) and a.differences(b) == []
    c = batch(rewards=a.rewards + 1)
    assert not a.equals(c) and a.differences(c) == ["rewards"]
    d = batch(agent_infos={"log_prob": a.agent_infos["log_prob"] + 1e-7})
    assert a.differences(d) == ["agent_infos[log_prob]"]
    assert a.equals(d, infos_rtol=1e-5)
    e = batch(last_observations=a.last_observations + 1)
    assert a.differences(e) == ["last_observations"]


def test_episode_from_arrays() -> None:
    b = batch((4,))
    one = episode_from_arrays(
        observations=b.observations,
        actions=b.actions,
        rewards=b.rewards,
        step_types=b.step_types,
        last_observation=b.last_observations[0],
        agent_infos=b.agent_infos,
        env_infos=b.env_infos,
        episode_infos={"task": 100},
    )
    assert one.equals(b)


# ---------------------------------------------------------------------- torch
def test_to_torch_is_zero_copy() -> None:
    b = batch()
    t = b.to_torch()
    assert t["observations"].dtype == torch.float32 and t["observations"].shape == (8, OBS_DIM)
    assert t["step_types"].dtype == torch.uint8
    t["observations"][0, 0] = 123.0
    assert b.observations[0, 0] == 123.0
    t["rewards"][3] = -5.0
    assert b.rewards[3] == -5.0
    t["last_observations"][1, 2] = 7.0
    assert b.last_observations[1, 2] == 7.0
    t["agent_infos"]["log_prob"][2] = 42.0
    assert b.agent_infos["log_prob"][2] == 42.0
    t["env_infos"]["x"][0] = 9.0
    assert b.env_infos["x"][0] == 9.0
    t["episode_infos"]["task"][0] = 5
    assert b.episode_infos["task"][0] == 5
    # And the other way round.
    b.actions[1] = 77
    assert int(t["actions"][1]) == 77


def test_to_torch_copies_a_read_only_array_without_a_warning() -> None:
    """A batch that came through pickling as Ray's object store does it (out-of-band buffers, read-only):
    torch cannot share a read-only array (it warned, once per run, under sampler=ray), so it is copied."""
    import pickle
    import warnings

    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(batch(), protocol=5, buffer_callback=buffers.append)
    b = pickle.loads(data, buffers=[bytes(buf.raw()) for buf in buffers])  # bytes: read-only memory
    assert not b.observations.flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = b.to_torch()
    t["observations"][0, 0] = 123.0  # a tensor of its own: writing it is defined, and leaves the batch as it was
    assert b.observations[0, 0] != 123.0


def test_to_torch_skips_string_infos() -> None:
    b = batch(episode_infos={"name": np.array(["a", "b", "c"]), "task": np.arange(3)})
    t = b.to_torch()
    assert set(t["episode_infos"]) == {"task"}


def test_to_torch_is_zero_copy_for_strided_input_too() -> None:
    """A batch built from strided views stores contiguous arrays, so its torch views share them."""
    kw = arrays((3, 1, 4))
    wide = np.repeat(kw["observations"], 2, axis=1)
    b = EpisodeBatch(**{**kw, "observations": wide[:, ::2], "agent_infos": {"lp": np.zeros((8, 2))[:, 0]}})
    np.testing.assert_array_equal(b.observations, kw["observations"])
    t = b.to_torch()
    t["observations"][2, 1] = -1.0
    t["agent_infos"]["lp"][3] = 4.0
    assert b.observations[2, 1] == -1.0 and b.agent_infos["lp"][3] == 4.0
    # Contiguous input is not copied.
    obs = kw["observations"]
    assert EpisodeBatch(**kw).observations is obs
