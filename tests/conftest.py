"""Suite-wide settings, and what the suite cleans up after itself."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest
import torch

# Tiny networks are fastest single-threaded, and on a 2-core machine extra intra-op threads spin
# against the other processes a test starts (the trainer does the same; see trainer.torch_threads).
torch.set_num_threads(1)


def ray_session_root() -> Path:
    """Where Ray keeps each runtime's session directory (logs, sockets): Ray's own default."""
    base = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
    return Path(base or "/tmp") / "ray"


def ray_sessions() -> set[str]:
    """The names of Ray's session directories (``session_<date>_<pid>``)."""
    root = ray_session_root()
    return {p.name for p in root.glob("session_2*")} if root.is_dir() else set()


def _in_use(session: str) -> bool:
    """A running process names the session in its command line (a raylet, a worker of it)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if session in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    return True
            except OSError:
                continue
    return False


@pytest.fixture(scope="session", autouse=True)
def remove_the_suites_ray_sessions() -> Iterator[None]:
    """Each Ray runtime the suite starts (in process, under train.py, a ``ray start`` cluster)
    leaves a session directory of logs in /tmp/ray, ~0.3 MB each, ~40 a run. Those that appeared
    during the suite and that no running process uses are removed at its end."""
    before = ray_sessions()
    yield
    if not Path("/proc").is_dir():
        return
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
    root = ray_session_root()
    for name in sorted(ray_sessions() - before):
        if not _in_use(name):
            shutil.rmtree(root / name, ignore_errors=True)
    latest = root / "session_latest"
    if latest.is_symlink() and not latest.exists():
        latest.unlink()
