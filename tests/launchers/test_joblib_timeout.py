"""``hydra/launcher=joblib`` with ``hydra.launcher.timeout``, end to end with ``train.py`` as a user runs it.

Before: a job past its timeout was killed with SIGKILL (its slot's process), so its trainer could not
finish: its ``summary.json`` said ``failed`` and the epoch in progress was lost. Now the launcher sends
it SIGTERM, as a user's ``kill`` does: the trainer keeps its epoch, writes its snapshot and its own
``summary.json`` (``interrupted``), and the job's line says it stopped at the timeout and how to resume
it; the other jobs run to their end, and the sweep ends with exit status 1 (a job did not complete).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from corral.testing.processes import session_left, started_session

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")

ROOT = Path(__file__).resolve().parents[2]
#: Job 0 runs far longer than the timeout; job 1 ends well within it.
SLOW, FAST = 10_000, 2
TIMEOUT_S = 12


def test_a_job_past_its_timeout_stops_as_on_sigterm_and_can_be_resumed(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    # TIMEOUT_GRACE_S (30 s) after the SIGTERM: the job stops within a second of it
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
           f"hydra.launcher.timeout={TIMEOUT_S}", "env=gym",
           "env.id=CartPole-v1", f"trainer.n_epochs={SLOW},{FAST}", "trainer.batch_size=500", "trainer.eval_every=0",
           "logger=[csv]", "trainer.progress=false", "sampler=local", f"hydra.sweep.dir={sweep_dir}"]
    with started_session(cmd, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True) as proc:
        _, err = proc.communicate(timeout=120)
        left = session_left(proc.pid, 10)
    assert not left, f"the sweep left processes behind: {sorted(left)}"
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]

    slow = json.loads((sweep_dir / "0" / "summary.json").read_text())
    assert slow["status"] == "interrupted", slow
    rows = (sweep_dir / "0" / "progress.csv").read_text().strip().splitlines()
    assert 1 < len(rows) < 1 + SLOW and slow["epochs"] == len(rows) - 1, (rows[-2:], slow)
    snapshots = sorted((sweep_dir / "0").rglob("epoch_*.pt"))
    assert snapshots, list((sweep_dir / "0").rglob("*"))
    resume = f"trainer.resume={sweep_dir / '0'}"
    trainer_line = [line for line in err.splitlines() if "corral: interrupted by SIGTERM" in line]
    assert trainer_line and resume in trainer_line[0], err[-3000:]
    job_lines = [line for line in err.splitlines() if line.startswith("[job 0] corral: error: ")]
    assert len(job_lines) == 1, err[-3000:]
    assert re.fullmatch(rf"\[job 0\] corral: error: the job ran past hydra.launcher.timeout={TIMEOUT_S} s, so the "
                        r"job's process \(pid \d+\) was sent SIGTERM and the job stopped as on a user's SIGTERM, its "
                        rf"run saved \(summary.json: interrupted\); {re.escape(resume)} continues it from its "
                        rf"latest snapshot \({re.escape(snapshots[-1].name)}\)", job_lines[0]), job_lines[0]
    assert err.strip().splitlines()[-1].startswith("corral: job 0 ("), err[-3000:]

    fast = json.loads((sweep_dir / "1" / "summary.json").read_text())
    assert fast["status"] == "completed" and fast["epochs"] == FAST, fast
