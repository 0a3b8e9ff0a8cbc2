"""The proxy's waiting: polling a semaphore before sleeping on it."""

from __future__ import annotations

import multiprocessing
import threading
import time

from corral.parallel.action_proxy import poll_acquire


def test_poll_acquire_takes_a_release_that_comes_while_it_polls() -> None:
    sem = multiprocessing.get_context("spawn").Semaphore(0)
    timer = threading.Timer(0.005, sem.release)
    timer.start()
    try:
        t0 = time.perf_counter()
        assert poll_acquire(sem, 5.0)
        assert time.perf_counter() - t0 < 4.0  # returned on the release, not at the end of the polling
        assert not sem.acquire(False)  # exactly one count was taken
    finally:
        timer.cancel()


def test_poll_acquire_gives_up_after_its_time_and_takes_nothing() -> None:
    sem = multiprocessing.get_context("spawn").Semaphore(0)
    t0 = time.perf_counter()
    assert not poll_acquire(sem, 0.01)
    assert time.perf_counter() - t0 >= 0.01
    assert not poll_acquire(sem, 0.0)
    sem.release()
    assert poll_acquire(sem, 0.0)  # an available count is taken even without polling time
    assert not sem.acquire(False)
