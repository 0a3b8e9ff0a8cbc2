"""A basic sweep run in batches (``hydra.sweeper.max_batch_size``) whose job fails with a corral error.

Hydra's basic sweeper reads each batch's results before it starts the next and stops at a batch with a
failed job, so the later batches never start. The sweep's last line said "the sweep ran its other
jobs" all the same; now it names the jobs that ran, those that never started and the command that
runs exactly those. Each test runs ``train.py -m`` end to end: 4 tiny jobs, job ``n``'s environment
raising at step 30 where its ``fail_at`` says so (corral.testing.faulty_envs)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
#: Most seconds one train.py or corral run of these tests may take (the machine may be busy).
TIMEOUT_S = 240
RAISING_ENV = "env.id=corral.testing.faulty_envs:corral/RaisingCartPole-v1"
TINY = ["trainer.n_epochs=1", "trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]"]
#: The environment's own error, as the failed jobs' lines give it.
WHY = ("worker 0 raised EnvironmentFailure: RaisingCartPole failed on purpose at step 30 while sampling "
       "(obtain_samples)")


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a command to its end (bounded), its output captured."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    """A finished command's exit status and output, for an assertion's message."""
    return f"--- rc={proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-5000:]}"


def sweep(tmp_path: Path, swept: list[str], *extra: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``train.py -m <swept> ... hydra.sweeper.max_batch_size=2``: 4 jobs in 2 batches (the last key
    changing fastest), into ``tmp_path/sweep``."""
    where = tmp_path / "sweep"
    proc = run([sys.executable, str(TRAIN), "-m", RAISING_ENV, *swept, *TINY, *extra,
                "hydra.sweeper.max_batch_size=2", f"hydra.sweep.dir={where}"], tmp_path)
    return where, proc


def statuses(where: Path) -> dict[str, str]:
    """Each job directory of a sweep and its summary's status."""
    return {p.name: json.loads((p / "summary.json").read_text())["status"] for p in sorted(where.iterdir())
            if p.is_dir()}


def job_overrides(*swept: str) -> str:
    """A job's task overrides, as the sweep's line gives them."""
    env = RAISING_ENV.replace(":", "\\:")
    return f"{env} {' '.join(swept)} {' '.join(TINY)}"


def corral_results(where: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``corral results <where>``."""
    script = Path(sys.executable).parent / "corral"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "corral.framework.cli"]
    return run([*command, "results", str(where)], cwd)


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_failed_job_in_a_batch_names_the_later_jobs_that_never_started(tmp_path: Path, launcher: str) -> None:
    """Job 0 fails in batch 0 (jobs 0-1): jobs 2-3 never start; the last line says so and gives the one
    command that runs them (which, run, runs exactly them); ``corral results`` lists jobs 0-1."""
    where, proc = sweep(tmp_path, ["seed=1,2", "+env.kwargs.fail_at=30,1000000"], *([] if launcher == "basic" else ["hydra/launcher=joblib"]))
    assert proc.returncode == 1, output(proc)
    assert f"[job 0] corral: error: {WHY}; the traceback above shows where it raised" in proc.stderr.splitlines()
    launcher_override = [] if launcher == "basic" else ["hydra/launcher=joblib"]
    rest_words = [RAISING_ENV.replace(":", "\\:"), "seed=2", "+env.kwargs.fail_at=30,1000000", *TINY,
                  *launcher_override, "hydra.sweeper.max_batch_size=2", f"hydra.sweep.dir={where}-rest"]
    assert proc.stderr.splitlines()[-1] == (
        f"corral: job 0 ({job_overrides('seed=1', '+env.kwargs.fail_at=30')}) failed: {WHY}; the sweep ran jobs 0-1 (`corral results {where}` "
        "lists each one's status) and stopped: Hydra's basic sweeper starts no batch after one with a failed job "
        "(hydra.sweeper.max_batch_size=2), so jobs 2-3 of 4 never started (seed=2 +env.kwargs.fail_at=30; seed=2 "
        f"+env.kwargs.fail_at=1000000); run them with `python {TRAIN} -m {shlex.join(rest_words)}`"), output(proc)
    assert statuses(where) == {"0": "failed", "1": "completed"}  # jobs 2 and 3 never started indeed
    results = corral_results(where, tmp_path)
    assert results.returncode == 0, output(results)
    listed = results.stdout + results.stderr
    assert f"skipped: {where / '0'} (failed: WorkerError: {WHY})" in listed.splitlines(), output(results)
    assert "| 1000000 " in listed and str(where / "2") not in listed, output(results)

    if launcher == "basic":  # the command, as given (with this interpreter for `python`), runs jobs 2-3 and only them
        words = shlex.split(proc.stderr.splitlines()[-1].split("`")[-2])
        done = run([sys.executable, *words[1:]], tmp_path)
        assert done.returncode == 1, output(done)  # its job 0 is the old job 2, which fails again
        rest = Path(f"{where}-rest")
        assert statuses(rest) == {"0": "failed", "1": "completed"}, output(done)
        assert [yaml.safe_load((rest / n / ".hydra" / "overrides.yaml").read_text())[1:3] for n in ("0", "1")] == \
            [["seed=2", "+env.kwargs.fail_at=30"], ["seed=2", "+env.kwargs.fail_at=1000000"]]
        assert done.stderr.splitlines()[-1].endswith("; the sweep ran its other jobs (`corral results "
                                                     f"{rest}` lists each one's status)"), output(done)


def test_a_failed_job_in_the_last_batch_leaves_no_job_unstarted(tmp_path: Path) -> None:
    """Jobs 2-3 fail in the last batch: every job ran, and the line says so as for an unbatched sweep."""
    where, proc = sweep(tmp_path, ["+env.kwargs.fail_at=1000000,30", "seed=1,2"])
    assert proc.returncode == 1, output(proc)
    assert statuses(where) == {"0": "completed", "1": "completed", "2": "failed", "3": "failed"}
    assert proc.stderr.splitlines()[-1] == (
        f"corral: job 2 ({job_overrides('+env.kwargs.fail_at=30', 'seed=1')}) failed: {WHY}; the sweep ran its other jobs "
        f"(`corral results {where}` lists each one's status)"), output(proc)


def test_with_hydra_full_error_the_sweeps_error_says_the_same(tmp_path: Path) -> None:
    """HYDRA_FULL_ERROR=1 (the user asks for Hydra's full report): the report's error is the same line."""
    where = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, str(TRAIN), "-m", RAISING_ENV, "seed=1,2", "+env.kwargs.fail_at=30,1000000",
                           *TINY, "hydra.sweeper.max_batch_size=2", f"hydra.sweep.dir={where}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S, env={**os.environ, "HYDRA_FULL_ERROR": "1"})
    assert proc.returncode == 1, output(proc)
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("corral.framework.entry.SweepJobFailed: corral: job 0 (") and \
        "; the sweep ran jobs 0-1 (" in last and ", so jobs 2-3 of 4 never started (" in last, output(proc)
    assert statuses(where) == {"0": "failed", "1": "completed"}


def test_when_the_jobs_cannot_be_worked_out_again_the_line_says_only_where_the_sweep_stopped(tmp_path: Path) -> None:
    """``seed=shuffle(1,2)``: the seeds' order is random, so the jobs that never started cannot be named;
    the line says after which job the sweep stopped, and claims no more."""
    where, proc = sweep(tmp_path, ["seed=shuffle(1,2)", "+env.kwargs.fail_at=30,1000000"])
    assert proc.returncode == 1, output(proc)
    assert statuses(where) == {"0": "failed", "1": "completed"}
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("corral: job 0 (") and last.endswith(
        f"; the sweep stopped after job 1 (`corral results {where}` lists each one's status): Hydra's basic sweeper "
        "starts no batch after one with a failed job (hydra.sweeper.max_batch_size=2), so any later jobs never started"
    ), output(proc)
