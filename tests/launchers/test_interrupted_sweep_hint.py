"""Ctrl-C in a sweep whose jobs run in other processes (``hydra/launcher=joblib``, ``ray``, ``submitit_local``,
or a launcher corral does not ship, under corral's Optuna sweeper) ends with ``corral: interrupted; finished jobs
keep their summary.json (`corral results <dir>` lists each one's status)``: the sweep's own directory, as the
command gave it and quoted for a shell, so that the command pasted into bash lists the sweep. It said
``(corral results <sweep dir>)``, and ``<sweep`` pasted into bash reads a file named ``sweep``.

Each test runs a 2-job sweep end to end into ``it's a sweep`` (relative, as typed), and sends SIGINT to
its process group (Ctrl-C in a terminal) once a job has saved an epoch."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.framework.sweep_jobs import SweepFollower
from corral.testing.processes import default_signal_dispositions, lines_read_in_background, started_session

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
#: Tiny epochs: 500 steps, one evaluation episode, CSV only, no progress bar; no step limit (trainer.n_epochs is).
TINY = ["trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]", "trainer.progress=false",
        "trainer.max_env_steps=null"]
#: Most seconds any wait of these tests takes (the machine running them may be busy).
WAIT_S = 240
#: The sweep's directory, relative to where train.py runs: a space and an apostrophe.
NAME = "it's a sweep"
#: Hydra's own joblib launcher, which tells corral nothing of the sweep.
HYDRA_JOBLIB = "hydra.launcher._target_=hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
#: Job 0 finishes after one epoch, job 1 runs until interrupted.
ONE_SHORT_ONE_LONG = ["trainer.n_epochs=1,1000000", *TINY]
#: Two Optuna trials at once, both running until interrupted.
OPTUNA = ["hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
          "algo.learning_rate=interval(1e-4, 1e-3)", "trainer.n_epochs=1000000", *TINY]


def _note(command: str | None) -> str:
    """The interrupted sweep's line, naming ``command`` (None: no directory known)."""
    if command is None:
        return ("corral: interrupted; finished jobs keep their summary.json (`corral results` on the sweep's "
                "directory lists them)")
    return f"corral: interrupted; finished jobs keep their summary.json (`{command}` lists each one's status)"


def _interrupted_sweep(tmp_path: Path, overrides: list[str], saved_job: str, finished_job: str | None) -> list[str]:
    """Run ``train.py -m <overrides>`` into ``tmp_path/NAME`` (given as the shell hands on
    ``'hydra.sweep.dir="it's a sweep"'``), in a session of its own; once job ``finished_job`` has its
    summary.json and job ``saved_job`` a saved epoch, SIGINT to the session's process group. The sweep's
    output lines; its exit status must be 130."""
    sweep_dir = tmp_path / NAME
    cmd = [sys.executable, str(TRAIN), "-m", *overrides, f'hydra.sweep.dir="{NAME}"']
    with started_session(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
        lines, reader = lines_read_in_background(proc)

        def saved() -> bool:
            try:
                rows = len((sweep_dir / saved_job / "progress.csv").read_text().splitlines()) - 1
            except OSError:
                rows = 0
            return rows >= 1 and (finished_job is None or (sweep_dir / finished_job / "summary.json").exists())

        deadline = time.monotonic() + WAIT_S
        while not saved():
            assert proc.poll() is None, "the sweep ended before it was interrupted:\n" + "\n".join(lines[-40:])
            assert time.monotonic() < deadline, f"no saved epoch within {WAIT_S} s:\n" + "\n".join(lines[-40:])
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        status = proc.wait(timeout=120)
        reader.join(timeout=30)
    assert status == 130, "\n".join(lines[-40:])
    return lines


def _pasted(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` pasted into bash in ``cwd`` (``corral`` is this interpreter's), run to its end (bounded)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=WAIT_S,
                          env={**os.environ, "PATH": path}, preexec_fn=default_signal_dispositions)


@pytest.mark.parametrize("launcher", [
    pytest.param(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], id="joblib"),
    pytest.param(["hydra/launcher=submitit_local"], id="submitit_local"),
    pytest.param(["hydra/launcher=ray", "hydra.launcher.num_cpus=2"], id="ray"),
])
def test_ctrl_c_names_the_sweep_directory_in_a_command_that_pastes(tmp_path: Path, launcher: list[str]) -> None:
    """Job 0 finished, job 1 is interrupted after a saved epoch: the sweep's line gives ``corral results`` on
    the sweep's directory, as typed and quoted; pasted into bash, it lists the sweep (job 0's row)."""
    pytest.importorskip({"hydra/launcher=joblib": "hydra_plugins.hydra_joblib_launcher",
                         "hydra/launcher=submitit_local": "hydra_plugins.hydra_submitit_launcher",
                         "hydra/launcher=ray": "ray"}[launcher[0]])
    lines = _interrupted_sweep(tmp_path, [*launcher, *ONE_SHORT_ONE_LONG], saved_job="1", finished_job="0")
    out = "\n".join(lines[-40:])
    command = f"corral results {shlex.quote(NAME)}"
    assert not any("<sweep dir>" in line for line in lines), out
    # the sweep's line, and nothing after it (submitit's local job controllers printed a KeyboardInterrupt)
    assert lines.count(_note(command)) == 1, out
    assert lines[-1] == _note(command), out
    if launcher[0] == "hydra/launcher=submitit_local":
        assert not any("Traceback" in line for line in lines), out

    listed = _pasted(lines[lines.index(_note(command))].split("`")[1], tmp_path)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    rows = [row for row in listed.stdout.splitlines() if row.startswith("| 1 ")]  # trainer.n_epochs=1: job 0
    assert len(rows) == 1, listed.stdout + listed.stderr
    assert f"{NAME}/1 (interrupted)" in listed.stdout + listed.stderr  # job 1, named under the sweep's directory


def test_optuna_says_the_directory_whichever_launcher_runs_its_trials(tmp_path: Path) -> None:
    """corral's Optuna sweeper with Hydra's own joblib launcher (which tells corral nothing): the line still
    names the sweep's directory, then the two trials that were running and where they are recorded."""
    pytest.importorskip("optuna")
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    lines = _interrupted_sweep(tmp_path, [*OPTUNA, "hydra/launcher=joblib", HYDRA_JOBLIB, "hydra.launcher.n_jobs=2"],
                               saved_job="0", finished_job=None)
    assert lines[-1] == _note(f"corral results {shlex.quote(NAME)}") + (
        f"; the Optuna study was in memory: no trial had finished, and trials 0, 1, which were running, are in "
        f"{NAME}/optimization_results.yaml (a search with hydra.sweeper.storage and hydra.sweeper.study_name can be "
        "resumed)"), "\n".join(lines[-40:])


def test_a_launcher_that_says_nothing_gets_no_placeholder(tmp_path: Path) -> None:
    """Hydra's basic sweeper with Hydra's own joblib launcher: nothing in the sweep's process knows the
    directory, and the line says what to run without a ``<sweep dir>`` a shell would read as a redirection."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    lines = _interrupted_sweep(tmp_path, ["hydra/launcher=joblib", HYDRA_JOBLIB, "hydra.launcher.n_jobs=2",
                                          *ONE_SHORT_ONE_LONG], saved_job="1", finished_job="0")
    assert lines[-1] == _note(None), "\n".join(lines[-40:])


def test_the_directory_is_made_absolute_when_the_shell_is_elsewhere(tmp_path: Path) -> None:
    """A relative sweep directory is named as given while this process is where train.py started; from
    anywhere else, as the absolute path it is (quoted)."""
    here = SweepFollower(sweep_dir=NAME, cwd=Path.cwd())
    assert here.results_note() == _note(f"corral results {shlex.quote(NAME)}").split("; ", 1)[1]
    elsewhere = SweepFollower(sweep_dir=NAME, cwd=tmp_path / "start")
    assert elsewhere.results_note() == _note(f"corral results {shlex.quote(str(tmp_path / 'start' / NAME))}"
                                             ).split("; ", 1)[1]
