"""corral.testing.processes: the leak checks plugin authors (and corral's suites) rely on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from multiprocessing import shared_memory

import pytest

from corral.testing import child_processes, descendants, process_alive, shm_entries, wait_gone

SLEEPER = [sys.executable, "-c", "import subprocess, sys, time; "
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"]


def test_children_descendants_and_bounded_wait() -> None:
    proc = subprocess.Popen(SLEEPER)
    try:
        assert wait_gone([], timeout=0) == set()
        grandchildren: set[int] = set()
        for _ in range(100):  # the grandchild appears once the child's interpreter has started
            grandchildren = descendants(proc.pid)
            if grandchildren:
                break
            wait_gone([proc.pid], timeout=0.1)
        assert proc.pid in child_processes()
        assert grandchildren and proc.pid not in grandchildren
        assert descendants(os.getpid()) >= {proc.pid} | grandchildren
        assert wait_gone([proc.pid], timeout=0.2) == {proc.pid}, "a sleeping child is still alive"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert not process_alive(proc.pid)
    assert wait_gone([proc.pid], timeout=5) == set()
    for pid in grandchildren:  # orphaned when its parent was killed: clean it up too
        os.kill(pid, 9)
    assert wait_gone(grandchildren, timeout=10) == set()


def test_shm_entries_sees_a_new_segment() -> None:
    segment = shared_memory.SharedMemory(create=True, size=64)
    try:
        assert segment.name.lstrip("/") in shm_entries()
    finally:
        segment.close()
        segment.unlink()
    assert segment.name.lstrip("/") not in shm_entries()


# A child that starts a grandchild in its session, makes a /dev/shm entry named after its own pid
# (as loky's semaphores and joblib's memmapping folders are) and ignores SIGTERM: what a timed-out
# test can leave behind.
STUBBORN = [sys.executable, "-c", (
    "import os, signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "open(f'/dev/shm/sem.loky-{os.getpid()}-corraltest', 'w').close()\n"
    "os.makedirs(f'/dev/shm/joblib_memmapping_folder_{os.getpid()}_x_y', exist_ok=True)\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)\n"
    "time.sleep(120)\n"
)]


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.path.isdir("/proc"), reason="needs /dev/shm and /proc")
def test_started_session_cleans_up_after_a_failing_test_even_with_sigint_ignored() -> None:
    from corral.testing import started_session

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a suite started with `cmd &` from a script
    try:
        with pytest.raises(RuntimeError, match="the test failed"):
            with started_session(STUBBORN, stdout=subprocess.PIPE, text=True) as proc:
                # The child reacts to SIGINT (Python's KeyboardInterrupt handler), though its parent ignores it.
                assert proc.stdout.readline().strip() == "True"
                pids = {proc.pid} | descendants(proc.pid)
                assert len(pids) == 2
                names = {f"sem.loky-{proc.pid}-corraltest", f"joblib_memmapping_folder_{proc.pid}_x_y"}
                assert names <= shm_entries()
                raise RuntimeError("the test failed")  # or timed out: the block is left all the same
    finally:
        signal.signal(signal.SIGINT, previous)
    assert wait_gone(pids, timeout=1) == set(), "a process of the session outlived it (SIGTERM ignored: killed)"
    assert not names & shm_entries(), "its /dev/shm entries were left behind"


def test_interruptible_raises_keyboard_interrupt_with_sigint_ignored() -> None:
    import threading

    from corral.testing import interruptible

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interruptible():
            with pytest.raises(KeyboardInterrupt):
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                time.sleep(5)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN, "the disposition it found is restored"
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_processes_with_environment_finds_a_child_started_with_the_entry_and_not_once_it_is_gone() -> None:
    from corral.testing.processes import processes_with_environment

    entry = f"CORRAL_TEST_MARK={os.getpid()}-{time.monotonic_ns()}"
    name, value = entry.split("=", 1)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, **{name: value}))
    try:
        deadline = time.monotonic() + 10
        while child.pid not in processes_with_environment(entry) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with_environment(entry) == {child.pid}
        assert child.pid not in processes_with_environment(f"{name}={value}-other")  # the whole entry, not a prefix
    finally:
        child.kill()
        child.wait(timeout=10)
    assert processes_with_environment(entry) == set()
