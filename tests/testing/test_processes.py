"""corral.testing.processes: the leak checks plugin authors (and corral's suites) rely on."""

from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing import shared_memory

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
