"""Ctrl-C in a basic sweep (``train.py -m``, Hydra's basic sweeper and launcher: one job after another in
the sweep's process) ends with one line naming the jobs that never started and the command that runs
exactly them, after the interrupted job's own lines, with exit status 130.

Each test runs a 3-job sweep end to end, as a user would, and sends SIGINT to its process group (Ctrl-C
in a terminal) once the job to interrupt is where the test wants it."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, ContextManager

import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints

from corral.testing.processes import started_session

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
#: Tiny jobs: epochs of 500 steps, one evaluation episode, CSV only, no progress bar.
TINY = ["trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]", "trainer.progress=false"]
#: The same overrides as the sweeper gives them to each job (Hydra writes a boolean as ``False``).
TINY_AS_RUN = [*TINY[:-1], "trainer.progress=False"]
#: Most seconds any wait of these tests takes (the machine running them may be busy).
WAIT_S = 240


class Sweep:
    """A running ``train.py -m`` in its own session; its output lines are collected as they come."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
        except (OSError, ValueError):  # closed by stop_session after a failed test
            pass

    def wait_for(self, what: str, ready: Callable[[], bool]) -> None:
        """Poll until ``ready()``; fail naming ``what`` if the sweep ends first or after WAIT_S seconds."""
        deadline = time.monotonic() + WAIT_S
        while not ready():
            assert self.proc.poll() is None, f"the sweep ended before {what}: " + "\n".join(self.lines[-40:])
            assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s: " + "\n".join(self.lines[-40:])
            time.sleep(0.1)

    def interrupt(self) -> int:
        """Ctrl-C: SIGINT to the sweep's process group; its exit status (bounded wait)."""
        os.killpg(self.proc.pid, signal.SIGINT)
        status = self.proc.wait(timeout=120)
        self._reader.join(timeout=30)
        return status


def run_sweep(tmp_path: Path, overrides: list[str], sweep_dir: str | None = None) -> ContextManager[subprocess.Popen]:
    """``train.py -m <overrides> hydra.sweep.dir=<sweep_dir>`` (default ``<tmp_path>/sweep``; a Hydra
    value as the shell hands it on), started in its own session in ``tmp_path``."""
    where = str(tmp_path / "sweep") if sweep_dir is None else sweep_dir
    cmd = [sys.executable, str(TRAIN), "-m", *overrides, f"hydra.sweep.dir={where}"]
    return started_session(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})


def rows(path: Path) -> int:
    """Data rows in a ``progress.csv`` (0 while it does not exist)."""
    try:
        return max(len(path.read_text().splitlines()) - 1, 0)
    except OSError:
        return 0


def command_of(line: str) -> list[str]:
    """The one command a sweep's last line gives, as its words."""
    parts = line.split("`")
    assert len(parts) == 3, line  # exactly one `...` command
    return shlex.split(parts[1])


def test_ctrl_c_in_job_1_of_3_names_job_2_as_never_started_and_its_command_runs_exactly_it(tmp_path: Path) -> None:
    """Job 0 finished, job 1 (long) is interrupted after a saved epoch, job 2 never started: the last line
    names job 2 alone, says job 1 can be resumed, and gives a command that runs job 2 and nothing else."""
    sweep_dir = tmp_path / "sweep"
    swept = "trainer.max_env_steps=1000,100000000,2000"
    with run_sweep(tmp_path, [swept, "trainer.n_epochs=1000000", *TINY]) as proc:
        sweep = Sweep(proc)
        sweep.wait_for("job 0's summary.json", (sweep_dir / "0" / "summary.json").exists)
        sweep.wait_for("a saved epoch of job 1", lambda: rows(sweep_dir / "1" / "progress.csv") >= 1)
        status = sweep.interrupt()
    out = "\n".join(sweep.lines)
    assert status == 130, out[-3000:]
    # the job's own lines stay: where it stopped and how to resume it, then its closing line
    assert any(x.startswith("[job 1] corral: interrupted ") and x.endswith(f"resume with trainer.resume={sweep_dir}/1")
               for x in sweep.lines), out[-3000:]
    assert any(x.startswith("[job 1] corral: interrupted after") for x in sweep.lines), out[-3000:]
    rest = f"{sweep_dir}-rest"
    job_2 = ["trainer.max_env_steps=2000", "trainer.n_epochs=1000000", *TINY_AS_RUN]
    assert sweep.lines[-1] == (
        f"corral: sweep interrupted: job 2 of 3 never started (trainer.max_env_steps=2000); job 1 can be resumed "
        f"with trainer.resume={sweep_dir}/1; run job 2 with `python {TRAIN} -m {shlex.join(job_2)} "
        f"hydra.sweep.dir={rest}`"), out[-3000:]
    assert sum("sweep interrupted" in x for x in sweep.lines) == 1
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1"]  # job 2 never started indeed

    # The command, as given (with this interpreter for `python`), runs job 2 and only job 2.
    words = command_of(sweep.lines[-1])
    done = subprocess.run([sys.executable, *words[1:]], cwd=tmp_path, capture_output=True, text=True,
                          timeout=WAIT_S)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert sorted(p.name for p in Path(rest).iterdir() if p.is_dir()) == ["0"]
    assert yaml.safe_load((Path(rest) / "0" / ".hydra" / "overrides.yaml").read_text()) == job_2


def test_ctrl_c_in_job_0_of_3_names_jobs_1_and_2_with_one_command_for_both(tmp_path: Path) -> None:
    """The interrupt hits the first job, after a saved epoch: jobs 1 and 2 never started, and one sweep
    command runs both."""
    sweep_dir = tmp_path / "sweep"
    with run_sweep(tmp_path, ["trainer.max_env_steps=100000000,1000,2000", "trainer.n_epochs=1000000",
                              *TINY]) as proc:
        sweep = Sweep(proc)
        sweep.wait_for("a saved epoch of job 0", lambda: rows(sweep_dir / "0" / "progress.csv") >= 1)
        status = sweep.interrupt()
    out = "\n".join(sweep.lines)
    assert status == 130, out[-3000:]
    assert any(x.startswith("[job 0] corral: interrupted after") for x in sweep.lines), out[-3000:]
    assert sweep.lines[-1] == (
        f"corral: sweep interrupted: jobs 1-2 of 3 never started (trainer.max_env_steps=1000; "
        f"trainer.max_env_steps=2000); job 0 can be resumed with trainer.resume={sweep_dir}/0; run jobs 1-2 with "
        f"`python {TRAIN} -m trainer.max_env_steps=1000,2000 trainer.n_epochs=1000000 {shlex.join(TINY_AS_RUN)} "
        f"hydra.sweep.dir={sweep_dir}-rest`"), out[-3000:]
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0"]


def test_a_job_interrupted_before_it_saved_an_epoch_runs_again_with_the_jobs_after_it(tmp_path: Path) -> None:
    """Job 1 is stopped in its first epoch: its own line says there is nothing to resume, and the sweep's
    last line gives it to run again together with job 2, which never started."""
    sweep_dir = tmp_path / "sweep"
    # job 1's first epoch would sample 20 million steps: interrupted in it, whenever the signal comes
    with run_sweep(tmp_path, ["trainer.batch_size=500,20000000,400", "trainer.max_env_steps=1000",
                              *TINY[1:]]) as proc:
        sweep = Sweep(proc)
        # the trainer's warning about that batch: job 1 is training (in train(), before its first epoch)
        sweep.wait_for("job 1's training", lambda: any("trainer.batch_size=20000000" in x and "below" in x
                                                      for x in list(sweep.lines)))
        status = sweep.interrupt()
    out = "\n".join(sweep.lines)
    assert status == 130, out[-3000:]
    (own,) = [x for x in sweep.lines if x.startswith("[job 1] corral: interrupted while")]
    assert own.endswith("no epoch finished, so there is nothing to resume"), out[-3000:]
    assert sweep.lines[-1] == (
        "corral: sweep interrupted: job 2 of 3 never started (trainer.batch_size=400); job 1 "
        "(trainer.batch_size=20000000) left nothing to resume; run jobs 1-2 with "
        f"`python {TRAIN} -m trainer.batch_size=20000000,400 trainer.max_env_steps=1000 {shlex.join(TINY_AS_RUN[1:])} "
        f"hydra.sweep.dir={sweep_dir}-rest`"), out[-3000:]


def pasted(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` pasted into bash in ``cwd`` (``python`` is this interpreter), run to its end (bounded)."""
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=WAIT_S,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
                          preexec_fn=_default_signals)


def _default_signals() -> None:
    """In the child: SIGINT and SIGTERM as a terminal delivers them, whatever the test run ignores."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_in_a_sweep_directory_with_a_space_an_apostrophe_and_a_non_ascii_letter_the_lines_paste(tmp_path: Path) -> None:
    """The sweep runs in ``my swéep's dir`` (relative, as typed). Ctrl-C in job 1 of 3: the sweep's line
    ``job 1 can be resumed with ...``, pasted after ``python train.py`` into bash, resumes job 1 in its
    own directory to its end; its ``run job 2 with `...``` command, pasted as it is, runs job 2 alone."""
    name = "my swéep's dir"
    sweep_dir = tmp_path / name
    # job 1 (60 epochs) is interrupted after its first saved epoch; jobs 0 and 2 take 2 epochs each
    overrides = ["trainer.n_epochs=2,60,2", "trainer.max_env_steps=null", *TINY]
    with run_sweep(tmp_path, overrides, sweep_dir=f'"{name}"') as proc:  # the shell's `'hydra.sweep.dir="..."'`
        sweep = Sweep(proc)
        sweep.wait_for("job 0's summary.json", (sweep_dir / "0" / "summary.json").exists)
        sweep.wait_for("a saved epoch of job 1", lambda: rows(sweep_dir / "1" / "progress.csv") >= 1)
        status = sweep.interrupt()
    out = "\n".join(sweep.lines)
    assert status == 130, out[-3000:]
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1"], out[-3000:]
    last = sweep.lines[-1]
    found = re.fullmatch(r"corral: sweep interrupted: job 2 of 3 never started \(trainer\.n_epochs=2\); job 1 can be "
                         r"resumed with (.*); run job 2 with `python (\S+) (.*)`", last)
    assert found is not None, out[-3000:]
    resume, script, rest_command = found.groups()
    assert script == str(TRAIN), last
    done = rows(sweep_dir / "1" / "progress.csv")
    assert 1 <= done < 60, out[-3000:]

    # `python train.py <what the line says>` in bash: job 1 continues in its directory, to its 60th epoch
    resumed = pasted(f"python {shlex.quote(str(TRAIN))} {resume}", tmp_path)
    assert resumed.returncode == 0, f"{last}\n{resumed.stderr[-3000:]}"
    assert f"corral: resuming the run in {sweep_dir / '1'}" in resumed.stderr, f"{last}\n{resumed.stderr[-3000:]}"
    assert rows(sweep_dir / "1" / "progress.csv") == 60, resumed.stderr[-3000:]
    assert json.loads((sweep_dir / "1" / "summary.json").read_text())["status"] == "completed"
    assert not (tmp_path / "outputs").exists(), "the job continued in place, not in a new directory"
    (own,) = [x for x in sweep.lines if x.startswith("[job 1] corral: interrupted ") and "; resume with " in x]
    assert own.endswith(f"; resume with {resume}"), out[-3000:]  # the job's own line gives the same word

    # the command for job 2, as printed: job 2 alone, into `my swéep's dir-rest` next to the sweep
    ran = pasted(f"python {shlex.quote(script)} {rest_command}", tmp_path)
    assert ran.returncode == 0, f"{last}\n{ran.stderr[-3000:]}"
    rest = tmp_path / f"{name}-rest"
    assert sorted(p.name for p in rest.iterdir() if p.is_dir()) == ["0"], f"{last}\n{ran.stderr[-3000:]}"
    assert yaml.safe_load((rest / "0" / ".hydra" / "overrides.yaml").read_text()) == \
        ["trainer.n_epochs=2", "trainer.max_env_steps=null", *TINY_AS_RUN]
    assert json.loads((rest / "0" / "summary.json").read_text())["status"] == "completed"
