"""A hung worker under an action server: the hung worker is named, never a healthy one waiting for the server.

The server answers a group only once every busy worker of it has posted, so while worker 1 hangs in
its environment, worker 0 (same group) waits for the server. That wait is not a lack of progress:
worker 1 must be the one reported ("made no progress", as under sampler=multiprocessing) and, with
``on_worker_failure=restart``, the only one restarted.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import numpy as np
import pytest
from test_action_server import (  # noqa: F401 - leaves_nothing_behind is an autouse fixture
    biased_params,
    leaves_nothing_behind,
    options,
    policy,
)

from corral import ActionServerSampler, AlternatingSampler, EnvFactory, WorkerError
from corral.parallel.action_proxy import ActionProxy
from corral.parallel.action_server import ActionServer
from corral.plugins.samplers.action_server import server_policy

HANGING = "corral.testing.faulty_envs:corral/HangingCartPole-v1"
TIMEOUT = 2.0

# (sampler, n_workers): worker 1 shares its group with worker 0 in both.
SAMPLERS = [(ActionServerSampler, 2), (AlternatingSampler, 3)]
IDS = ["action_server", "alternating"]


# ---------------------------------------------------------------------- the proxy's wait, in this process
def served_pair(policy: Any, worker_1_busy: threading.Event, held: list[int], timeout: float
                ) -> tuple[ActionServer, ActionProxy]:
    """A server for workers 0 and 1 (one group) and worker 0's proxy, seeded and ready to post."""
    server = ActionServer(multiprocessing.get_context("spawn"), 2, [[0, 1]], lambda p: server_policy(p, "cpu"),
                          lambda i: i == 1 and worker_1_busy.is_set(), obs_bytes=1 << 16, resp_bytes=1 << 16,
                          timeout=timeout, on_hold=held.append)
    server.start()
    server.apply_agent_update(policy, 2)
    proxy = ActionProxy(0, endpoint=server.endpoint(0))
    proxy.seed([np.random.SeedSequence(0)])
    proxy.reset()
    return server, proxy


def test_a_worker_held_for_a_busy_one_waits_past_its_timeout(policy: Any) -> None:
    busy, held = threading.Event(), []
    busy.set()
    server, proxy = served_pair(policy, busy, held, timeout=0.5)
    try:
        release = threading.Timer(2.0, lambda: (busy.clear(), server.ring()))
        release.start()
        t0 = time.monotonic()
        actions, _ = proxy.get_actions(np.zeros((1, 4), dtype=np.float32))
        waited = time.monotonic() - t0
        release.join()
        assert actions.shape == (1,) and waited > 1.5
        assert held and set(held) == {0}, "the sampler is told who is held back"
    finally:
        del proxy  # it holds the server's semaphores
        server.close()


def test_a_hung_server_still_ends_the_wait(policy: Any) -> None:
    busy, held = threading.Event(), []
    server, proxy = served_pair(policy, busy, held, timeout=0.5)
    try:
        t0 = time.monotonic()
        with server.lock:  # the serving thread cannot run: a forward pass that hangs
            with pytest.raises(TimeoutError, match="did not answer worker 0 within 0.5 s"):
                proxy.get_actions(np.zeros((1, 4), dtype=np.float32))
        assert time.monotonic() - t0 < 3
        assert held == []
    finally:
        del proxy
        server.close()


# ---------------------------------------------------------------------- worker processes
def hanging_env() -> EnvFactory:
    """Worker 1 (first life only) hangs for an hour at its 30th step."""
    return EnvFactory(HANGING, {"fail_at": 30, "only_worker": 1})


@pytest.mark.parametrize(("sampler_class", "n_workers"), SAMPLERS, ids=IDS)
def test_a_hung_worker_is_named_not_the_one_waiting_for_the_server(policy: Any, sampler_class: type,
                                                                   n_workers: int) -> None:
    with sampler_class(policy, hanging_env(), **options(n_workers=n_workers),
                       device="cpu", timeout=TIMEOUT) as srv:
        if sampler_class is AlternatingSampler:
            assert srv.groups()[0] == [0, 1]
        t0 = time.monotonic()
        with pytest.raises(WorkerError) as info:
            srv.obtain_samples(0, 3000, policy.get_param_values())
        assert time.monotonic() - t0 < 15
    err = info.value
    assert err.worker_number == 1, str(err)
    assert f"made no progress for {TIMEOUT:g} s while sampling (obtain_samples)" in str(err), str(err)
    assert "worker 0" not in str(err) and "TimeoutError" not in str(err)


@pytest.mark.parametrize(("sampler_class", "n_workers"), SAMPLERS[:1], ids=IDS[:1])
def test_with_restart_only_the_hung_worker_is_restarted(policy: Any, sampler_class: type, n_workers: int,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    with sampler_class(policy, hanging_env(), **options(n_workers=n_workers),
                       device="cpu", timeout=TIMEOUT,
                       on_worker_failure="restart") as srv:
        old = srv.worker_pids
        with caplog.at_level("WARNING"):
            batch = srv.obtain_samples(0, 3000, biased_params(policy, 0))
        assert len(batch) >= 3000 and (batch.actions == 0).all()
        new = srv.worker_pids
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "restarting" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("worker 1 ") and "made no progress" in warnings[0], warnings
    assert srv.n_restarts == 1
    assert new[0] == old[0] and new[1] != old[1]
