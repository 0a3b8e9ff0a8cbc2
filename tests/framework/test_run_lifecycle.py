"""What a run tells, and what a resume may change: the closing line, the limit that ended the run,
``corral.log``, ``summary.json``'s mode, the progress bar, multirun prefixes, and library limits."""

from __future__ import annotations

import io
import json
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corral.testing.processes import file_size_limit

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["trainer.batch_size=200", "trainer.eval_every=1", "trainer.eval_episodes=1", "trainer.progress=false",
         "trainer.max_env_steps=null", "logger=[console,csv]"]


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *overrides], cwd=cwd, capture_output=True,
                          text=True, timeout=240)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A finished two-epoch run."""
    run = tmp_path_factory.mktemp("lifecycle") / "run"
    proc = train(run.parent, f"hydra.run.dir={run}", *SMALL, "trainer.n_epochs=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run, proc


def test_one_closing_line_names_status_limit_returns_steps_time_and_dir(finished) -> None:
    run, proc = finished
    summary = json.loads((run / "summary.json").read_text())
    closing = [line for line in proc.stderr.splitlines() if line.startswith("corral: completed")]
    assert len(closing) == 1, proc.stderr
    line = closing[0]
    assert "completed (n_epochs=2 reached) after 2 epochs" in line
    assert f"final eval {summary['final_eval_return']:.2f}" in line
    assert f"best eval {summary['best_eval_return']:.2f}" in line
    assert f"{summary['env_steps']:,} env steps" in line and "wall time " in line and line.endswith(str(run))
    assert summary["stop_reason"] == "n_epochs=2"


def test_corral_log_gets_the_epoch_lines_and_the_closing_line(finished) -> None:
    run, proc = finished
    log = (run / "corral.log").read_text()
    epoch_lines = [line for line in proc.stdout.splitlines() if line.startswith("epoch")]
    assert len(epoch_lines) == 2
    for line in epoch_lines:
        assert line in log
    assert "corral: completed (n_epochs=2 reached)" in log


def test_summary_json_has_the_mode_of_the_other_files(finished) -> None:
    run, _ = finished
    mode = stat.S_IMODE((run / "summary.json").stat().st_mode)
    assert mode == stat.S_IMODE((run / "progress.csv").stat().st_mode)
    assert mode & stat.S_IRGRP  # not 0600


def test_max_env_steps_ends_the_run_and_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = train(tmp_path, f"hydra.run.dir={run}", *SMALL, "trainer.n_epochs=100", "trainer.max_env_steps=300",
                 "trainer.eval_every=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "max_env_steps=300" and summary["epochs"] == 2
    assert "completed (max_env_steps=300 reached) after 2 epochs" in proc.stderr


def test_resume_refuses_overrides_it_cannot_honour(finished, tmp_path: Path) -> None:
    run, _ = finished
    before = (run / "progress.csv").read_text()
    proc = train(tmp_path, f"trainer.resume={run}", "trainer.n_epochs=3", "algo=vpg", "algo.learning_rate=0.1",
                 "sampler.n_workers=3")
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr
    assert "corral: error: trainer.resume continues a run with the config it was started with" in err
    assert "algo=vpg (the run has algo=ppo)" in err and "algo.learning_rate=0.1" in err
    assert "sampler.n_workers=3 (the run has 1" in err
    assert "Traceback" not in err
    assert (run / "progress.csv").read_text() == before
    # Into a branch directory: refused the same way, and the directory Hydra made for it is gone
    # (it was left holding only .hydra/ and an empty corral.log).
    branch = tmp_path / "branch"
    proc = train(tmp_path, f"trainer.resume={run}", f"hydra.run.dir={branch}", "algo=vpg")
    assert proc.returncode == 2 and "algo=vpg (the run has algo=ppo)" in proc.stderr, proc.stderr[-3000:]
    assert not branch.exists()
    # A source that does not exist: one line before Hydra makes any directory.
    proc = train(tmp_path, f"trainer.resume={tmp_path / 'nowhere'}", f"hydra.run.dir={branch}")
    assert proc.returncode == 2 and not branch.exists(), proc.stderr[-3000:]
    assert proc.stderr.strip() == (f"corral: error: trainer.resume={tmp_path / 'nowhere'}: {tmp_path / 'nowhere'} does "
                                   "not exist; give the run's directory (the one with snapshots/) or a snapshot file")


def test_resuming_a_finished_run_says_how_to_train_longer(finished, tmp_path: Path) -> None:
    run, _ = finished
    summary = (run / "summary.json").read_text()
    hydra_records = sorted(p.name for p in (run / ".hydra").iterdir())
    proc = train(tmp_path, f"trainer.resume={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"corral: the run in {run} already finished: n_epochs=2 reached at epoch 2" in proc.stderr
    assert f"trainer.resume={run} trainer.n_epochs=4" in proc.stderr
    assert (run / "summary.json").read_text() == summary
    # nothing written: not even Hydra's record of the command (it left .hydra/resume-<time>/)
    assert sorted(p.name for p in (run / ".hydra").iterdir()) == hydra_records
    # a limit below where the run is: the suggestion goes past the run (it said n_epochs=2 at epoch 2)
    proc = train(tmp_path, f"trainer.resume={run}", "trainer.n_epochs=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "already finished: n_epochs=1 reached at epoch 2" in proc.stderr
    assert f"trainer.resume={run} trainer.n_epochs=4 " in proc.stderr, proc.stderr[-3000:]


def test_a_branch_of_a_finished_run_with_nothing_to_do_leaves_no_directory(finished, tmp_path: Path) -> None:
    """``trainer.resume=<run> hydra.run.dir=<new>`` where the run already reached the limit: the branch
    was left with the copied history and no summary.json (``corral results`` listed it as unfinished)."""
    run, _ = finished
    branch = tmp_path / "branch"
    proc = train(tmp_path, f"trainer.resume={run}", f"hydra.run.dir={branch}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (f"corral: the run in {run} already finished: n_epochs=2 reached at epoch 2 (") in proc.stderr
    assert (f"nothing to do, so the branch {branch} was not made. To train longer, resume with a larger limit, e.g. "
            f"trainer.resume={run} hydra.run.dir={branch} trainer.n_epochs=4 ") in proc.stderr, proc.stderr[-3000:]
    assert not branch.exists()


def test_the_finished_message_suggests_a_limit_past_the_run() -> None:
    from corral.framework.resume import finished_message

    assert "trainer.max_env_steps=2048 (and trainer.n_epochs" in finished_message("r", "max_env_steps=1000", 3, 1024)
    assert "trainer.max_env_steps=4020 (and" in finished_message("r", "max_env_steps=2000", 3, 2010)
    assert "trainer.n_epochs=10 (and trainer.max_env_steps" in finished_message("r", "n_epochs=5", 5, 999)


def test_a_relative_resume_path_names_the_same_run_when_the_job_runs_in_its_directory(tmp_path: Path) -> None:
    """``hydra.job.chdir=true`` runs the job in its run directory; ``trainer.resume=run`` is read from
    where train.py was started, as without it (the job said "no snapshot found in run" before)."""
    proc = train(tmp_path, "hydra.run.dir=run", *SMALL, "trainer.n_epochs=1", "trainer.eval_every=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = train(tmp_path, "trainer.resume=run", "trainer.n_epochs=2", "hydra.job.chdir=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"corral: resumed from {tmp_path / 'run' / 'snapshots' / 'epoch_000001.pt'} at epoch 1" in proc.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["epochs"] == 2


def test_multirun_console_lines_carry_the_job_number(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = train(tmp_path, "-m", "seed=1,2", f"hydra.sweep.dir={sweep}", *SMALL, "trainer.n_epochs=1",
                 "trainer.eval_every=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    epoch_lines = [line for line in proc.stdout.splitlines() if "epoch    0" in line]
    assert sorted(line.split("]")[0] for line in epoch_lines) == ["[job 0", "[job 1"], proc.stdout
    assert sum(line.startswith("[job ") and "corral: completed" in line for line in proc.stderr.splitlines()) == 2


def test_progress_bar_counts_toward_the_limit_that_ends_the_run() -> None:
    from corral.framework.progress import ProgressBar

    out = io.StringIO()
    bar = ProgressBar(n_epochs=100, max_env_steps=10_000, stream=out)
    bar.update(10, 5_000, {"time/steps_per_s": 1234.0})
    line = out.getvalue().rsplit("\r", 1)[-1]
    assert line.startswith("epoch 10 [############............] | 5,000/10,000 steps")  # steps bind: half done
    assert "1,234 steps/s" in line  # the epoch's time/steps_per_s, as the console line prints it
    out = io.StringIO()
    bar = ProgressBar(n_epochs=4, max_env_steps=10_000, stream=out)
    bar.update(2, 100, {})
    assert out.getvalue().rsplit("\r", 1)[-1].startswith("epoch 2/4 [############............] | 100 steps")


def test_library_trainer_applies_only_the_limits_it_is_given() -> None:
    from corral import Trainer, TrainerConfig
    from corral.framework.errors import ConfigError

    trainer = Trainer(loggers=[])
    assert trainer.limits() == (None, None)
    assert trainer.limits(n_epochs=50) == (50, None)  # no silent 100,000-step cap
    assert trainer.limits(max_env_steps=1000) == (None, 1000)
    configured = Trainer(TrainerConfig(n_epochs=7), loggers=[])
    assert configured.limits() == (7, 100_000)  # a config's limits all apply, as in train.py
    trainer.algo = object()  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="needs a limit"):
        trainer.train()


def test_a_trainer_config_may_leave_one_limit_null_but_not_both() -> None:
    from corral import Trainer, TrainerConfig
    from corral.framework.errors import ConfigError

    assert Trainer(TrainerConfig(n_epochs=None), loggers=[]).limits() == (None, 100_000)
    assert Trainer(TrainerConfig(max_env_steps=None), loggers=[]).limits() == (100, None)
    with pytest.raises(ConfigError, match="trainer.n_epochs and trainer.max_env_steps are both null"):
        TrainerConfig(n_epochs=None, max_env_steps=None)


def test_library_train_runs_the_epochs_asked_for_past_100k_steps() -> None:
    """``train(n_epochs=3, batch_size=40_000)``: 120,000 steps, more than the old silent cap."""
    from corral import VPG, EnvFactory, EnvSpec, LocalSampler, MLPPolicy, Trainer

    env = EnvFactory("CartPole-v1")
    spec = EnvSpec.from_env(env())
    policy = MLPPolicy(spec, hidden_sizes=(8,))
    sampler = LocalSampler(agents=policy, envs=env, max_episode_length=500, n_workers=1, seed=1)
    trainer = Trainer(loggers=[])
    trainer.setup(VPG(spec, policy, sampler, seed=1), env)
    with trainer:
        trainer.train(n_epochs=3, batch_size=40_000)
    assert trainer.epoch == 3 and trainer.total_env_steps >= 120_000
    assert trainer.stop_reason == "n_epochs=3"


# ------------------------------------------------------------------------ what cannot be written
class _FullDiskLogger:
    """A logger whose file is on a full disk from epoch 1 on: it writes to /dev/full (ENOSPC)."""

    option_name = None

    def __init__(self) -> None:
        self.rows: list[int] = []

    def log(self, epoch: int, stats: dict[str, float]) -> None:
        if epoch >= 1:
            with open("/dev/full", "w") as f:
                f.write(f"{epoch}\n")
                f.flush()
        self.rows.append(epoch)

    def resume(self, epoch: int, env_steps: int) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_row_that_cannot_be_written_stops_the_run_in_one_line_that_says_how_to_go_on(tmp_path: Path) -> None:
    from corral import VPG, EnvFactory, EnvSpec, LocalSampler, MLPPolicy, OutputError, Trainer, TrainerConfig

    env = EnvFactory("CartPole-v1")
    spec = EnvSpec.from_env(env())
    policy = MLPPolicy(spec, hidden_sizes=(8,))
    sampler = LocalSampler(agents=policy, envs=env, max_episode_length=500, n_workers=1, seed=1)
    logger = _FullDiskLogger()
    trainer = Trainer(TrainerConfig(eval_every=0, progress=False, snapshot_every=1, max_env_steps=None),
                      snapshot_dir=tmp_path, loggers=[logger])  # type: ignore[list-item]
    trainer.setup(VPG(spec, policy, sampler, seed=1), env)
    with trainer, pytest.raises(OutputError) as stopped:
        trainer.train(n_epochs=3, batch_size=100)
    assert str(stopped.value) == (
        "logger=_FullDiskLogger could not write the row of epoch 1 (OSError: No space left on device); the run "
        f"stopped there; fix that (space, permissions, the path) and continue from its last snapshot (epochs 0-0) "
        f"with trainer.resume={tmp_path}")
    assert logger.rows == [0]
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == ["epoch_000001.pt", "latest"]  # no epoch 2


def test_a_snapshot_that_cannot_be_written_is_one_line_and_no_traceback(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "snapshots").write_text("")  # a file where the snapshots' directory goes
    proc = train(tmp_path, f"hydra.run.dir={run}", *SMALL, "trainer.n_epochs=2", "trainer.eval_every=0")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == (
        f"corral: error: could not write the snapshot epoch_000001.pt (FileExistsError: File exists: {run / 'snapshots'}); "
        "the run stopped there; fix that (space, permissions, the path) and start the run again (it has no snapshot "
        "yet)"), proc.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("filename", ["/tmp/elsewhere.csv", "../up.csv", ""])
def test_a_csv_file_outside_the_run_directory_is_refused(tmp_path: Path, filename: str) -> None:
    proc = train(tmp_path, f"hydra.run.dir={tmp_path / 'run'}", *SMALL, "trainer.n_epochs=1",
                 f"logger.csv.filename={filename}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [
        "corral: error: logger.csv.filename must be a relative path inside the run directory (not absolute, no '..'), "
        f"got {filename!r}"], proc.stderr[-3000:]
    assert not (tmp_path / "run").exists()  # refused before the run directory was made


def test_corral_plot_reads_the_csv_file_the_run_named(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "run"
    proc = train(tmp_path, f"hydra.run.dir={run}", *SMALL, "trainer.n_epochs=2", "logger.csv.filename=logs/curve.csv")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run / "logs" / "curve.csv").is_file() and not (run / "progress.csv").exists()
    plot = subprocess.run([sys.executable, "-m", "corral.framework.cli", "plot", str(tmp_path / "runs"), "-o",
                           str(tmp_path / "p.png"), "--metric", "eval/return_mean"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert plot.returncode == 0, plot.stderr[-3000:]
    assert (tmp_path / "p.png").stat().st_size > 0


# ------------------------------------------------------------------ what no algorithm can learn from
def _failed_ppo_run(faulty_env: str, fail_at: int, sampler: str, error: type[Exception]) -> str:
    """Train PPO on ``corral/<faulty_env>`` (``corral.testing.faulty_envs``) with ``sampler`` (two
    workers); return the message of ``error``, which stops it in epoch 0 (asserted: nothing counted)."""
    from corral import PPO, EnvFactory, EnvSpec, LocalSampler, MLPPolicy, Trainer
    from corral.plugins.samplers.multiprocessing import MultiprocessingSampler

    env = EnvFactory(f"corral.testing.faulty_envs:corral/{faulty_env}", {"fail_at": fail_at})  # imported where it runs
    spec = EnvSpec.from_env(env())
    policy = MLPPolicy(spec, hidden_sizes=(8,))
    cls = LocalSampler if sampler == "local" else MultiprocessingSampler
    sampler_obj = cls(agents=policy, envs=env, max_episode_length=500, n_workers=2, seed=1)
    trainer = Trainer(loggers=[])
    trainer.setup(PPO(spec, policy, sampler_obj, seed=1), env)
    with trainer, pytest.raises(error) as stopped:
        trainer.train(n_epochs=2, batch_size=200)
    assert trainer.epoch == 0 and trainer.total_env_steps == 0
    return str(stopped.value)


@pytest.mark.parametrize("sampler", ["local", "multiprocessing"])
def test_nan_observations_stop_the_run_before_training_on_them(sampler: str) -> None:
    """An environment whose state blew up (NaN observations from its 30th step): the run stops with one
    error naming the environment and where the values are, on every sampler (the trainer checks the
    batch it gets). Before, PPO sampled on and failed in its update with torch's traceback."""
    from corral import EnvironmentValueError

    message = _failed_ppo_run("NaNCartPole-v1", 30, sampler, EnvironmentValueError)
    assert re.match(r"worker [01]'s environment EnvFactory\('corral\.testing\.faulty_envs:corral/NaNCartPole-v1', "
                    r"kwargs=\{'fail_at': 30\}\) returned values no algorithm can learn from \(observations: NaN in ",
                    message), message  # the worker that got there first
    assert " while sampling (obtain_samples); the run stopped before training on them" in message


def test_nonfinite_values_names_the_array_the_kind_and_the_first_step() -> None:
    import numpy as np

    from corral.framework.batch import EpisodeBatch, nonfinite_values

    def batch(obs: np.ndarray, rewards: np.ndarray) -> EpisodeBatch:
        return EpisodeBatch(observations=obs, actions=np.zeros(5, np.int64), rewards=rewards,
                            step_types=np.array([0, 1, 2, 0, 2], np.uint8), lengths=np.array([3, 2]),
                            last_observations=np.zeros((2, 2), np.float32))

    finite = batch(np.zeros((5, 2), np.float32), np.ones(5, np.float32))
    assert nonfinite_values(finite) is None
    obs = np.zeros((5, 2), np.float32)
    obs[3, 1] = np.nan
    rewards = np.ones(5, np.float32)
    rewards[[1, 4]] = np.inf
    assert nonfinite_values(batch(obs, rewards)) == (
        "observations: NaN in 1 of 5 steps (first at step 0 of episode 1); rewards: infinite values in 2 of 5 steps "
        "(first at step 1 of episode 0)")


@pytest.mark.parametrize("sampler", ["local", "multiprocessing", "ray"])
def test_an_environment_that_raises_is_the_same_error_on_every_sampler(tmp_path: Path, sampler: str) -> None:
    """An environment whose ``step`` raises: the worker's traceback from where corral's worker called
    the environment (the frames of corral's sampler and worker left out), then, last, the error line
    naming the worker, the exception and what it was doing; exit status 2, a failed summary.json,
    and the whole traceback in corral.log. The same under the local sampler, a worker process and
    a Ray actor. (The error line came first and the whole traceback after it, so the screen ended
    in corral's own frames; Ray's had its colour codes and its actor header; corral.log did not say
    why the run failed.)"""
    if sampler == "ray":
        pytest.importorskip("ray")
    proc = train(tmp_path, f"hydra.run.dir={tmp_path / 'run'}", *SMALL, "trainer.n_epochs=2", "env=gym",
                 "env.id=corral.testing.faulty_envs:corral/RaisingCartPole-v1", "+env.kwargs.fail_at=30",
                 f"sampler={sampler}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.rstrip().splitlines()
    errors = [line for line in lines if line.startswith("corral: error:")]
    assert errors == [lines[-1]] and re.fullmatch(
        r"corral: error: (ray sampler: )?worker \d+( \(pid \d+\))? raised EnvironmentFailure: RaisingCartPole failed on "
        r"purpose at step 30 while sampling \(obtain_samples\); the traceback above shows where it raised",
        errors[0]), proc.stderr[-3000:]
    shown = proc.stderr[proc.stderr.index("Traceback (most recent call last):"):proc.stderr.index(errors[0])]
    assert re.match(r"Traceback \(most recent call last\):\n  \.\.\. \d frame\(s\) in corral's sampler and worker \.\.\.\n"
                    r'  File ".*gymnasium', shown), shown
    assert shown.rstrip().endswith("EnvironmentFailure: RaisingCartPole failed on purpose at step 30"), shown
    assert "collect_share" not in shown and "\x1b[" not in shown and "ray::" not in shown, shown
    assert "Error executing job" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "failed"
    log = (tmp_path / "run" / "corral.log").read_text()
    assert errors[0].split("; the traceback above")[0] in log and "collect_share" in log and "faulty_envs.py" in log


@pytest.mark.parametrize("sampler", ["local", "multiprocessing", "ray"])
def test_a_setting_a_worker_cannot_run_with_is_the_same_line_on_every_sampler(tmp_path: Path, sampler: str) -> None:
    """A ConfigError raised inside a worker's rollout (PEARL's worker finds no ``worker.context_reward``
    key in the environment's step info) is the worker's own one line on every sampler. (Under a worker
    process or a Ray actor it was ``worker 0 (pid ...) raised ConfigError: ...`` and a traceback.)"""
    if sampler == "ray":
        pytest.importorskip("ray")
    proc = train(tmp_path, f"hydra.run.dir={tmp_path / 'run'}", "experiment=pearl_pointnav", "trainer.n_epochs=1",
                 "worker.context_reward=nope", f"sampler={sampler}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert [line for line in proc.stderr.splitlines() if line.startswith("corral: error:")] == [
        "corral: error: worker.context_reward='nope', but the environment's step info has no such key (it has "
        "['distance', 'sparse_reward', 'success']); set worker.context_reward=null to give the encoder the reward"
    ], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_train_py_says_in_one_line_that_the_environment_returned_nan(tmp_path: Path) -> None:
    proc = train(tmp_path, f"hydra.run.dir={tmp_path / 'run'}", *SMALL, "trainer.n_epochs=2", "env=gym",
                 "env.id=corral.testing.faulty_envs:corral/NaNCartPole-v1", "+env.kwargs.fail_at=30")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = proc.stderr.splitlines()[-1]
    assert line.startswith("corral: error: worker 0's environment EnvFactory('corral.testing.faulty_envs:corral/"
                           "NaNCartPole-v1', kwargs={'fail_at': 30}) returned values no algorithm can learn from "
                           "(observations: NaN in "), line
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "failed"


# ------------------------------------------------------------------ an update that diverges
@pytest.mark.parametrize("sampler", ["local", "multiprocessing"])
def test_an_update_that_diverges_stops_the_run_in_one_error_before_sampling_with_it(sampler: str) -> None:
    """Rewards of 1e37 (finite): PPO's returns overflow, its parameters become NaN in the first update,
    and its next minibatch fails in torch (``found invalid values``). The trainer names the divergence,
    on every sampler, and the epoch is not part of the run."""
    from corral import TrainingDivergedError

    message = _failed_ppo_run("HugeRewardCartPole-v1", 0, sampler, TrainingDivergedError)
    assert message.startswith("algo=PPO's update in epoch 0 diverged: the policy's parameters: NaN in "), message
    assert "(the update then raised ValueError on them)" in message, message
    assert "(normalize.reward=true; this batch's rewards reach 1e+37)" in message, message


def test_diverged_values_names_nonfinite_losses_and_parameters() -> None:
    import numpy as np

    from corral.framework.trainer import diverged_values

    class Policy:
        def __init__(self, params: dict[str, np.ndarray]) -> None:
            self.params = params

        def get_param_values(self) -> dict[str, np.ndarray]:
            return self.params

    class Algo:
        policy = Policy({"a": np.zeros(3, np.float32), "steps": np.array([7])})

    assert diverged_values(Algo(), {"loss/policy": 0.5, "ppo/explained_variance": float("nan")}) is None  # type: ignore[arg-type]
    Algo.policy.params["b"] = np.array([np.nan, np.inf, 1.0, np.nan], np.float32)
    assert diverged_values(Algo(), {"loss/value": float("inf"), "loss/policy": 1.0}) == (  # type: ignore[arg-type]
        "loss/value = inf; the policy's parameters: NaN in 2 and inf in 1 of 7 (first in b)")


def test_train_py_says_in_one_line_that_training_diverged(tmp_path: Path) -> None:
    proc = train(tmp_path, f"hydra.run.dir={tmp_path / 'run'}", *SMALL, "trainer.n_epochs=2", "env=gym",
                 "env.id=corral.testing.faulty_envs:corral/HugeRewardCartPole-v1", "+env.kwargs.fail_at=0")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "tensor(" not in proc.stderr, proc.stderr[-3000:]
    line = proc.stderr.splitlines()[-1]
    assert line.startswith("corral: error: algo=ppo's update in epoch 0 diverged: the policy's parameters: NaN in "), line
    assert line.endswith("or clip the gradients, and start the run again"), line
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("TrainingDivergedError: algo=ppo's update")
    progress = tmp_path / "run" / "progress.csv"
    assert not progress.exists() or len(progress.read_text().splitlines()) <= 1  # epoch 0 was not committed


def test_a_csv_row_that_cannot_be_written_names_the_logger_option(tmp_path: Path) -> None:
    """train.py names the logger by its option (``logger=csv``): a directory stands where the csv file goes."""
    run = tmp_path / "run"
    (run / "logs" / "p.csv").mkdir(parents=True)
    proc = train(tmp_path, f"hydra.run.dir={run}", *SMALL, "trainer.n_epochs=2", "trainer.eval_every=0",
                 "logger.csv.filename=logs/p.csv")
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.splitlines()[-1]
    assert line.startswith("corral: error: logger=csv could not write the row of epoch 0 (IsADirectoryError: "), line
    assert line.endswith("the run stopped there; fix that (space, permissions, the path) and start the run again "
                         "(it has no snapshot yet)"), line
    assert not list((run / "logs").glob(".*tmp"))  # the temporary file is gone


def test_hydras_failed_job_line_is_held_back_and_released_on_request() -> None:
    """A sweep's stderr (entry.HeldJobLines): Hydra's failed-job line waits; everything else passes."""
    from corral.framework.entry import HeldJobLines

    out = io.StringIO()
    held = HeldJobLines(out)
    held.write("[job 0] corral: error: no\n")
    held.write("Error executing job with overrides: ['seed=1']\n")
    assert out.getvalue() == "[job 0] corral: error: no\n"
    held.release()  # a job that failed with something other than a corral error: Hydra's line is needed
    assert out.getvalue().splitlines() == ["[job 0] corral: error: no", "Error executing job with overrides: ['seed=1']"]
    assert held.getvalue() == out.getvalue()  # the rest is the real stream's


# ------------------------------------------------------------------------ a full disk, for real
def _train_limited(cwd: Path, limit: int, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *overrides], cwd=cwd, capture_output=True,
                          text=True, timeout=240, preexec_fn=file_size_limit(limit))


def test_a_snapshot_torch_cannot_finish_writing_is_one_line_that_names_the_os_error(tmp_path: Path) -> None:
    """torch.save turns a full disk into ``RuntimeError: [enforce fail at inline_container.cc] unexpected
    pos ...``; the run's line names the operating system's error under it, with no traceback."""
    run = tmp_path / "run"
    proc = _train_limited(tmp_path, 20_000, f"hydra.run.dir={run}", *SMALL, "trainer.n_epochs=2",
                          "trainer.eval_every=0", "policy.hidden_sizes=[64,64]")  # a snapshot of ~50 kB
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "inline_container" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == (
        f"corral: error: could not write the snapshot epoch_000001.pt (OSError: File too large: "
        f"{run / 'snapshots' / 'epoch_000001.pt'}); the run stopped there; fix that (space, permissions, the path) "
        "and start the run again (it has no snapshot yet)")
    assert json.loads((run / "summary.json").read_text())["status"] == "failed"
    assert not list((run / "snapshots").glob(".*tmp"))


def test_a_run_hydra_cannot_write_the_files_of_is_one_line(tmp_path: Path) -> None:
    """A disk too full for Hydra's own record of the run (``.hydra/hydra.yaml``): one line, exit 2."""
    for mode in ([f"hydra.run.dir={tmp_path / 'run'}"], ["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"]):
        proc = _train_limited(tmp_path, 1_000, *mode, *SMALL, "trainer.n_epochs=1")
        option = "hydra.sweep.dir" if "-m" in mode else "hydra.run.dir"
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert proc.stderr.splitlines() == [
            "corral: error: could not write the run's files (OSError: File too large); make room there, or give "
            f"{option}= a directory on another file system, and start again"], proc.stderr[-3000:]


def test_a_completed_run_whose_summary_cannot_be_written_fails_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "summary.json").mkdir(parents=True)  # a directory stands where the summary goes
    proc = train(tmp_path, f"hydra.run.dir={run}", *SMALL, "trainer.n_epochs=1", "trainer.eval_every=0")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert lines[-2].startswith("corral: completed (n_epochs=1 reached) after 1 epoch"), proc.stderr[-3000:]
    assert lines[-1] == (f"corral: error: could not write the run's {run / 'summary.json'} (IsADirectoryError: Is a "
                         "directory); `corral results` and `corral plot` will list the run as unfinished")
    assert "Traceback" not in proc.stderr


class _ClosingLogger(_FullDiskLogger):
    """A logger that cannot write what it holds when it closes (a full disk), or closes fine."""

    def __init__(self, fails: bool) -> None:
        super().__init__()
        self.fails, self.closed = fails, 0

    def close(self) -> None:
        self.closed += 1
        if self.fails:
            raise OSError(28, "No space left on device")


def test_shutdown_closes_every_logger_and_then_says_which_could_not_write(tmp_path: Path) -> None:
    from corral import OutputError, Trainer, TrainerConfig

    failing, fine = _ClosingLogger(fails=True), _ClosingLogger(fails=False)
    trainer = Trainer(TrainerConfig(progress=False), loggers=[failing, fine])  # type: ignore[list-item]
    with pytest.raises(OutputError, match=r"^logger=_ClosingLogger could not write its last rows as it closed "
                                          r"\(OSError: No space left on device\)"):
        trainer.shutdown()
    assert (failing.closed, fine.closed) == (1, 1)  # the second logger was closed all the same
    trainer.shutdown(quiet=True)  # stopping on an error of its own: that error is the one reported
    assert (failing.closed, fine.closed) == (2, 2)
    with pytest.raises(ValueError, match="^the run's own error$"), trainer:  # leaving a `with` on an error: quiet
        raise ValueError("the run's own error")
    assert (failing.closed, fine.closed) == (3, 3)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_run_log_that_cannot_be_written_is_one_warning_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Not logging's ``--- Logging error ---`` block with a traceback for every record."""
    import logging

    from corral.framework.logger import RunLogFileHandler

    handler = RunLogFileHandler("/dev/full", mode="a")
    log = logging.getLogger("corral.test_full_run_log")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("one")
        log.warning("two")
    finally:
        log.removeHandler(handler)
        handler.close()
    assert capsys.readouterr().err == ("corral: warning: cannot write /dev/full (OSError: No space left on device); "
                                       "the run's log records are missing from it while that lasts\n")


def test_tensorboards_writer_thread_keeps_its_write_error_off_the_console() -> None:
    """The error reaches the trainer through the writer's flush; the thread's own report is dropped.
    Another thread's error still reaches the hook that was there before."""
    import threading

    from corral.plugins.loggers.tensorboard import WRITER_THREAD, quiet_writer_thread_errors

    def fail() -> None:
        raise OSError(28, "No space left on device")

    previous = threading.excepthook
    reported: list[str] = []
    threading.excepthook = lambda args: reported.append(args.thread.name)  # what Python would print
    try:
        quiet_writer_thread_errors()
        quiet_writer_thread_errors()  # once per process
        writer_class = type(WRITER_THREAD, (threading.Thread,), {})
        for thread in (writer_class(target=fail, name="writer"), threading.Thread(target=fail, name="other")):
            thread.start()
            thread.join(10)
    finally:
        threading.excepthook = previous
    assert reported == ["other"]


def test_a_branch_whose_history_cannot_be_copied_is_one_line_and_leaves_nothing(finished, tmp_path: Path) -> None:
    """``trainer.resume=<run> hydra.run.dir=<new>`` copies the run's history first; a disk without room
    for it (a snapshot of ~140 kB past a 60 kB limit) stops there in one line, and the branch's
    directory is gone, so the same command runs again once there is room."""
    run, _ = finished
    branch = tmp_path / "branch"
    proc = _train_limited(tmp_path, 60_000, f"trainer.resume={run}", f"hydra.run.dir={branch}", "trainer.n_epochs=3")
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.splitlines()[-1]
    assert line.startswith(f"corral: error: could not copy the history of {run} into the branch {branch} (File too "
                           f"large: {branch}"), line
    assert line.endswith("); make room there, or give the branch a directory on another file system "
                         "(hydra.run.dir=...), and start it again"), line
    assert "Traceback" not in proc.stderr and not branch.exists()
    proc = train(tmp_path, f"trainer.resume={run}", f"hydra.run.dir={branch}", "trainer.n_epochs=3")
    assert proc.returncode == 0, proc.stderr[-3000:]


class _ResumeFailsLogger(_FullDiskLogger):
    """A logger whose file cannot be rewritten for a resume (a full disk)."""

    def resume(self, epoch: int, env_steps: int) -> None:
        raise OSError(28, "No space left on device", "/runs/x/progress.csv")


def test_a_logger_that_cannot_rewrite_its_rows_for_a_resume_is_one_line(tmp_path: Path) -> None:
    from corral import VPG, EnvFactory, EnvSpec, LocalSampler, MLPPolicy, OutputError, Trainer, TrainerConfig

    env = EnvFactory("CartPole-v1")
    spec = EnvSpec.from_env(env())

    def trainer(loggers: list[Any]) -> Trainer:
        policy = MLPPolicy(spec, hidden_sizes=(8,))
        sampler = LocalSampler(agents=policy, envs=env, max_episode_length=500, n_workers=1, seed=1)
        made = Trainer(TrainerConfig(eval_every=0, progress=False, snapshot_every=1, max_env_steps=None),
                       snapshot_dir=tmp_path, loggers=loggers)
        made.setup(VPG(spec, policy, sampler, seed=1), env)
        return made

    with trainer([]) as first:
        first.train(n_epochs=1, batch_size=100)
    with trainer([_ResumeFailsLogger()]) as second, pytest.raises(OutputError) as stopped:
        second.restore(tmp_path)
    assert str(stopped.value) == (
        "logger=_ResumeFailsLogger could not rewrite its rows for the resume (OSError: No space left on device: "
        "/runs/x/progress.csv); the run stopped there; fix that (space, permissions, the path) and continue from its "
        f"last snapshot (epochs 0-0) with trainer.resume={tmp_path}")
