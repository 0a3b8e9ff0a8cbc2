"""``hydra/sweeper=optuna`` (corral's sweeper, current Optuna) and ``experiment=ppo_cartpole_optuna``, end to end.

- the preset's search reports the best parameters and value (eight trials);
- a search in SQLite storage interrupted with Ctrl-C resumes: the interrupted trial runs again, the
  finished ones are kept, job directories follow trial numbers;
- pruning across processes (joblib jobs, SQLite storage): each job reports its evaluation return
  every epoch to its trial and stops when the pruner says so.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from corral.testing.processes import default_signal_dispositions, file_size_limit, started_session

optuna = pytest.importorskip("optuna")
if int(optuna.__version__.split(".")[0]) < 3:
    pytest.skip("corral's Optuna sweeper needs optuna>=3", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
TINY = ["trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]", "trainer.progress=false"]


def train(cwd: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def summaries(sweep_dir: Path) -> dict[int, dict]:
    return {int(p.parent.name): json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")}


def test_eight_trials_report_the_best_parameters(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    proc = train(tmp_path, "experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=8", "trainer.max_env_steps=1000",
                 *TINY, f"hydra.sweep.dir={sweep_dir}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Best parameters:" in out and "Best value:" in out
    by_job = summaries(sweep_dir)
    assert sorted(by_job) == list(range(8))
    # The preset's median pruner may stop trials early (in memory, in this process); the others complete.
    assert all(s["status"] == "completed" or (s["status"] == "pruned" and s["error"].startswith("TrialPruned"))
               for s in by_job.values())
    done = [s for s in by_job.values() if s["status"] == "completed"]
    assert len(done) >= 4  # the pruner's n_startup_trials always run to the end
    lrs = {s["config"]["algo"]["learning_rate"] for s in by_job.values()}
    assert len(lrs) == 8 and all(1e-4 <= lr <= 1e-2 for lr in lrs)
    assert all(0.05 <= s["config"]["algo"]["clip_range"] <= 0.4 for s in by_job.values())
    assert all(s["config"]["algo"]["name"] == "ppo" and s["config"]["env"]["id"] == "CartPole-v1"
               for s in by_job.values())
    # The objective is each trial's final evaluation return; the best one is reported.
    result = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    best = max(done, key=lambda s: s["final_eval_return"])
    assert result["best_value"] == pytest.approx(best["final_eval_return"])
    assert result["best_params"]["algo.learning_rate"] == pytest.approx(best["config"]["algo"]["learning_rate"])
    assert result["best_params"]["algo.clip_range"] == pytest.approx(best["config"]["algo"]["clip_range"])
    assert result["trials"]["complete"] == len(done) and result["trials"]["fail"] == 0
    # Sweeper plumbing stays out of the runs' overrides (and so out of `corral results` and run names).
    assert not any("CORRAL_OPTUNA" in o for s in by_job.values() for o in s["overrides"])


def _wait_for(paths: list[Path], proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if all(p.exists() for p in paths):
            return True
        time.sleep(0.2)
    return all(p.exists() for p in paths)


def test_a_search_without_a_stored_study_does_not_overwrite_an_earlier_one(tmp_path: Path) -> None:
    """Without storage and study_name an Optuna search numbers its jobs from 0, so a second one into
    the same sweep directory would overwrite the first's: refused in one line before any trial."""
    sweep_dir = tmp_path / "multirun"
    common = ["experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=1", "hydra.sweeper.pruner=null", *TINY,
              "trainer.max_env_steps=1000", f"hydra.sweep.dir={sweep_dir}"]
    first = train(tmp_path, *common)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    before = (sweep_dir / "0" / "summary.json").read_text()
    second = train(tmp_path, *common)
    assert second.returncode == 2, (second.stdout + second.stderr)[-4000:]
    assert second.stderr.splitlines()[-1] == (
        f"corral: error: hydra.sweep.dir={sweep_dir}: {sweep_dir} already holds the jobs of an earlier sweep (0), and "
        "this sweep's jobs would overwrite them; give another directory (the default, multirun/<date>/<time>, is new "
        "each time)"), second.stderr[-3000:]
    assert (sweep_dir / "0" / "summary.json").read_text() == before


def test_a_new_stored_study_does_not_overwrite_an_earlier_studys_jobs(tmp_path: Path) -> None:
    """A stored study numbers its jobs from the trials it already has: a *new* study (another
    study_name, or another storage) in a sweep directory that holds an earlier study's jobs starts
    at 0 and would overwrite them (accepted before). Refused in one line, without creating the new
    storage's file; the earlier study itself still continues there."""
    sweep_dir = tmp_path / "multirun"
    common = ["experiment=ppo_cartpole_optuna", "hydra.sweeper.pruner=null", *TINY, "trainer.max_env_steps=1000",
              f"hydra.sweep.dir={sweep_dir}"]
    storage = f"hydra.sweeper.storage=sqlite:///{tmp_path / 'optuna.db'}"
    first = train(tmp_path, *common, storage, "hydra.sweeper.study_name=a", "hydra.sweeper.n_trials=1")
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    before = (sweep_dir / "0" / "summary.json").read_text()
    refused = (f"corral: error: hydra.sweep.dir={sweep_dir}: {sweep_dir} already holds the jobs of an earlier sweep "
               "(0), and this sweep's jobs would overwrite them; give another directory (the default, "
               "multirun/<date>/<time>, is new each time)")
    for other in ([storage, "hydra.sweeper.study_name=b"],
                  [f"hydra.sweeper.storage=sqlite:///{tmp_path / 'new.db'}", "hydra.sweeper.study_name=a"]):
        second = train(tmp_path, *common, *other, "hydra.sweeper.n_trials=1")
        assert second.returncode == 2, (second.stdout + second.stderr)[-4000:]
        assert second.stderr.splitlines()[-1] == refused, second.stderr[-3000:]
    assert not (tmp_path / "new.db").exists()
    assert (sweep_dir / "0" / "summary.json").read_text() == before
    more = train(tmp_path, *common, storage, "hydra.sweeper.study_name=a", "hydra.sweeper.n_trials=2")
    assert more.returncode == 0, (more.stdout + more.stderr)[-4000:]
    assert (sweep_dir / "0" / "summary.json").read_text() == before and (sweep_dir / "1" / "summary.json").is_file()


def test_an_interrupted_search_resumes_from_its_sqlite_storage(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    common = ["experiment=ppo_cartpole_optuna", f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=resume_me",
              "hydra.sweeper.pruner=null", *TINY, f"hydra.sweep.dir={sweep_dir}"]
    first = train(tmp_path, *common, "hydra.sweeper.n_trials=1", "trainer.max_env_steps=1000")
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    # The same search with n_trials=3 and trials that would run for hours: Ctrl-C while trial 1 runs.
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", *common, "hydra.sweeper.n_trials=3",
           "trainer.max_env_steps=100000000", "trainer.n_epochs=1000000"]
    # Its own session and SIGINT at its default disposition, even when the suite runs with SIGINT
    # ignored by inheritance (detached, or `cmd &` from a script), so the SIGINT acts as a Ctrl-C.
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=default_signal_dispositions)
    try:
        assert _wait_for([sweep_dir / "1" / "progress.csv"], proc, 180), "trial 1 did not start"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode != 0, out[-3000:]
    study = optuna.load_study(study_name="resume_me", storage=storage)
    states = [t.state.name for t in study.trials]
    assert states[0] == "COMPLETE" and states[1] == "RUNNING", states
    interrupted_params = study.trials[1].params
    # the trial that was running is recorded, and the last line says the search runs it again
    recorded = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert recorded["interrupted"] is True and [t["number"] for t in recorded["finished_trials"]] == [0], recorded
    assert recorded["interrupted_trials"] == [{"number": 1, "params": interrupted_params,
                                               "job_dir": str(sweep_dir / "1")}], recorded
    # the sweep's own line ends it, as for any launcher (with the in-process launcher it had none)
    assert proc.returncode == 130, out[-3000:]
    assert out.strip().splitlines()[-1] == (
        f"corral: interrupted; finished jobs keep their summary.json (`corral results {sweep_dir}` lists each one's "
        f"status); the Optuna study 'resume_me' keeps its finished trials (1; best value "
        f"{study.trials[0].value:g}, trial 0) in {storage} (and {sweep_dir / 'optimization_results.yaml'}); the same "
        "command resumes the search and runs trial 1, which was running, again"), out[-3000:]
    before = (sweep_dir / "0" / "summary.json").read_bytes()

    resumed = train(tmp_path, *common, "hydra.sweeper.n_trials=3", "trainer.max_env_steps=1000")
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out[-4000:]
    assert "resumes with 1 finished trial(s)" in out and "trial 1 was left running" in out
    study = optuna.load_study(study_name="resume_me", storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert study.trials[2].params == interrupted_params  # the interrupted trial ran again
    assert study.trials[3].params not in (study.trials[0].params, interrupted_params)
    assert (sweep_dir / "0" / "summary.json").read_bytes() == before  # finished trials are kept
    by_job = summaries(sweep_dir)
    for number in (2, 3):  # job directory N is trial N
        assert by_job[number]["status"] == "completed"
        assert by_job[number]["config"]["algo"]["learning_rate"] == pytest.approx(
            study.trials[number].params["algo.learning_rate"])
        assert by_job[number]["final_eval_return"] == pytest.approx(study.trials[number].value)


def test_ctrl_c_in_a_trial_of_an_in_memory_search_records_it_and_ends_with_the_sweeps_line(tmp_path: Path) -> None:
    """Ctrl-C while the first trial of an in-memory search runs in the sweep's process (Hydra's basic launcher):
    the trial's job stops and saves, ``optimization_results.yaml`` records the trial that was running (its
    parameters and job directory) and the sweep ends with its interrupted line, exit 130 (it ended with the
    job's exit status, no line and no record)."""
    sweep_dir = tmp_path / "multirun"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "experiment=ppo_cartpole_optuna", "hydra.sweeper.pruner=null",
           "hydra.sweeper.n_trials=2", *TINY, "trainer.max_env_steps=100000000", "trainer.n_epochs=1000000",
           f"hydra.sweep.dir={sweep_dir}"]
    with started_session(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert _wait_for([sweep_dir / "0" / "progress.csv"], proc, 180), "trial 0 did not start"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]
    results = sweep_dir / "optimization_results.yaml"
    recorded = yaml.safe_load(results.read_text())
    assert recorded["interrupted"] is True and recorded["finished_trials"] == [], recorded
    (trial,) = recorded["interrupted_trials"]
    assert trial["number"] == 0 and trial["job_dir"] == str(sweep_dir / "0"), recorded
    assert set(trial["params"]) == {"algo.learning_rate", "algo.clip_range"}, recorded
    summary = json.loads((sweep_dir / "0" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["config"]["algo"]["learning_rate"] == pytest.approx(
        trial["params"]["algo.learning_rate"]), summary
    assert out.strip().splitlines()[-1] == (
        f"corral: interrupted; finished jobs keep their summary.json (`corral results {sweep_dir}` lists each one's "
        f"status); the Optuna study was in memory: no trial had finished, and trial 0, which was running, is in "
        f"{results} (a search with hydra.sweeper.storage and hydra.sweeper.study_name can be resumed)"), out[-3000:]


@pytest.mark.skipif(not __import__("importlib").util.find_spec("hydra_plugins.hydra_joblib_launcher"),
                    reason="needs hydra-joblib-launcher")
def test_jobs_in_other_processes_report_each_epoch_and_are_pruned(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    # A pruner that prunes every trial once it has reported epochs 0, 1 and 2: deterministic.
    # The sweeper on its own (no preset): the search space on the command line.
    proc = train(tmp_path, "hydra/sweeper=optuna", "algo.learning_rate=tag(log, interval(1e-4, 1e-2))",
                 "algo.clip_range=choice(0.1, 0.2)", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
                 "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweeper.storage={storage}",
                 "hydra.sweeper.study_name=prune_me",
                 "hydra.sweeper.pruner={_target_: optuna.pruners.ThresholdPruner, lower: 1.0e9, n_warmup_steps: 2}",
                 "trainer.max_env_steps=4000", "trainer.eval_every=1", *TINY, f"hydra.sweep.dir={sweep_dir}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "no trial completed (2 pruned)" in out
    study = optuna.load_study(study_name="prune_me", storage=storage)
    assert [t.state.name for t in study.trials] == ["PRUNED", "PRUNED"]
    by_job = summaries(sweep_dir)
    pids = set()
    for trial in study.trials:
        summary = by_job[trial.number]
        assert summary["status"] == "pruned"
        assert summary["error"].startswith(f"TrialPruned: trial {trial.number} pruned at epoch 2")
        pids.add(summary["pid"])
        with open(sweep_dir / str(trial.number) / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        # Three of the eight epochs ran, each reported its evaluation return to the trial; the run stopped
        # inside epoch 2's end-of-epoch hooks, so epochs 0 and 1 are the ones committed to progress.csv.
        assert sorted(trial.intermediate_values) == [0, 1, 2]
        assert [int(float(r["epoch"])) for r in rows] == [0, 1]
        assert [trial.intermediate_values[i] for i in (0, 1)] == [
            pytest.approx(float(r["eval/return_mean"])) for r in rows]
        assert summary["config"]["algo"]["clip_range"] == trial.params["algo.clip_range"] in (0.1, 0.2)
    assert os.getpid() not in pids  # the trials ran in joblib's worker processes
    result = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert result["trials"] == {"complete": 0, "pruned": 2, "fail": 0} and "best_value" not in result


def test_a_prune_on_that_no_epoch_reports_stops_the_search_at_its_first_trial(tmp_path: Path) -> None:
    # A misspelt statistic: without the check, the pruner heard nothing and every trial ran to the end.
    sweep_dir = tmp_path / "multirun"
    proc = train(tmp_path, "experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=3", "trainer.max_env_steps=1000",
                 "trainer.eval_every=1", "hydra.sweeper.prune_on=eval/return_avg", *TINY, f"hydra.sweep.dir={sweep_dir}",
                 timeout=200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-4000:]
    reason = ("hydra.sweeper.prune_on=eval/return_avg is not a statistic of this run, so the pruner would never hear "
              "from a trial; choose one of eval/episode_length, eval/return_max, eval/return_mean, eval/return_min, "
              "eval/return_std, train/episode_length, train/n_episodes, train/return_max, train/return_mean, "
              "train/return_min (progress.csv has every column)")
    assert proc.stderr.strip().splitlines()[-1] == (
        f"corral: error: the Optuna search stopped at trial 0, as every trial would fail alike: {reason}"), out[-4000:]
    assert f"[job 0] corral: error: {reason}" in proc.stderr
    assert sorted(summaries(sweep_dir)) == [0]  # trials 1 and 2 never ran
    assert summaries(sweep_dir)[0]["status"] == "failed"
    assert "Traceback" not in out


def test_a_search_whose_trials_would_not_evaluate_is_one_line_before_any_trial(tmp_path: Path) -> None:
    """The objective is each trial's final evaluation return. A trial with ``trainer.eval_every=0``
    returned its training return instead, and the study ranked the two kinds of number together."""
    sweep_dir = tmp_path / "multirun"
    proc = train(tmp_path, "experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=2", "trainer.eval_every=choice(1,0)",
                 *TINY, f"hydra.sweep.dir={sweep_dir}", timeout=200)
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-4000:]
    assert proc.stderr.strip().splitlines() == [
        "corral: error: trainer.eval_every=0: the Optuna objective is each trial's final evaluation return, and with "
        "evaluation off a trial has none (it would be ranked by its training return); set trainer.eval_every > 0 (an "
        "evaluation also runs after the last epoch) (an end of the search space of trainer.eval_every)"]
    assert not sweep_dir.exists()


def test_a_prune_on_without_a_pruner_is_one_warning_line(tmp_path: Path) -> None:
    """Only a pruner reads ``prune_on``: without one, a misspelt statistic was accepted in silence."""
    sweep_dir = tmp_path / "multirun"
    proc = train(tmp_path, "hydra/sweeper=optuna", "hydra.sweeper.n_trials=1", "hydra.sweeper.prune_on=eval/retrun_mean",
                 "algo.learning_rate=interval(0.0001,0.01)", "trainer.n_epochs=1", *TINY, f"hydra.sweep.dir={sweep_dir}",
                 timeout=200)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [
        "corral: warning: hydra.sweeper.prune_on=eval/retrun_mean has no effect while hydra.sweeper.pruner=null: only "
        "a pruner reads it; set a pruner (e.g. 'hydra.sweeper.pruner={_target_: optuna.pruners.MedianPruner}'), or "
        "leave prune_on at its default (eval/return_mean)"]
    assert summaries(sweep_dir)[0]["status"] == "completed"


def test_a_search_whose_every_trial_fails_ends_in_one_line(tmp_path: Path) -> None:
    # An environment that returns NaN: each trial fails alone (a trial's own failure does not stop a search).
    sweep_dir = tmp_path / "multirun"
    proc = train(tmp_path, "experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=2", "trainer.max_env_steps=1000",
                 "env=gym", "env.id=corral.testing.faulty_envs:corral/NaNCartPole-v1", "+env.kwargs.fail_at=30",
                 *TINY, f"hydra.sweep.dir={sweep_dir}", timeout=200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"corral: error: the Optuna search has no completed trial (2 fail); each job's error is above, and "
        f"`corral results {sweep_dir}` lists them"), out[-4000:]
    assert sorted(summaries(sweep_dir)) == [0, 1]
    assert "Traceback" not in out


@pytest.mark.parametrize("case", ["not a database", "full disk"])
def test_a_storage_optuna_cannot_use_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    """SQLite's own error under SQLAlchemy's and Optuna's, said in one line that names the setting."""
    if case == "not a database":
        (tmp_path / "study.db").write_text("some notes, not a database; long enough to be read as one: " * 4)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-m", "experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=2",
         "trainer.n_epochs=1", *TINY, "hydra.sweeper.storage=sqlite:///study.db", f"hydra.sweep.dir={tmp_path / 's'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=400,
        preexec_fn=file_size_limit(30_000) if case == "full disk" else None)
    why = "DatabaseError: file is not a database" if case == "not a database" else "OperationalError: disk I/O error"
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == (
        f"corral: error: hydra.sweeper.storage=sqlite:///study.db: Optuna could not read or write the study there "
        f"({why}); check that storage (a file that is not an Optuna database, a full disk) and run the same command "
        "again to resume the study"), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
