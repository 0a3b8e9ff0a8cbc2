"""sampler=alternating: two groups of workers served in turn; same episodes as local; faults.

The machinery is the action server's (tests/plugins/samplers/test_action_server.py tests it in
depth); these tests check what the two groups change.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_action_server import (  # noqa: F401 - leaves_nothing_behind is an autouse fixture
    CARTPOLE,
    SUICIDE,
    RecurrentCounter,
    assert_same,
    biased_params,
    leaves_nothing_behind,
    options,
    policy,
    sampler_options,
)

from corral import (
    AlternatingSampler,
    ConfigError,
    DefaultWorker,
    EnvFactory,
    LocalSampler,
    VecWorker,
    WorkerError,
)


@pytest.mark.parametrize("worker", [DefaultWorker, VecWorker], ids=["default", "vec"])
@pytest.mark.parametrize("seed", [1, 2])
def test_same_episodes_as_local(policy: Any, seed: int, worker: type) -> None:
    params = policy.get_param_values()
    with AlternatingSampler(policy, CARTPOLE, **options(seed, worker), **sampler_options()) as alt, \
            LocalSampler(policy, CARTPOLE, **options(seed, worker)) as local:
        assert alt.groups() == [[0], [1]]
        for itr, n in enumerate((700, 333)):
            assert_same(alt.obtain_samples(itr, n, params), local.obtain_samples(itr, n, params))
        assert_same(alt.obtain_exact_episodes(3, params), local.obtain_exact_episodes(3, params))
        # One server-side policy copy per group: each holds its own group's slots.
        assert alt.server is not None and len(alt.server.pool.instances) == 2


def test_uneven_groups_with_a_recurrent_policy() -> None:
    """Three workers (groups [0, 1] and [2]), per-slot recurrent state kept per group."""
    agent = RecurrentCounter()
    with AlternatingSampler(agent, CARTPOLE, **options(8, VecWorker, n_workers=3), **sampler_options()) as alt, \
            LocalSampler(agent, CARTPOLE, **options(8, VecWorker, n_workers=3)) as local:
        assert alt.groups() == [[0, 1], [2]]
        for itr in range(2):
            assert_same(alt.obtain_samples(itr, 500, None), local.obtain_samples(itr, 500, None))
        assert_same(alt.obtain_exact_episodes(2, None), local.obtain_exact_episodes(2, None))


def test_needs_two_workers(policy: Any) -> None:
    with pytest.raises(ConfigError, match="n_workers >= 2"):
        AlternatingSampler(policy, CARTPOLE, **options(n_workers=1), **sampler_options())


def test_worker_failure_raises_or_restarts(policy: Any) -> None:
    env = EnvFactory(SUICIDE, {"fail_at": 40, "only_worker": 0})
    with AlternatingSampler(policy, env, **options(), **sampler_options()) as alt:
        with pytest.raises(WorkerError) as info:
            alt.obtain_samples(0, 2000, policy.get_param_values())
    assert info.value.worker_number == 0 and "SIGKILL" in str(info.value)
    with AlternatingSampler(policy, env, **options(), **sampler_options(on_worker_failure="restart")) as alt:
        batch = alt.obtain_samples(0, 1000, biased_params(policy, 1))
        assert len(batch) >= 1000 and (batch.actions == 1).all() and alt.n_restarts == 1
