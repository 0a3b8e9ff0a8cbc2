"""A forward pass of the action server's policy that does not return: the server is named, not a worker.

Every worker of the pass waits for the server, so each runs out of ``timeout`` (its proxy's, or its
lack of progress); that is no fault of theirs. The sampler names the server's forward pass in one
line, restarts no worker (a restarted one would wait for the same server), and its shutdown is
bounded although the serving thread holds its lock (it used to wait for that lock forever).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pytest
from test_action_server import leaves_nothing_behind  # noqa: F401 - an autouse fixture

from corral import ActionServerSampler, EnvFactory, EnvSpec, MLPPolicy, WorkerError

#: Set: the server's forward passes hang (until RELEASE is set, so the thread ends with the test).
HANG = threading.Event()
RELEASE = threading.Event()


class HangingPolicy(MLPPolicy):
    """An MLPPolicy whose ``get_actions`` (run by the server, in this process) hangs while HANG is set."""

    def get_actions(self, observations: Any) -> Any:
        if HANG.is_set():
            RELEASE.wait(120)
        return super().get_actions(observations)


@pytest.fixture
def policy() -> Any:
    HANG.clear()
    RELEASE.clear()
    yield HangingPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))
    RELEASE.set()  # the serving thread's pass returns; it sees the shutdown and ends


@pytest.mark.parametrize("on_worker_failure", ["raise", "restart"])
def test_a_hung_forward_pass_names_the_server_not_a_worker(policy: Any, on_worker_failure: str) -> None:
    env = EnvFactory("CartPole-v1")
    sampler = ActionServerSampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=3,
                                  device="cpu", on_worker_failure=on_worker_failure)
    with sampler:
        sampler.obtain_samples(0, 200, policy.get_param_values())
        HANG.set()
        t0 = time.monotonic()
        with pytest.raises(WorkerError) as info:
            sampler.obtain_samples(1, 200, policy.get_param_values())
        assert time.monotonic() - t0 < 30
    message = str(info.value)
    assert message.startswith("action_server sampler: the action server's forward pass (the policy's get_actions "
                              "for worker(s) [0, 1], on cpu) has not returned for "), message
    assert message.endswith(" s while sampling (obtain_samples), so no worker could step; check the policy, or raise "
                            "sampler.timeout=3 if its forward passes are this slow"), message
    assert info.value.worker_number is None and info.value.remote_traceback is None
    assert sampler.n_restarts == 0
    assert multiprocessing.active_children() == []
