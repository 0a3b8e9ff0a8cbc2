"""Suite-wide settings, and what the suite cleans up after itself."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
import torch

from corral.testing.modules import import_path

# Tiny networks are fastest single-threaded, and on a 2-core machine extra intra-op threads spin
# against the other processes a test starts (the trainer does the same; see trainer.torch_threads).
torch.set_num_threads(1)


#: The file in the suite's Ray directory that names the pytest process owning it.
OWNER_FILE = ".pytest-pid"


def _in_use(path: str) -> bool:
    """A running process names ``path`` in its command line (a raylet, a worker, a ``ray start`` node)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                if path in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    return True
            except OSError:
                continue
    return False


def _remove_orphaned_ray_dirs() -> None:
    """The Ray directories of earlier suites that were killed (SIGKILL, SIGTERM: no finalizer, no
    atexit ran): their pytest is gone and no running process uses them."""
    for candidate in Path("/tmp").glob("cr*"):
        try:
            owner = int((candidate / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not one of ours
        if not Path(f"/proc/{owner}").exists() and not _in_use(str(candidate)):
            shutil.rmtree(candidate, ignore_errors=True)


def _make_ray_dir() -> Path:
    """One short directory (Ray's AF_UNIX socket paths must stay under ~107 bytes) that every Ray
    runtime the suite starts keeps its session directories (logs, sockets) in: RAY_TMPDIR, which
    ``ray.init`` and ``ray start`` in this process and in every process the tests start read
    (Ray's ``get_default_system_temp_dir``: RAY_TMPDIR, else TMPDIR, else /tmp). Set before any
    test module imports Ray."""
    if Path("/proc").is_dir():
        _remove_orphaned_ray_dirs()
    path = Path(tempfile.mkdtemp(prefix="cr", dir="/tmp"))
    (path / OWNER_FILE).write_text(str(os.getpid()))
    os.environ["RAY_TMPDIR"] = str(path)
    return path


_OWNER_PID = os.getpid()
#: The suite's Ray directory; tests that start a cluster with `ray start --temp-dir` put theirs in it.
RAY_DIR = _make_ray_dir()


def remove_the_suites_ray_dir() -> None:
    """Stop this process's Ray runtime, if any, and remove the suite's Ray directory (idempotent)."""
    if os.getpid() != _OWNER_PID:  # a forked child that exits through atexit: not its to remove
        return
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    shutil.rmtree(RAY_DIR, ignore_errors=True)


# Registered before any test imports Ray: atexit runs last-registered first, so Ray's own
# shutdown at exit comes before this. It covers a pytest that ends without its session teardown.
atexit.register(remove_the_suites_ray_dir)


#: Memory one pytest-xdist worker's tests may hold at once: a train.py, its sampler's processes, a Ray node.
GIB_PER_WORKER = 3


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (README's test command): one worker per core this process may run on, no more than
    memory holds at :data:`GIB_PER_WORKER` each, at least one. Each worker runs whole files (``--dist
    loadfile``), so a module's fixtures are built once."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        memory_gib = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (ValueError, OSError, AttributeError):
        return max(1, cores)
    return max(1, min(cores, int(memory_gib // GIB_PER_WORKER)))


@pytest.fixture(scope="session", autouse=True)
def ray_dir() -> Iterator[Path]:
    """The suite's Ray directory, removed with everything in it at the end of the session, also when
    it is interrupted (Ctrl-C runs the session's teardown; atexit covers the rest): nothing the
    suite's Ray runtimes (in process, under train.py, a ``ray start`` cluster) write stays in /tmp/ray."""
    yield RAY_DIR
    remove_the_suites_ray_dir()


@pytest.fixture(scope="session")
def tiny_meta_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An RL2 run on 5-armed bandits (``rl2``) and a PEARL point-robot run (``pearl``), one tiny epoch each and
    no evaluation (``tests/conf/tiny_runs.py``), trained once for the tests that evaluate, load or resume them.
    Read-only: a test that would change one (an in-place resume) works on a copy."""
    tiny_runs = import_path(Path(__file__).parent / "conf" / "tiny_runs.py", "tiny_runs")
    return tiny_runs.meta_runs(tmp_path_factory.mktemp("tiny_meta_runs"))
