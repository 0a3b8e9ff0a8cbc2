"""Restarting a dead worker under an action server, while the server's policy does not give up its state.

A worker that dies is restarted (``on_worker_failure=restart``); its slot state goes first: the copy of
the policy that holds its rows gives them up (``get_sampling_state``; under ``action_server`` the rows of
every worker resident in that copy). That is a call of the server's policy like any other: it runs in
the serving thread, bounded by ``timeout``, and when it does not return the sampler raises one line
that names it, for the workers whose rows it moves, "while restarting worker 1"; no worker is
restarted, nothing of the sampler's is left running or named in ``/dev/shm``. (It once ran in the
sampler's own thread, with no time limit: a run that never ended.)

Real worker processes (spawn), real CartPole whose process kills itself (SIGKILL) in worker 1 at its
40th step, or a SIGKILL from the test between two calls; the policy is an MLPPolicy whose
``get_sampling_state`` blocks when (and only when) it is made to give up a restarted worker's state.
A watchdog releases it after :data:`WATCHDOG_S` seconds, so that a sampler that waits for it without
limit fails the test instead of hanging the suite.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
import weakref
from pathlib import Path
from types import FrameType
from typing import Any, Iterator

import pytest

from corral import ActionServerSampler, AlternatingSampler, EnvFactory, EnvSpec, MLPPolicy, WorkerError
from corral.parallel.slot_state import AgentPool
from corral.testing.modules import import_path

TIMEOUT = 2.0
#: Seconds after which the test itself releases the stuck call (the sampler did not end by then).
WATCHDOG_S = 20.0
SUICIDE = "corral.testing.faulty_envs:corral/SuicideCartPole-v1"
#: ``tests/conf/action_server_checks.py`` (``tests`` is not an importable package).
checks = import_path(Path(__file__).resolve().parents[2] / "tests" / "conf" / "action_server_checks.py",
                     "action_server_checks")

#: The server runs a deep copy of the policy: what the test controls lives at module level.
RELEASE = threading.Event()
_state: dict[str, Any] = {"stuck": 0, "returned": 0, "thread": None}


def restarting() -> bool:
    """Whether the caller runs within :meth:`AgentPool.forget` (a restarted worker's state going)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is AgentPool.forget.__code__:
            return True
        frame = frame.f_back
    return False


class RestartHangingPolicy(MLPPolicy):
    """An MLPPolicy whose ``get_sampling_state`` blocks, until :data:`RELEASE`, when it is made to give
    up the state of a worker being restarted; at any other time (a swap of slot state within a forward
    pass, a state_dict) it returns at once."""

    def get_sampling_state(self) -> Any:
        if restarting():
            _state["stuck"] += 1
            _state["thread"] = threading.current_thread()
            RELEASE.wait(60)  # bounded, so that a broken sampler cannot hang the suite for ever
            _state["returned"] += 1
        return super().get_sampling_state()


leaves_nothing_behind = checks.leaves_nothing_behind  # autouse: no process or segment outlives a test


@pytest.fixture
def policy() -> Iterator[RestartHangingPolicy]:
    RELEASE.clear()
    _state.update(stuck=0, returned=0, thread=None)
    yield RestartHangingPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))
    RELEASE.set()  # a call still stuck returns now (after every check of the test)


def message(sampler: str, who: str) -> re.Pattern[str]:
    """The one line naming the server's ``get_sampling_state`` for ``who``, while restarting worker 1."""
    return re.compile(
        rf"{sampler} sampler: the action server's call of the policy's get_sampling_state \(for {who}, on cpu\) "
        r"did not return within 2 s while restarting worker 1; every worker waits for it, so none is at fault "
        r"and none was restarted; check the policy's get_sampling_state \(what it blocks on: a lock, a device "
        r"that stopped answering\), or raise sampler.timeout=2 if its get_sampling_state calls are this slow")


def kill_worker_1(sampler: Any) -> None:
    """Worker 1 dies between two calls (the OOM killer); the next call finds it dead and restarts it."""
    pid = sampler.worker_pids[1]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid in {p.pid for p in multiprocessing.active_children()} and time.monotonic() < deadline:
        time.sleep(0.05)


# (sampler, when worker 1 dies, who the line names). Under action_server the two workers share one copy
# of the policy: giving up worker 1's rows gives up every resident worker's (both, while both sample);
# under alternating worker 1 has a copy of its own.
CASES = [
    (ActionServerSampler, "in its rollout", r"(worker 1|workers \[0, 1\])"),
    (AlternatingSampler, "in its rollout", r"worker 1"),
    (AlternatingSampler, "between calls", r"worker 1"),
]
IDS = ["action_server-in-its-rollout", "alternating-in-its-rollout", "alternating-between-calls"]


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("sampler_class", "dies", "who"), CASES, ids=IDS)
def test_a_hung_get_sampling_state_while_restarting_a_worker_names_that_call(
        policy: RestartHangingPolicy, sampler_class: type[ActionServerSampler], dies: str, who: str,
        caplog: pytest.LogCaptureFixture) -> None:
    env = EnvFactory(SUICIDE, {"fail_at": 40, "only_worker": 1}) if dies == "in its rollout" \
        else EnvFactory("CartPole-v1")
    before = checks.serving_threads()
    sampler = sampler_class(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1,
                            timeout=TIMEOUT, device="cpu", on_worker_failure="restart")
    watchdog = threading.Timer(WATCHDOG_S, RELEASE.set)
    error: WorkerError | None = None
    with caplog.at_level(logging.WARNING), sampler:
        (thread,) = checks.serving_threads() - before
        server = sampler.server
        assert server is not None
        semaphores = [weakref.ref(s) for s in (server.doorbell, *[x for slot in server.slots
                                                                   for x in (slot.posted, slot.answered)])]
        del server
        if dies == "between calls":
            sampler.obtain_samples(0, 200, policy.get_param_values())
            kill_worker_1(sampler)
        watchdog.start()
        t0 = time.monotonic()
        try:
            sampler.obtain_samples(1, 2000, policy.get_param_values())
        except WorkerError as exc:
            error = exc
        took = time.monotonic() - t0
    watchdog.cancel()
    released = RELEASE.is_set()
    assert _state["stuck"] >= 1, "get_sampling_state was never made to give up a restarted worker's state"
    assert not released, (f"the sampler waited {took:.0f} s for the hung get_sampling_state (released by the test "
                          f"after {WATCHDOG_S:g} s): no time limit on restarting a worker")
    assert _state["stuck"] == 1, f"get_sampling_state hung {_state['stuck']} times"
    assert error is not None, "the hung get_sampling_state raised nothing"
    text = str(error)
    assert message(sampler_class.option_name, who).fullmatch(text), text
    assert "\n" not in text and error.worker_number is None and error.remote_traceback is None
    assert took < 15, f"raising and shutting down took {took:.1f} s"
    restarting_lines = [r.getMessage() for r in caplog.records if "restarting it" in r.getMessage()]
    assert len(restarting_lines) == 1 and restarting_lines[0].startswith("worker 1 "), restarting_lines
    assert sampler.n_restarts == 0
    # It hung in the serving thread (not the sampler's), which is abandoned and still in the call.
    assert _state["thread"] is thread and thread.is_alive() and _state["returned"] == 0
    assert checks.our_segments() == set(), "the stuck server's segments are still named in /dev/shm"
    checks.assert_semaphores_freed(semaphores)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="corral.parallel.action_server"):
        RELEASE.set()  # the stuck call returns, after the shutdown
        thread.join(30)
    assert not thread.is_alive(), "the serving thread did not end once its call returned"
    assert _state["returned"] == 1
    noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], noisy
