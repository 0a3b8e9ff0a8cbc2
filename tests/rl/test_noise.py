"""NoiseStreams: noise is a pure function of (slot key, episode, step), whatever the batch."""

from __future__ import annotations

import copy

import numpy as np

from corral.rl.noise import NoiseStreams


def seeds(n: int, root: int = 0) -> list[np.random.SeedSequence]:
    return np.random.SeedSequence(root).spawn(n)


def test_same_key_episode_step_gives_same_noise_whatever_the_batch() -> None:
    s = seeds(5)
    big = NoiseStreams(s)
    alone = [NoiseStreams([x]) for x in s]
    pair = NoiseStreams([s[3], s[1]])  # another order, another batch size
    for _episode in range(3):
        big.reset()
        pair.reset()
        for a in alone:
            a.reset()
        for _ in range(4):
            u, n = big.uniform(3), big.normal(2, offset=3)
            for j, a in enumerate(alone):
                np.testing.assert_array_equal(u[j], a.uniform(3)[0])
                np.testing.assert_array_equal(n[j], a.normal(2, offset=3)[0])
            np.testing.assert_array_equal(pair.uniform(3), u[[3, 1]])
            for x in (big, pair, *alone):
                x.advance()


def test_noise_differs_between_slots_episodes_steps_and_components() -> None:
    st = NoiseStreams(seeds(4))
    st.reset()
    first = st.uniform(3)
    assert len(np.unique(first)) == first.size  # slots and components differ
    st.advance()
    second = st.uniform(3)
    assert not np.isin(second, first).any()  # steps differ
    st.reset()
    again = st.uniform(3)
    assert not np.isin(again, first).any()  # episodes differ
    # Reading twice within a step gives the same noise (it is not a consumed stream).
    np.testing.assert_array_equal(again, st.uniform(3))
    # Offsets address later components of the same step.
    np.testing.assert_array_equal(st.uniform(2, offset=1), again[:, 1:3])


def test_reset_mask_only_affects_masked_slots() -> None:
    st = NoiseStreams(seeds(4))
    st.reset()
    for _ in range(3):
        st.advance()
    before = st.uniform(2)
    ref = copy.deepcopy(st)
    mask = np.array([False, True, False, True])
    st.reset(mask)
    after = st.uniform(2)
    np.testing.assert_array_equal(after[~mask], before[~mask])
    assert not np.isin(after[mask], before).any()
    np.testing.assert_array_equal(st.episodes, ref.episodes + mask.astype(np.uint64))
    np.testing.assert_array_equal(st.steps, np.where(mask, 0, ref.steps))
    # A reset slot's noise is its own fresh episode: the same as a lone stream at that episode.
    lone = NoiseStreams([seeds(4)[1]])
    lone.reset()
    lone.reset()
    np.testing.assert_array_equal(after[1], lone.uniform(2)[0])


def test_uniform_is_in_the_open_unit_interval() -> None:
    st = NoiseStreams(seeds(64))
    values = []
    for _ in range(50):
        values.append(st.uniform(32))
        st.advance()
    u = np.concatenate(values).ravel()
    assert u.dtype == np.float64 and u.size == 64 * 50 * 32
    assert (u > 0).all() and (u < 1).all()
    assert abs(u.mean() - 0.5) < 0.01
    hist = np.histogram(u, bins=10, range=(0, 1))[0] / u.size
    np.testing.assert_allclose(hist, 0.1, atol=0.01)


def test_normal_has_mean_zero_and_unit_std() -> None:
    st = NoiseStreams(seeds(64, root=1))
    values = []
    for _ in range(50):
        values.append(st.normal(32))
        st.advance()
    z = np.concatenate(values).ravel()
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 0.02
    assert abs(z.std() - 1) < 0.02
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.01
    # Components within a row are not correlated.
    zz = np.concatenate(values)
    assert abs(np.corrcoef(zz[:, 0], zz[:, 1])[0, 1]) < 0.05


def test_state_dict_round_trip() -> None:
    st = NoiseStreams(seeds(3))
    st.reset()
    st.advance()
    st.reset(np.array([True, False, False]))
    state = st.state_dict()
    expected = [st.normal(2)]
    st.advance()
    expected.append(st.uniform(4))
    fresh = NoiseStreams([])
    fresh.load_state_dict(state)
    assert len(fresh) == 3
    np.testing.assert_array_equal(fresh.normal(2), expected[0])
    fresh.advance()
    np.testing.assert_array_equal(fresh.uniform(4), expected[1])
    # The state is a copy.
    state["steps"][:] = 99
    np.testing.assert_array_equal(st.steps, [1, 2, 2])
