"""``logger=wandb`` leaves nothing in the system's temporary directory, even when its run is killed.

W&B makes two staging directories when it is imported (``tmp…wandb-media``, ``tmp…wandb-artifacts``),
which Python removes only when the process exits normally: a run ended by ``kill -9`` (the
out-of-memory killer, a scheduler past its grace period) left them in /tmp. The logger now has them
made in ``<run dir>/wandb/``. Each run here is ``python train.py`` (W&B offline, no key) with a
``TMPDIR`` of its own, so runs of other tests at the same time do not count.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from corral.testing.processes import processes_with_environment, started_session

pytestmark = pytest.mark.skipif(not __import__("importlib").util.find_spec("wandb"), reason="needs wandb")

ROOT = Path(__file__).resolve().parents[3]
TRAIN = ROOT / "train.py"
#: Small epochs of ~500 steps, no evaluation.
SMALL = ["trainer.batch_size=500", "trainer.eval_every=0", "sampler=local"]
#: W&B's entries in a temporary directory: its staging directories, its service's socket (directory).
WANDB_ENTRY = re.compile(r"^(tmp\w+wandb-(media|artifacts)|wandb-\d+-\d+-\d+|wandb_\w+-[\d-]+\.sock)$")


def wandb_env(tmpdir: Path) -> dict[str, str]:
    """This process's environment without ``WANDB_*``, W&B offline and quiet, and ``TMPDIR=tmpdir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update({"WANDB_MODE": "offline", "WANDB_SILENT": "true", "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1"})
    return env


def wandb_entries(directory: Path, timeout: float = 0.0) -> list[str]:
    """W&B's entries in ``directory``, after waiting up to ``timeout`` seconds for there to be none
    (W&B's service removes its socket shortly after the run's process is gone)."""
    deadline = time.monotonic() + timeout
    while True:
        found = sorted(name for name in os.listdir(directory) if WANDB_ENTRY.match(name))
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


@pytest.fixture
def tmpdir_of_run(tmp_path: Path) -> Iterator[Path]:
    """A ``TMPDIR`` for the run; afterwards no process that has it is left running (W&B's service
    stops when the run's process is gone; one still there after 20 s is killed, and the test fails)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    yield tmpdir
    marker = f"TMPDIR={tmpdir}"
    deadline = time.monotonic() + 20
    while (left := processes_with_environment(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not left, f"processes left running: {sorted(left)}"


def test_a_finished_run_leaves_nothing_in_the_temporary_directory(tmp_path: Path, tmpdir_of_run: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(TRAIN), "logger=[csv,wandb]", "trainer.n_epochs=2", *SMALL,
                           "trainer.progress=false", f"hydra.run.dir={run_dir}"], cwd=tmp_path, env=wandb_env(tmpdir_of_run),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert wandb_entries(tmpdir_of_run, timeout=10) == []
    (offline,) = sorted((run_dir / "wandb").glob("offline-run-*"))  # the run's files, where the docs say
    assert list(offline.glob("run-*.wandb")) and (offline / "logs" / "debug.log").exists()
    assert sorted(p.name for p in (run_dir / "wandb").glob("tmp*")) == []  # staging removed as the run exited


def test_a_killed_run_leaves_wandbs_staging_directories_in_its_run_directory_only(
        tmp_path: Path, tmpdir_of_run: Path) -> None:
    """Before: ``kill -9`` after the first epochs left ``tmp…wandb-media`` and ``tmp…wandb-artifacts``
    in the temporary directory."""
    run_dir = tmp_path / "run"
    cmd = [sys.executable, str(TRAIN), "logger=[console,csv,wandb]", "trainer.n_epochs=1000", *SMALL,
           "trainer.progress=false", f"hydra.run.dir={run_dir}"]
    with started_session(cmd, cwd=tmp_path, env=wandb_env(tmpdir_of_run), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True) as proc:
        deadline = time.monotonic() + 180
        while not (run_dir / "wandb_run.json").exists() or not list((run_dir / "wandb").glob("offline-run-*")):
            assert proc.poll() is None, proc.communicate(timeout=30)[1][-3000:]
            assert time.monotonic() < deadline, "the W&B run did not start within 180 s"
            time.sleep(0.1)
        time.sleep(1.0)  # an epoch or two logged
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert wandb_entries(tmpdir_of_run, timeout=15) == []
    staging = sorted(re.sub(r"^tmp\w+?(wandb-)", r"tmp…\1", p.name) for p in (run_dir / "wandb").glob("tmp*"))
    assert staging == ["tmp…wandb-artifacts", "tmp…wandb-media"]
