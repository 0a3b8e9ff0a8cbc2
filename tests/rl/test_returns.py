"""GAE and discounted returns: TIMEOUT bootstraps, TERMINAL does not, episodes do not leak."""

from __future__ import annotations

import numpy as np
import pytest

from corral.framework.batch import EpisodeBatch, StepType
from corral.rl.returns import discounted_returns, gae

F, M, T, O = StepType.FIRST, StepType.MID, StepType.TERMINAL, StepType.TIMEOUT


def episodes(ends: list[StepType], allow_fragments: bool = False) -> EpisodeBatch:
    """Episodes of 3 steps with rewards 1, 2, 3, ending as given."""
    e = len(ends)
    return EpisodeBatch(
        observations=np.zeros((3 * e, 1), np.float32),
        actions=np.zeros(3 * e, np.int64),
        rewards=np.tile([1.0, 2.0, 3.0], e),
        step_types=np.concatenate([[F, M, end] for end in ends]).astype(np.uint8),
        lengths=[3] * e,
        last_observations=np.zeros((e, 1), np.float32),
        allow_fragments=allow_fragments,
    )


VALUES = [0.5, 1.0, 1.5]
LAST = 10.0
# discount 0.9, lambda 0.8 (coefficient 0.72), worked by hand:
#   deltas: 1 + .9*1.0 - .5 = 1.4;  2 + .9*1.5 - 1.0 = 2.35;  last: 3 + .9*V_last - 1.5
#   TIMEOUT  (V_last = 10): 10.5,  2.35 + .72*10.5 = 9.91,  1.4 + .72*9.91 = 8.5352
#   TERMINAL (V_last = 0):   1.5,  2.35 + .72*1.5  = 3.43,  1.4 + .72*3.43 = 3.8696
ADV_TIMEOUT = [8.5352, 9.91, 10.5]
ADV_TERMINAL = [3.8696, 3.43, 1.5]


def test_timeout_bootstraps_from_last_value() -> None:
    adv, ret = gae(episodes([O]), VALUES, np.array([LAST]), 0.9, 0.8)
    np.testing.assert_allclose(adv, ADV_TIMEOUT, rtol=1e-12)
    np.testing.assert_allclose(ret, np.add(ADV_TIMEOUT, VALUES), rtol=1e-12)


def test_terminal_does_not_bootstrap() -> None:
    adv, ret = gae(episodes([T]), VALUES, np.array([LAST]), 0.9, 0.8)
    np.testing.assert_allclose(adv, ADV_TERMINAL, rtol=1e-12)
    np.testing.assert_allclose(ret, np.add(ADV_TERMINAL, VALUES), rtol=1e-12)


def test_fragment_bootstraps_like_a_timeout() -> None:
    adv, _ = gae(episodes([M], allow_fragments=True), VALUES, np.array([LAST]), 0.9, 0.8)
    np.testing.assert_allclose(adv, ADV_TIMEOUT, rtol=1e-12)


def test_episodes_do_not_leak_into_each_other() -> None:
    batch = episodes([T, O, T])
    values = np.array(VALUES * 3)
    adv, _ = gae(batch, values, np.array([100.0, LAST, -100.0]), 0.9, 0.8)
    np.testing.assert_allclose(adv, ADV_TERMINAL + ADV_TIMEOUT + ADV_TERMINAL, rtol=1e-12)


@pytest.mark.parametrize("end", [T, O])
def test_lambda_limits(end: StepType) -> None:
    batch = episodes([end])
    v_last = 0.0 if end == T else LAST
    # lambda = 0: one-step TD errors.
    adv0, _ = gae(batch, VALUES, np.array([LAST]), 0.9, 0.0)
    np.testing.assert_allclose(adv0, [1.4, 2.35, 3 + 0.9 * v_last - 1.5], rtol=1e-12)
    # lambda = 1: bootstrapped discounted return minus the value.
    adv1, ret1 = gae(batch, VALUES, np.array([LAST]), 0.9, 1.0)
    mc = [1 + 0.9 * 2 + 0.81 * 3 + 0.729 * v_last, 2 + 0.9 * 3 + 0.81 * v_last, 3 + 0.9 * v_last]
    np.testing.assert_allclose(ret1, mc, rtol=1e-12)
    np.testing.assert_allclose(adv1, np.subtract(mc, VALUES), rtol=1e-12)


def test_discounted_returns_restart_every_episode() -> None:
    out = discounted_returns(episodes([T, O]), 0.5)
    one = [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3.0]
    np.testing.assert_allclose(out, one + one, rtol=1e-12)
