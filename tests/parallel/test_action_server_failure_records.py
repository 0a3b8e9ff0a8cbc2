"""The action server's record of a call of its policy that raised belongs to one request of a worker's.

When the server's policy raises while a worker waits for it, the server records the failure for that
worker, so that the failure the worker then reports is the policy's (``ServerPolicyRaised``), not the
worker's. A worker may catch the error and go on: its next request is its own again. The record was
dropped when the serving thread collected that next request, so a worker whose proxy gave up waiting
between posting it and the thread collecting it (the thread stuck in another worker's call) still
found the old record, and the sampler named the policy's earlier, caught error ("... get_param_values
(for worker 0, on cpu) raised RuntimeError: boom ...") instead of the call that hung. Each record is
now stamped with the sequence number of the request it belongs to.

Real worker processes (spawn), real CartPole. The order is driven, not timed: worker 0's first
``get_param_values`` raises in the server's policy (worker 0 catches it); worker 1, once that has
happened, asks for its parameters, and that call blocks in the server's thread (until the test
releases it, bounded); worker 0, once that has happened, asks again: its request is never collected,
its proxy gives up after ``timeout`` seconds, and its failure is what the sampler reports (worker 1
catches its own proxy's ``TimeoutError`` and waits, so it reports nothing first). This happens while
the sampler starts (in the workers' ``update_agent``), where the sampler allows a worker more than
``timeout`` seconds, so that the proxies' waits, not the sampler's, run out.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from corral import ActionServerSampler, EnvFactory, EnvSpec, MLPPolicy, WorkerError
from corral.parallel.action_proxy import ActionServerError
from corral.parallel.slot_state import AgentPool
from corral.plugins.workers.default import DefaultWorker
from corral.testing.modules import import_path

TIMEOUT = 2.0
#: Seconds a worker waits, at most, for the step the test's order puts before its own.
STEP_WAIT_S = 60.0
#: ``tests/conf/action_server_checks.py`` (``tests`` is not an importable package).
checks = import_path(Path(__file__).resolve().parents[2] / "tests" / "conf" / "action_server_checks.py",
                     "action_server_checks")
leaves_nothing_behind = checks.leaves_nothing_behind  # autouse: no process or segment outlives a test

#: The server runs a deep copy of the policy: what the test controls lives at module level.
RELEASE = threading.Event()
_state: dict[str, Any] = {"dir": None, "raised": 0, "stuck": 0, "thread": None}
RAISED, STUCK = "raised", "stuck"


def _asked_for(frame: Any) -> int | None:
    """The worker whose parameters :meth:`AgentPool.get_param_values` (the caller's caller) asks for."""
    caller = frame.f_back
    if caller is not None and caller.f_code is AgentPool.get_param_values.__code__:
        return int(caller.f_locals["worker"])
    return None


class OrderedPolicy(MLPPolicy):
    """An MLPPolicy whose ``get_param_values``, asked for by the server for worker 0, raises (once), and
    for worker 1 blocks until :data:`RELEASE` (bounded); each leaves a marker file for the workers."""

    def get_param_values(self) -> dict[str, Any]:
        worker = _asked_for(sys._getframe())
        if worker == 0 and not _state["raised"]:
            _state["raised"] += 1
            (Path(_state["dir"]) / RAISED).touch()
            raise RuntimeError("boom in get_param_values")
        if worker == 1:
            _state["stuck"] += 1
            _state["thread"] = threading.current_thread()
            (Path(_state["dir"]) / STUCK).touch()
            RELEASE.wait(60)  # bounded, so that a broken sampler cannot hang the suite for ever
        return super().get_param_values()


def wait_for(marker: Path) -> None:
    """Wait (bounded) until ``marker`` exists: the step before this worker's has happened."""
    deadline = time.monotonic() + STEP_WAIT_S
    while not marker.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the test's step {marker.name!r} did not happen within {STEP_WAIT_S:g} s")
        time.sleep(0.01)


class OrderedWorker(DefaultWorker):
    """Asks its agent for its parameters once it has it, in the order the module docstring gives."""

    def __init__(self, *, marker_dir: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.marker_dir = Path(marker_dir)

    def update_agent(self, agent_update: Any) -> None:
        super().update_agent(agent_update)
        if self.agent is None or agent_update is None:
            return
        if self.worker_number == 0:
            try:
                self.agent.get_param_values()  # the policy raises: recorded for this request
            except ActionServerError:
                pass  # ... and worker 0 goes on
            wait_for(self.marker_dir / STUCK)
            self.agent.get_param_values()  # never collected: the proxy gives up, TimeoutError
        elif self.worker_number == 1:
            wait_for(self.marker_dir / RAISED)
            try:
                self.agent.get_param_values()  # blocks in the server's thread
            except TimeoutError:
                wait_for(self.marker_dir / "never")  # reports nothing before worker 0; stopped at shutdown


@pytest.fixture
def policy(tmp_path: Path) -> Iterator[OrderedPolicy]:
    RELEASE.clear()
    _state.update(dir=str(tmp_path), raised=0, stuck=0, thread=None)
    yield OrderedPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))
    RELEASE.set()  # a call still stuck returns now (after every check of the test)


HUNG = ("action_server sampler: the action server's call of the policy's get_param_values (for worker 1, on cpu) "
        "did not return within 2 s while starting; every worker waits for it, so none is at fault and none was "
        "restarted; check the policy's get_param_values (what it blocks on: a lock, a device that stopped "
        "answering), or raise sampler.timeout=2 if its get_param_values calls are this slow")


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_whose_uncollected_request_timed_out_is_not_blamed_on_its_earlier_caught_failure(
        policy: OrderedPolicy, tmp_path: Path) -> None:
    before = checks.serving_threads()
    error: BaseException | None = None
    try:
        ActionServerSampler(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=2,
                            seed=1, timeout=TIMEOUT, device="cpu", on_worker_failure="restart",
                            worker_class=OrderedWorker, worker_args={"marker_dir": str(tmp_path)}).shutdown_worker()
    except Exception as exc:  # noqa: BLE001 - the test looks at whatever it is
        error = exc
    assert _state["raised"] == 1, "the policy's get_param_values for worker 0 did not raise"
    assert _state["stuck"] == 1, "the policy's get_param_values for worker 1 did not block (once)"
    assert isinstance(error, WorkerError), f"not the WorkerError naming the hung call: {error!r}"
    assert error.message == HUNG
    assert error.worker_number is None and error.remote_traceback is None
    thread = _state["thread"]
    assert thread is not None and thread not in before
    RELEASE.set()  # the stuck call returns, after the shutdown: the abandoned thread ends
    thread.join(30)
    assert not thread.is_alive(), "the serving thread did not end once its call returned"


#: Where :class:`RetryingWorker` writes the error its second request got.
RETRY_ERROR = "retry_error"


class BlockingPolicy(MLPPolicy):
    """An MLPPolicy whose ``get_param_values`` for worker 0 blocks until :data:`RELEASE` (bounded),
    counting the calls that reach it."""

    def get_param_values(self) -> dict[str, Any]:
        if _asked_for(sys._getframe()) == 0:
            _state["stuck"] += 1
            _state["thread"] = threading.current_thread()
            RELEASE.wait(60)
        return super().get_param_values()


class RetryingWorker(OrderedWorker):
    """Catches its proxy's ``TimeoutError`` and asks again, writing down what that second request got."""

    def update_agent(self, agent_update: Any) -> None:
        DefaultWorker.update_agent(self, agent_update)
        if self.agent is None or agent_update is None:
            return
        try:
            self.agent.get_param_values()  # blocks in the server's thread: the proxy gives up
        except TimeoutError:
            pass
        try:
            self.agent.get_param_values()  # its answer could be the late answer to the first request
        except ActionServerError as exc:
            (self.marker_dir / RETRY_ERROR).write_text(str(exc))
            raise
        (self.marker_dir / RETRY_ERROR).write_text("answered")


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_proxy_that_gave_up_serves_no_further_request(tmp_path: Path) -> None:
    """A worker that catches its proxy's TimeoutError and asks again would take the late answer to the
    request it gave up on for the new one's (actions for other observations): the slot refuses instead,
    without reaching the server, and the sampler names the call that did not return."""
    RELEASE.clear()
    _state.update(dir=str(tmp_path), raised=0, stuck=0, thread=None)
    policy = BlockingPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))
    error: BaseException | None = None
    try:
        ActionServerSampler(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=1,
                            seed=1, timeout=TIMEOUT, device="cpu",
                            worker_class=RetryingWorker, worker_args={"marker_dir": str(tmp_path)}).shutdown_worker()
    except Exception as exc:  # noqa: BLE001 - the test looks at whatever it is
        error = exc
    finally:
        RELEASE.set()
    got = (tmp_path / RETRY_ERROR).read_text() if (tmp_path / RETRY_ERROR).exists() else None
    assert got == (
        "worker 0 asked the action server again after its proxy gave up waiting for an answer (the action server "
        "did not answer worker 0 within 2 s); that answer may still come and would be taken for the new request's, "
        "so the slot serves no further request: let the worker fail on the TimeoutError (the sampler then names "
        "the call that did not return; with on_worker_failure=restart it rebuilds the worker) instead of catching "
        "it and going on")
    assert _state["stuck"] == 1, "the second request reached the server's policy"
    assert isinstance(error, WorkerError), f"not the WorkerError naming the hung call: {error!r}"
    assert "get_param_values (for worker 0, on cpu) did not return within 2 s while starting" in error.message
    thread = _state["thread"]
    assert thread is not None
    thread.join(30)
    assert not thread.is_alive(), "the serving thread did not end once its call returned"
