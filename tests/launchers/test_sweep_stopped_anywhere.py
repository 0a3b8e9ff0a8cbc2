"""A sweep stopped outside its launcher's wait ends as one stopped while its jobs run, end to end with
``train.py``: corral's one line, exit status 143 for SIGTERM (130 for Ctrl-C), nothing of it left running, the
finished jobs' ``summary.json`` kept, and, between an Optuna sweeper's batches, the study's finished trials
kept where the line says.

Before: only a launcher's wait for its jobs took SIGTERM as Ctrl-C. While Hydra composed the sweep, while a
launcher or sweeper set up, or between an Optuna sweeper's batches, SIGTERM's default action ended the sweep's
process at once: no line, exit status -15, and the study of an in-memory search lost.

``tests/conf/pausing_sweep.py`` makes the sweep's process wait at the chosen moment (a Hydra callback at the
multirun's start; an Optuna sampler asked for trial 1's parameters) and says so in a file; the test then
signals that process."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints

from corral.testing.modules import import_path
from corral.testing.processes import (
    SHM_PID_PATTERNS,
    lines_read_in_background,
    session_left,
    session_processes,
    shm_entries,
    started_session,
)

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "tests" / "conf"
TRAIN = ROOT / "train.py"
pausing = import_path(CONF / "pausing_sweep.py", "pausing_sweep")
#: Most seconds a wait of these tests takes (the machine may be busy).
WAIT_S = 240
#: Tiny jobs: two epochs of 200 steps, one evaluation episode, CSV only, no progress bar.
TINY = ["trainer.n_epochs=2", "trainer.max_env_steps=null", "trainer.batch_size=200", "trainer.eval_episodes=1",
        "logger=[csv]", "trainer.progress=false"]
#: An Optuna search of 3 trials, one at a time, whose sampler waits when asked for trial 1.
OPTUNA = ["experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=3", *TINY, "~hydra.sweeper.sampler",
          "+hydra.sweeper.sampler={_target_: pausing_sweep.PausingSampler, at: 1, seed: 1}"]


def stopped_at_pause(tmp_path: Path, overrides: list[str], sig: int) -> tuple[int, list[str], str]:
    """Run ``train.py -m <overrides>`` into ``tmp_path/sweep`` in a session of its own; once its process waits at
    the pause, send it ``sig``. Returns its exit status, its output lines and where it paused. Asserts that
    nothing of its session runs 30 s after it ended and that no ``/dev/shm`` entry of its processes stays."""
    paused = tmp_path / "paused"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", pausing.PAUSED_ENV: str(paused),
           "PYTHONPATH": os.pathsep.join(p for p in (str(CONF), os.environ.get("PYTHONPATH", "")) if p)}
    cmd = [sys.executable, str(TRAIN), "-m", *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    before = shm_entries()
    with started_session(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env) as proc:
        lines, reader = lines_read_in_background(proc)
        deadline = time.monotonic() + WAIT_S
        while not paused.exists() or not paused.read_text().endswith("\n"):
            assert proc.poll() is None, "the sweep ended before its pause:\n" + "\n".join(lines[-40:])
            assert time.monotonic() < deadline, f"no pause within {WAIT_S} s:\n" + "\n".join(lines[-40:])
            time.sleep(0.1)
        where, pid = paused.read_text().rsplit(" ", 1)
        assert int(pid) == proc.pid  # the sweep's own process waits there
        seen = session_processes(proc.pid)
        os.kill(proc.pid, sig)
        status = proc.wait(timeout=120)
        reader.join(timeout=30)
        left = session_left(proc.pid, 30)
        assert not left, f"processes of the sweep still running: {left}\n" + "\n".join(lines[-40:])
        prefixes = tuple(pattern.format(pid=p) for p in seen | {proc.pid} for pattern in SHM_PID_PATTERNS)
        deadline = time.monotonic() + 30
        while (shm := {n for n in shm_entries() - before if n.startswith(prefixes)}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not shm, f"/dev/shm entries of the sweep left: {sorted(shm)}"
    return status, lines, where


def interrupted_line(sig: int, sweep_dir: Path | None, *kept: str) -> str:
    """The sweep's last line after ``sig``: its directory's ``corral results`` (None: not known yet), then what
    the sweeper kept."""
    by = " by SIGTERM" if sig == signal.SIGTERM else ""
    where = (f"`corral results {shlex.quote(str(sweep_dir))}` lists each one's status" if sweep_dir is not None
             else "`corral results` on the sweep's directory lists them")
    return "; ".join([f"corral: interrupted{by}; finished jobs keep their summary.json ({where})", *kept])


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, id="sigterm"), pytest.param(signal.SIGINT, id="ctrl-c")])
def test_a_sweep_stopped_before_its_first_job_ends_with_the_line(tmp_path: Path, sig: int) -> None:
    """Hydra has composed the sweep (its callbacks' on_multirun_start), and no job has started."""
    status, lines, where = stopped_at_pause(
        tmp_path, ["seed=1,2", *TINY, "+hydra.callbacks.pause._target_=pausing_sweep.PauseAtStart"], sig)
    out = "\n".join(lines[-40:])
    assert where == "multirun start"
    assert status == (143 if sig == signal.SIGTERM else 130), out
    assert "Traceback" not in out, out
    assert lines[-1] == interrupted_line(sig, None), out
    assert not (tmp_path / "sweep" / "0").exists(), out  # no job started


@pytest.mark.parametrize("launcher", [
    pytest.param([], id="basic"),
    pytest.param(["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"], id="joblib"),
])
def test_sigterm_between_optuna_batches_keeps_the_in_memory_studys_finished_trials(tmp_path: Path,
                                                                                   launcher: list[str]) -> None:
    """Trial 0 has finished, and the sampler is asked for trial 1: the sweep ends with its line, which says
    where trial 0 is kept (the study was in memory: optimization_results.yaml); trial 0 keeps its summary.json,
    and under joblib the launcher's worker process, kept between batches, is gone too."""
    pytest.importorskip("optuna")
    if launcher:
        pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep_dir = tmp_path / "sweep"
    status, lines, where = stopped_at_pause(tmp_path, [*OPTUNA, *launcher], signal.SIGTERM)
    out = "\n".join(lines[-40:])
    assert where == "trial 1"
    assert status == 143, out
    assert "Traceback" not in out, out
    summary = json.loads((sweep_dir / "0" / "summary.json").read_text())
    assert summary["status"] == "completed", summary
    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    value = summary["final_eval_return"]
    assert results["interrupted"] is True and results["trials"] == {"complete": 1, "pruned": 0, "fail": 0}, results
    assert [(t["number"], t["state"], t["value"]) for t in results["finished_trials"]] == [(0, "complete", value)]
    assert results["best_trial"] == 0 and results["best_value"] == value, results
    assert lines[-1] == interrupted_line(
        signal.SIGTERM, sweep_dir, f"the Optuna study was in memory: its finished trials (1; best value {value:g}, "
        f"trial 0) are in {sweep_dir / 'optimization_results.yaml'} (a search with hydra.sweeper.storage and "
        "hydra.sweeper.study_name can be resumed)"), out
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0"], out


def test_sigterm_between_optuna_batches_of_a_stored_study_says_the_same_command_resumes_it(tmp_path: Path) -> None:
    """With a storage, the line names it and the study; the study there holds trial 0, complete."""
    optuna = pytest.importorskip("optuna")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    sweep_dir = tmp_path / "sweep"
    status, lines, _ = stopped_at_pause(tmp_path, [*OPTUNA, f"hydra.sweeper.storage={storage}"], signal.SIGTERM)
    out = "\n".join(lines[-40:])
    assert status == 143 and "Traceback" not in out, out
    value = json.loads((sweep_dir / "0" / "summary.json").read_text())["final_eval_return"]
    assert lines[-1] == interrupted_line(
        signal.SIGTERM, sweep_dir, f"the Optuna study 'ppo_cartpole' keeps its finished trials (1; best value "
        f"{value:g}, trial 0) in {storage} (and {sweep_dir / 'optimization_results.yaml'}); the same command resumes "
        "the search"), out
    study = optuna.load_study(study_name="ppo_cartpole", storage=storage)
    assert [(t.number, t.state.name, t.value) for t in study.trials if t.state.name == "COMPLETE"] == [(0, "COMPLETE",
                                                                                                        value)]
