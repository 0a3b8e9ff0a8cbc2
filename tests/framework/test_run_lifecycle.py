"""What a run tells, and what a resume may change: the closing line, the limit that ended the run,
``corral.log``, ``summary.json``'s mode, the progress bar, multirun prefixes, and library limits."""

from __future__ import annotations

import io
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_resuming_a_finished_run_says_how_to_train_longer(finished, tmp_path: Path) -> None:
    run, _ = finished
    summary = (run / "summary.json").read_text()
    proc = train(tmp_path, f"trainer.resume={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"corral: the run in {run} already finished: n_epochs=2 reached at epoch 2" in proc.stderr
    assert f"trainer.resume={run} trainer.n_epochs=4" in proc.stderr
    assert (run / "summary.json").read_text() == summary


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
