"""The suite's Ray runtimes keep their session directories (logs, sockets) in one short directory
of the suite's own (tests/conftest.py), removed at the end, also when the run is interrupted, and
by the next run when it was killed: nothing in /tmp/ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.testing.processes import cmdline, started_session, wait_gone

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "data" / "ray_dir" / "ray_dir_probe.py"
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PROBE)]


def probe_env(out: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PROBE_OUT=str(out), RAY_USAGE_STATS_ENABLED="0", **extra)
    env.pop("RAY_ADDRESS", None)
    return env


def recorded(out: Path) -> tuple[str, list[Path]]:
    """The probe's RAY_TMPDIR and the session directories of the Ray runtimes it started."""
    lines = out.read_text().splitlines()
    return lines[0].split(" ", 1)[1], [Path(line.split(" ", 1)[1]) for line in lines if line.startswith("SESSION ")]


def processes_naming(path: str) -> set[int]:
    """Running processes whose command line names ``path`` (Ray's raylet and workers name their session)."""
    return {int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) != os.getpid() and path in cmdline(int(e))}


def run_probe(out: Path) -> None:
    """The probe's pytest, to its end."""
    proc = subprocess.run(PYTEST, cwd=ROOT, env=probe_env(out), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def stop_waiting_probe(out: Path, sig: signal.Signals) -> int:
    """The probe's pytest, with Ray started in a child and in process, stopped by ``sig`` to its
    process group (SIGINT: Ctrl-C; SIGKILL: a CI job's timeout); its exit status."""
    err = out.with_suffix(".err")
    with err.open("w") as err_file, started_session(PYTEST, cwd=ROOT, env=probe_env(out, PROBE_WAIT="1", PROBE_CHILD="1"),
                                                    stdout=err_file, stderr=subprocess.STDOUT) as proc:
        deadline = time.monotonic() + 240
        while not (out.exists() and "WAITING" in out.read_text()):
            assert proc.poll() is None, f"the probe's pytest exited ({proc.returncode}): {err.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the probe started no Ray within 240 s: {err.read_text()[-3000:]}"
            time.sleep(0.2)
        os.killpg(proc.pid, sig)
        try:
            return proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the probe's pytest did not stop within 90 s of {sig.name}: {err.read_text()[-3000:]}")


@pytest.mark.parametrize("how", ["finishes", "interrupted", "killed"])
def test_ray_in_a_test_leaves_nothing_in_tmp_ray(tmp_path: Path, how: str) -> None:
    """A pytest of this suite whose test starts Ray: every session directory is in the pytest's own
    short directory, not /tmp/ray, and that directory is gone once pytest has exited (at its end,
    after Ctrl-C), or, after it was killed, once the next pytest of the suite has started."""
    out = tmp_path / "probe.txt"
    if how == "finishes":
        run_probe(out)
    else:
        status = stop_waiting_probe(out, signal.SIGINT if how == "interrupted" else signal.SIGKILL)
        assert status == (2 if how == "interrupted" else -signal.SIGKILL), status  # 2: pytest's "interrupted"
    ray_tmpdir, sessions = recorded(out)
    assert len(sessions) == (1 if how == "finishes" else 2), out.read_text()
    for session in sessions:
        assert str(session.parent) == f"{ray_tmpdir}/ray", f"Ray's session {session} is not in the suite's own " \
                                                           f"directory (RAY_TMPDIR={ray_tmpdir!r})"
    assert len(ray_tmpdir) <= 20, ray_tmpdir  # Ray's socket paths in it stay short
    assert not wait_gone(processes_naming(ray_tmpdir), timeout=30), "Ray processes of the probe still run"
    if how == "killed":
        assert Path(ray_tmpdir).is_dir()  # no teardown, no atexit ran
        run_probe(tmp_path / "next.txt")  # the next pytest of the suite
    assert not Path(ray_tmpdir).exists(), f"the suite's Ray directory {ray_tmpdir} was left: " \
                                          f"{sorted(Path(ray_tmpdir).rglob('*'))[:10]}"
