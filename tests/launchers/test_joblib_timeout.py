"""``hydra/launcher=joblib`` with ``hydra.launcher.timeout``, end to end with ``train.py`` as a user runs it.

Before: a job past its timeout was killed with SIGKILL (its slot's process), so its trainer could not
finish: its ``summary.json`` said ``failed`` and the epoch in progress was lost. Now the launcher sends
it SIGTERM, as a user's ``kill`` does: the trainer keeps its epoch, writes its snapshot and its own
``summary.json`` (``interrupted``), and the job's line says it stopped at the timeout and how to resume
it; the other jobs run to their end, and the sweep ends with exit status 1 (a job did not complete).

A job whose own code keeps SIGTERM from stopping it (an environment's SIGTERM handler,
``tests/conf/stubborn_env.py``) is killed ``hydra.launcher.cancel_grace_s`` seconds after the SIGTERM. Before, its line
said only that its process "was killed" (nothing of the SIGTERM it did not stop on, nor of the grace); a
job whose process ended on the SIGTERM by itself (SIGTERM's default action) got the same line, though the
launcher had not killed it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.testing.processes import SHM_PID_PATTERNS, session_left, shm_entries, started_session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "conf"))
import dying_jobs  # noqa: E402  - the watched sweep: nothing of it may run once it has exited
import stubborn_env  # noqa: E402  - an environment with a SIGTERM handler of its own

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")

ROOT = Path(__file__).resolve().parents[2]
#: Job 0 runs far longer than the timeout; job 1 ends well within it.
SLOW, FAST = 10_000, 2
TIMEOUT_S = 20  # long enough for job 0 to save an epoch on a loaded machine (12 s was not, at load 4-5)
#: The timeout of the sweep whose three jobs must all be training when it comes (on a busy machine too).
STUBBORN_TIMEOUT_S = 25
#: ``hydra.launcher.cancel_grace_s`` of that sweep: long enough for job 1 (3 s in its handler, then its epoch and
#: snapshot) to stop within it on a busy machine, and shorter than the default 30 s, which holds the test longer.
STUBBORN_GRACE_S = 15


def test_a_job_past_its_timeout_stops_as_on_sigterm_and_can_be_resumed(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    # hydra.launcher.cancel_grace_s (30 s) after the SIGTERM: the job stops within a second of it
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
                        r"job's process \(pid \d+\) was sent SIGTERM and the job stopped as on a user's SIGTERM "
                        rf"\(summary.json: interrupted\); {re.escape(resume)} continues it from its "
                        rf"latest snapshot \({re.escape(snapshots[-1].name)}\)", job_lines[0]), job_lines[0]
    assert err.strip().splitlines()[-1].startswith("corral: job 0 ("), err[-3000:]

    fast = json.loads((sweep_dir / "1" / "summary.json").read_text())
    assert fast["status"] == "completed" and fast["epochs"] == FAST, fast



def test_a_job_that_does_not_stop_on_the_timeouts_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    """Three jobs past the timeout, each with an environment whose SIGTERM handler replaced the trainer's:
    job 0's ignores it (killed after the grace), job 1's passes it on to the trainer's after a few seconds
    (stops as on a user's SIGTERM, within the grace: not killed), job 2's ends its process on it."""
    before = shm_entries()
    sweep_dir = tmp_path / "multirun"
    limit_s = STUBBORN_TIMEOUT_S + STUBBORN_GRACE_S + 60  # startup and the jobs' ends, on a busy machine
    t0 = time.monotonic()
    code, err, seen = dying_jobs.run_watched_sweep(
        tmp_path, {"stubborn_env": (ROOT / "tests" / "conf" / "stubborn_env.py").read_text()},
        "hydra/launcher=joblib", "hydra.launcher.n_jobs=3", f"hydra.launcher.timeout={STUBBORN_TIMEOUT_S}",
        f"hydra.launcher.cancel_grace_s={STUBBORN_GRACE_S}", "env=gym",
        "env.id=stubborn_env:corral_test/StubbornCartPole-v1",
        "+env.kwargs.on_sigterm=ignore,pass_on,default", "+env.kwargs.flush_s=3", f"trainer.n_epochs={SLOW}",
        "trainer.max_env_steps=null", "trainer.batch_size=500", "trainer.eval_every=0", "logger=[csv]",
        "trainer.progress=false", "sampler=local", limit_s=limit_s)
    took = time.monotonic() - t0
    assert code == 1, err[-3000:]
    assert "Traceback" not in err and "leaked" not in err, err[-3000:]
    # the launcher's kill ended it (job 0 would run on), not before the grace
    assert STUBBORN_TIMEOUT_S + STUBBORN_GRACE_S <= took < limit_s, (took, err[-3000:])
    lines = err.strip().splitlines()

    def job_line(num: int, how: str) -> tuple[int, dict]:
        """Job ``num``'s one line (``how``: a regular expression for its start, whose group is the pid),
        ending with the resume command from its latest snapshot (or, with none, that it saved none: a job
        stopped in its first epoch on a busy machine); its pid and its summary.json."""
        said = [line for line in lines if line.startswith(f"[job {num}] corral: error: ")]
        assert len(said) == 1, err[-3000:]
        run_dir = sweep_dir / str(num)
        snapshots = sorted(run_dir.rglob("epoch_*.pt"))
        then = (rf"{re.escape(f'trainer.resume={run_dir}')} continues it from its latest snapshot "
                rf"\({re.escape(snapshots[-1].name)}\)" if snapshots else
                "it saved no snapshot, so run it again with its overrides")
        found = re.fullmatch(rf"\[job {num}\] corral: error: {how}; {then}", said[0])
        assert found is not None, said[0]
        pid = int(found.group(1))
        assert f"{stubborn_env.SAID} in pid {pid}" in err, err[-3000:]  # its environment had the SIGTERM
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["pid"] == pid, summary
        progress = run_dir / "progress.csv"
        rows = len(progress.read_text().strip().splitlines()) - 1 if progress.exists() else 0
        saved = int(snapshots[-1].stem.split("_")[1]) if snapshots else 0
        assert rows - 1 <= saved <= rows and rows < SLOW, (rows, saved)
        if summary["status"] == "failed":
            assert summary["error"] == f"JobProcessDied: {said[0].split('error: ', 1)[1]}", summary
        else:
            assert summary["epochs"] == rows, (summary, rows)
        return pid, summary

    timeout = rf"the job ran past hydra.launcher.timeout={STUBBORN_TIMEOUT_S} s"
    # job 0: still running STUBBORN_GRACE_S after the SIGTERM: killed, and its line says so (and, as it trained on,
    # how to resume it from its latest snapshot)
    _, ignored = job_line(0, rf"{timeout} and did not stop within {STUBBORN_GRACE_S:g} s of SIGTERM, so the job's "
                             r"process \(pid (\d+)\) was killed with SIGKILL \(code in the job handles SIGTERM without "
                             r"stopping, such as an environment's own SIGTERM handler, or a call in it does not "
                             r"return\)")
    assert ignored["status"] == "failed" and (sweep_dir / "0" / "snapshots").is_dir(), ignored
    assert re.fullmatch(r"corral: job 0 \(.*on_sigterm=ignore.*\) failed: .*did not stop within.*", lines[-1]), \
        lines[-1]
    # job 1: stopped on the SIGTERM (its handler passed it on) within the grace: not killed, its own record
    _, passed = job_line(1, rf"{timeout}, so the job's process \(pid (\d+)\) was sent SIGTERM and the job stopped as "
                            r"on a user's SIGTERM \(summary.json: interrupted\)")
    assert passed["status"] == "interrupted", passed
    assert [line for line in lines if line.startswith("[job 1] corral: interrupted by SIGTERM")], err[-3000:]
    # job 2: its process ended on the SIGTERM (its default action) before the kill: said as such
    _, ended = job_line(2, rf"{timeout}, so the job's process \(pid (\d+)\) was sent SIGTERM, and it was killed by "
                           r"SIGTERM instead of stopping as the trainer does on SIGTERM \(code in the job set SIGTERM "
                           r"back to its default action, or ended its process\)")
    assert ended["status"] == "failed", ended
    # nothing of the sweep runs (run_watched_sweep), and no /dev/shm entry of its processes is left
    prefixes = tuple(pattern.format(pid=pid) for pid in seen for pattern in SHM_PID_PATTERNS)
    assert not [name for name in shm_entries() - before if name.startswith(prefixes)], shm_entries() - before
