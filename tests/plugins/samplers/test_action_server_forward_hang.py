"""A forward pass of the action server's policy that does not return: the server is named, not a worker.

Every worker the server owes an answer waits for it, so each runs out of ``timeout`` (its proxy's,
or its lack of progress); that is no fault of theirs. The sampler names the server's forward pass in
one line, restarts no worker (a restarted one would wait for the same server), and its shutdown is
bounded although the serving thread never lets go of its lock.

The stuck pass may return after the sampler has shut down, or never: either way nothing may crash.
The serving thread (and the forward pass it runs) must never touch memory that was unmapped under
it; an earlier version unmapped the slots' segments while the stuck pass still held a view of an
observation, and the pass, once it returned, segfaulted the process.
"""

from __future__ import annotations

import logging
import multiprocessing
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from corral import ActionServerSampler, AlternatingSampler, EnvFactory, EnvSpec, MLPPolicy, WorkerError
from corral.testing.modules import import_path

TIMEOUT = 2.0
ROOT = Path(__file__).resolve().parents[3]
#: ``tests/conf/action_server_checks.py`` (``tests`` is not an importable package).
checks = import_path(ROOT / "tests" / "conf" / "action_server_checks.py", "action_server_checks")
our_segments, serving_threads = checks.our_segments, checks.serving_threads

#: The server runs a deep copy of the policy: what the test controls lives at module level.
RELEASE = threading.Event()
_lock = threading.Lock()
_state: dict[str, Any] = {"left": None, "stuck": 0, "returned": 0}
STUCK = threading.Event()


def block_after(n: int) -> None:
    """The policy's ``n + 1``-th ``get_actions`` call from now blocks until :data:`RELEASE` is set."""
    with _lock:
        _state.update(left=n, stuck=0, returned=0)
    STUCK.clear()
    RELEASE.clear()


class BlockingPolicy(MLPPolicy):
    """An MLPPolicy whose ``get_actions`` (run by the server, in this process) blocks once, when
    :func:`block_after` says, until the test sets :data:`RELEASE`; then it computes the actions from
    the observations it was given (reading them only then)."""

    def get_actions(self, observations: Any) -> Any:
        with _lock:
            left = _state["left"]
            block = left == 0
            _state["left"] = None if left is None or block else left - 1
        if block:
            _state["stuck"] += 1
            STUCK.set()
            RELEASE.wait(120)  # bounded, so a broken close cannot hang the suite for ever
            out = super().get_actions(observations)
            _state["returned"] += 1
            return out
        return super().get_actions(observations)


@pytest.fixture(autouse=True)
def leaves_nothing_behind() -> Iterator[None]:
    """No worker process and no segment of this process's may outlive a test (the semaphores are
    checked per sampler, :func:`hang_a_forward_pass`: other processes may be creating some now)."""
    yield
    checks.assert_nothing_left()


@pytest.fixture
def policy() -> Iterator[BlockingPolicy]:
    block_after(-1)  # never
    yield BlockingPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))
    RELEASE.set()  # a pass still stuck returns now (after every check of the test)


MESSAGE = re.compile(
    r"(action_server|alternating) sampler: the action server's forward pass \(the policy's get_actions for "
    r"(worker \d|workers \[\d(, \d)*\]), on cpu\) did not return within 2 s while sampling \(obtain_samples\); "
    r"every worker waits for it, so none is at fault and none was restarted; check the policy's get_actions "
    r"\(what it blocks on: a lock, a device that stopped answering\), or raise sampler.timeout=2 if its "
    r"forward passes are this slow")


def hang_a_forward_pass(sampler_class: type, policy: BlockingPolicy, on_worker_failure: str, after: int,
                        caplog: pytest.LogCaptureFixture) -> tuple[WorkerError, threading.Thread, float]:
    """Sample once, then make the server's ``after``-th forward pass hang: the error, the serving
    thread (still stuck) and the seconds the sampler took to raise and shut down."""
    before = serving_threads()
    sampler = sampler_class(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200, n_workers=2,
                            seed=1, timeout=TIMEOUT, device="cpu", on_worker_failure=on_worker_failure)
    with sampler:
        thread, semaphores = checks.sample_once(sampler, policy, before)
        block_after(after)
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(WorkerError) as info:
            sampler.obtain_samples(1, 400, policy.get_param_values())
        took = time.monotonic() - t0
    assert sampler.n_restarts == 0
    assert not [r for r in caplog.records if "restarting" in r.getMessage()], "a worker was restarted"
    checks.assert_semaphores_freed(semaphores)
    return info.value, thread, took


CASES = [(ActionServerSampler, "raise", 0), (ActionServerSampler, "restart", 7), (AlternatingSampler, "restart", 3)]
IDS = ["action_server-raise", "action_server-restart", "alternating-restart"]


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize(("sampler_class", "on_worker_failure", "after"), CASES, ids=IDS)
def test_a_hung_forward_pass_names_the_server_and_may_return_after_the_shutdown(
        policy: BlockingPolicy, sampler_class: type, on_worker_failure: str, after: int,
        caplog: pytest.LogCaptureFixture) -> None:
    error, thread, took = hang_a_forward_pass(sampler_class, policy, on_worker_failure, after, caplog)
    message = str(error)
    assert MESSAGE.fullmatch(message), message
    assert "\n" not in message and error.worker_number is None and error.remote_traceback is None
    assert took < 30, f"raising and shutting down took {took:.1f} s"
    assert multiprocessing.active_children() == []
    assert our_segments() == set(), "the stuck server's segments are still named in /dev/shm"
    assert thread.is_alive() and _state["stuck"] == 1 and _state["returned"] == 0, "the pass was not stuck"
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="corral.parallel.action_server"):
        RELEASE.set()  # the stuck pass returns, long after the shutdown, and reads its observations
        thread.join(30)
    assert not thread.is_alive(), "the serving thread did not end once its pass returned"
    assert _state["returned"] == 1
    noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], noisy


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_pass_that_never_returns_leaves_nothing_named_behind(policy: BlockingPolicy,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    error, thread, _ = hang_a_forward_pass(AlternatingSampler, policy, "raise", 0, caplog)
    assert MESSAGE.fullmatch(str(error)), str(error)
    # Still stuck (the policy fixture releases it at teardown): nothing of the sampler's is left (its
    # semaphores: checked by hang_a_forward_pass).
    assert multiprocessing.active_children() == []
    assert our_segments() == set()
    assert thread.is_alive() and _state["returned"] == 0


# ---------------------------------------------------------------------- the interpreter's exit
SCRIPT = """
import os
import threading
from pathlib import Path

from corral import ActionServerSampler, EnvFactory, EnvSpec, MLPPolicy, WorkerError

ARMED = threading.Event()


class SpinningPolicy(MLPPolicy):
    def get_actions(self, observations):
        if ARMED.is_set():
            print("stuck", flush=True)
            while True:  # stuck in Python code, reading the observations it was given, until the process ends
                observations.sum()
        return super().get_actions(observations)


if __name__ == "__main__":
    policy = SpinningPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()), hidden_sizes=(8,))
    sampler = ActionServerSampler(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=200,
                                  n_workers=2, seed=1, timeout=2, device="cpu", on_worker_failure="restart")
    sampler.obtain_samples(0, 200, policy.get_param_values())
    ARMED.set()
    try:
        sampler.obtain_samples(1, 400, policy.get_param_values())
    except WorkerError as exc:
        print("error:", exc, flush=True)
    print("pid:", os.getpid(), flush=True)
    print("left:", sorted(p.name for p in Path("/dev/shm").glob(f"corral_{os.getpid()}_*")), flush=True)
    # The interpreter exits with the serving thread still spinning in the policy.
"""


def test_the_process_exits_cleanly_with_the_pass_still_stuck(tmp_path: Path) -> None:
    script = tmp_path / "stuck_at_exit.py"
    script.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "stuck" in lines, proc.stdout
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and MESSAGE.fullmatch(errors[0][len("error: "):]), proc.stdout
    assert "left: []" in lines, proc.stdout
    for noise in ("Traceback", "Fatal Python error", "Segmentation fault", "Exception ignored", "leaked"):
        assert noise not in proc.stderr, proc.stderr
    (pid,) = [int(line.split()[1]) for line in lines if line.startswith("pid: ")]
    assert our_segments(pid) == set(), "the exited process left segments in /dev/shm"
