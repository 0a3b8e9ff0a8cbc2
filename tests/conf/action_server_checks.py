"""What the action-server tests share, for ``tests/parallel/test_action_server_control_calls.py``,
``tests/parallel/test_action_server_restart_hang.py`` and
``tests/plugins/samplers/test_action_server_forward_hang.py`` (loaded with
:func:`corral.testing.modules.import_path`): a sampler's serving thread and its server's semaphores
after a first ``obtain_samples``, and the checks that none of them, no worker process and no
shared-memory segment of this process's outlives the sampler.
"""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Iterator

import pytest

from corral.parallel.shared_memory import segment_prefix

SHM = Path("/dev/shm")


def our_segments(pid: int | None = None) -> set[str]:
    """Shared-memory segments created by process ``pid`` (default: this one)."""
    return {p.name for p in SHM.glob(segment_prefix(pid) + "*")} if SHM.is_dir() else set()


def serving_threads() -> set[threading.Thread]:
    """The action servers' serving threads running in this process."""
    return {t for t in threading.enumerate() if t.name == "corral-action-server"}


def sample_once(sampler: Any, policy: Any, before: set[threading.Thread]) -> tuple[threading.Thread, list[Any]]:
    """Sample once with ``sampler`` (entered, its serving thread not in ``before``): its serving thread,
    and weak references to its server's semaphores (the doorbell, each slot's posted and answered)
    for :func:`assert_semaphores_freed`."""
    (thread,) = serving_threads() - before
    sampler.obtain_samples(0, 200, policy.get_param_values())
    server = sampler.server
    assert server is not None
    semaphores = [weakref.ref(s) for s in (server.doorbell, *[x for slot in server.slots
                                                               for x in (slot.posted, slot.answered)])]
    return thread, semaphores


def assert_semaphores_freed(semaphores: list[Any]) -> None:
    """The semaphores :func:`sample_once` referred to are freed, so their names are gone from
    ``/dev/shm`` (a semaphore's finalizer unlinks its name)."""
    gc.collect()
    assert [r for r in semaphores if r() is not None] == [], "the stuck server's semaphores were not freed"


def assert_nothing_left(timeout: float = 10.0) -> None:
    """Wait up to ``timeout`` seconds for this process's worker processes to exit and its segments to
    go, then assert that none is left."""
    deadline = time.monotonic() + timeout
    while (multiprocessing.active_children() or our_segments()) and time.monotonic() < deadline:
        time.sleep(0.05)
    children = multiprocessing.active_children()
    assert children == [], f"worker processes still running: {children}"
    segments = our_segments()
    assert segments == set(), f"segments still named in {SHM}: {sorted(segments)}"


@pytest.fixture(autouse=True)
def leaves_nothing_behind() -> Iterator[None]:
    """No worker process and no segment of this process's may outlive a test (a test module takes it
    with ``leaves_nothing_behind = checks.leaves_nothing_behind``)."""
    yield
    assert_nothing_left()

