"""Trainer: outputs, snapshots, bit-for-bit resume after SIGKILL, Ctrl-C, evaluation."""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "trainer.batch_size=400",
    "trainer.eval_every=2",
    "trainer.eval_episodes=2",
    "trainer.max_env_steps=null",
    "trainer.progress=false",
    "worker=vec",
    "worker.n_envs=4",
    "seed=3",
]


def small(*changes: str) -> list[str]:
    """SMALL with ``changes`` in place of its own values of the same keys, each key given once (a key
    given twice is a warning line of its own)."""
    changed = {change.split("=", 1)[0]: change for change in changes}
    return [changed.pop(o.split("=", 1)[0], o) for o in SMALL] + list(changed.values())


def train(run_dir: Path, *overrides: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``python train.py`` as a user would, in its own run directory."""
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def read_rows(path: Path) -> list[dict[str, str]]:
    """progress.csv rows without the wall-clock columns."""
    with open(path) as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


def test_run_writes_csv_tensorboard_snapshots_and_summary(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = train(run, *SMALL, "trainer.n_epochs=3", "trainer.keep_snapshots=2")
    assert proc.returncode == 0, proc.stderr
    rows = read_rows(run / "progress.csv")
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]  # epoch is an int in stats
    for key in ("train/return_mean", "train/return_min", "train/return_max", "train/episode_length",
                "env_steps", "loss/policy", "loss/value"):
        assert rows[-1][key] != "", key
    assert rows[1]["eval/return_mean"] != "" and rows[0]["eval/return_mean"] == ""
    assert list((run / "tb").glob("events.out.tfevents.*"))
    snaps = sorted(p.name for p in (run / "snapshots").glob("epoch_*.pt"))
    assert snaps == ["epoch_000002.pt", "epoch_000003.pt"]  # keep_snapshots=2 pruned epoch 1
    assert (run / "snapshots" / "latest").read_text().strip() == "epoch_000003.pt"
    assert not list((run / "snapshots").glob(".*tmp"))
    assert (run / "summary.json").is_file()
    assert "epoch    2" in proc.stdout  # console logger


def test_resume_after_sigkill_continues_bit_for_bit(tmp_path: Path) -> None:
    n_epochs = "trainer.n_epochs=7"
    full = tmp_path / "full"
    assert train(full, *SMALL, n_epochs).returncode == 0
    expected = read_rows(full / "progress.csv")

    killed = tmp_path / "killed"
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={killed}", *SMALL, n_epochs]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        latest = killed / "snapshots" / "latest"
        # `latest` is updated after the snapshot file is renamed into place: wait for the pointer.
        while not (latest.exists() and latest.read_text().strip() == "epoch_000002.pt"):
            assert proc.poll() is None, "training ended before its second snapshot"
            assert time.monotonic() < deadline, "no second snapshot within 180 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    # Resumed into another directory: a branch that starts with the killed run's rows up to its
    # snapshot (a row logged after it is dropped and logged again), the original left as it was.
    killed_rows = read_rows(killed / "progress.csv")
    resumed = tmp_path / "resumed"
    out = train(resumed, f"trainer.resume={killed}")
    assert out.returncode == 0, out.stderr
    assert "resumed from" in out.stderr and "a branch of" in out.stderr
    assert read_rows(resumed / "progress.csv") == expected, "the branch differs from the uninterrupted run"
    assert read_rows(killed / "progress.csv") == killed_rows

    # Resumed in place (no hydra.run.dir): the killed run itself becomes the uninterrupted one.
    cmd = [sys.executable, str(ROOT / "train.py"), f"trainer.resume={killed}"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert read_rows(killed / "progress.csv") == expected
    assert list(tmp_path.glob("outputs")) == [], "an in-place resume writes no new run directory"
    assert list((killed / ".hydra").glob("resume-*/overrides.yaml")), "Hydra's record of the resume"


def default_signals() -> None:
    """In the child: SIGINT and SIGTERM as a terminal would deliver them, even when the test run
    itself ignores SIGINT (started with ``cmd &`` from a script)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def signal_after_first_snapshot(run: Path, sig: int, *overrides: str) -> tuple[subprocess.Popen, str, set[int]]:
    """Start ``train.py`` into ``run``, wait (at most 180 s) for its first snapshot, send ``sig``;
    return the finished process, its stderr and the pids of its child processes at that moment."""
    from corral.testing import descendants, wait_for_path

    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}", *SMALL, "trainer.n_epochs=1000", *overrides]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)
    try:
        wait_for_path(proc, run / "snapshots" / "latest", timeout=180)
        children = descendants(proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return proc, err, children


def test_ctrl_c_writes_snapshot_and_exits_with_a_clear_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc, err, _ = signal_after_first_snapshot(run, signal.SIGINT)
    assert proc.returncode == 130
    assert "corral: interrupted" in err and "trainer.resume=" in err
    assert "Traceback" not in err
    latest = (run / "snapshots" / "latest").read_text().strip()
    assert (run / "snapshots" / latest).is_file()
    resumed = train(tmp_path / "resumed", f"trainer.resume={run}", "trainer.n_epochs=3")
    assert resumed.returncode == 0, resumed.stderr


def test_sigterm_takes_the_ctrl_c_path_and_leaves_no_worker_behind(tmp_path: Path) -> None:
    """``kill`` (or a scheduler's preemption) during training: snapshot, summary, workers gone,
    exit code 143, and the run resumes."""
    import json

    from corral.testing import wait_gone

    run = tmp_path / "run"
    proc, err, workers = signal_after_first_snapshot(run, signal.SIGTERM, "sampler=multiprocessing",
                                                     "sampler.n_workers=2")
    assert workers, "the multiprocessing sampler's workers should have been running"
    assert proc.returncode == 143, err[-2000:]
    assert "corral: interrupted by SIGTERM" in err and "trainer.resume=" in err
    assert "Traceback" not in err
    assert not wait_gone(workers, timeout=15), "worker processes outlived the run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    latest = (run / "snapshots" / "latest").read_text().strip()
    assert (run / "snapshots" / latest).is_file()
    resumed = train(tmp_path / "resumed", f"trainer.resume={run}", "trainer.n_epochs=3")
    assert resumed.returncode == 0, resumed.stderr


def test_resume_from_a_directory_without_snapshots_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "nothing").mkdir()
    out = train(tmp_path / "run", f"trainer.resume={tmp_path / 'nothing'}")
    assert out.returncode != 0
    assert "no snapshot found" in out.stderr
    assert "Traceback" not in out.stderr
    missing = train(tmp_path / "run2", f"trainer.resume={tmp_path / 'nowhere'}")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines()[-1] == (
        f"corral: error: trainer.resume={tmp_path / 'nowhere'}: {tmp_path / 'nowhere'} does not exist; give the run's "
        "directory (the one with snapshots/) or a snapshot file")
    assert not (tmp_path / "run2").exists()


@pytest.mark.parametrize("seed", [1])
def test_evaluation_is_deterministic(seed: int) -> None:
    from corral import EnvFactory, EnvSpec, MLPPolicy
    from corral.framework.evaluation import evaluate

    env = EnvFactory("CartPole-v1")
    policy = MLPPolicy(EnvSpec.from_env(env()))
    a = evaluate(policy, env, n_episodes=3, seed=seed, max_episode_length=500)
    b = evaluate(policy, env, n_episodes=3, seed=seed, max_episode_length=500)
    assert a == b


def test_episode_stats_count_whole_episodes_across_fragments() -> None:
    """A fragment that ends an episode counts with the whole episode's return and length when the
    worker records what came before it, and is left out when it does not."""
    import numpy as np

    from corral.framework.batch import EpisodeBatch, StepType
    from corral.framework.trainer import episode_stats

    F, M, T, O = StepType.FIRST, StepType.MID, StepType.TERMINAL, StepType.TIMEOUT
    arrays = dict(observations=np.zeros((6, 1)), actions=np.zeros(6), rewards=np.ones(6),
                  step_types=[M, M, T, F, O, F], lengths=[3, 2, 1], last_observations=np.zeros((3, 1)),
                  allow_fragments=True)
    with_prior = episode_stats(EpisodeBatch(**arrays, episode_infos={
        "prior_length": np.array([10, 0, 0]), "prior_return": np.array([7.0, 0.0, 0.0])}))
    assert with_prior["train/n_episodes"] == 2.0
    assert with_prior["train/return_max"] == 10.0 and with_prior["train/episode_length"] == (13 + 2) / 2
    without = episode_stats(EpisodeBatch(**arrays))
    assert without["train/n_episodes"] == 1.0  # the MID-started fragment is left out (the last one is unfinished)
    assert without["train/return_max"] == 2.0



def test_a_directory_of_runs_is_named_with_its_runs_when_resumed_or_evaluated(tmp_path: Path) -> None:
    """``trainer.resume=<sweep dir>`` (or ``corral eval <sweep dir>``) said only "no snapshot found":
    the line now names the runs inside, one of which was meant."""
    from corral.framework.errors import ConfigError, SnapshotError
    from corral.framework.eval_run import evaluate_run
    from corral.framework.trainer import find_snapshot

    for job in ("0", "1", "2", "10", "11"):
        (tmp_path / "sweep" / job / "snapshots").mkdir(parents=True)
    (tmp_path / "sweep" / "multirun.yaml").write_text("")
    sweep = tmp_path / "sweep"
    inside = f"; it holds runs: {sweep / '0'}, {sweep / '1'}, {sweep / '2'}, ... (give one of them)"
    with pytest.raises(SnapshotError) as raised:
        find_snapshot(sweep)
    assert str(raised.value) == (f"no snapshot found in {sweep} (expected {sweep}/snapshots/epoch_*.pt){inside}; "
                                 "check trainer.resume")
    with pytest.raises(ConfigError) as refused:
        evaluate_run(sweep, output="")
    assert str(refused.value) == (f"no snapshot found in {sweep}: give corral eval a run directory (the one with "
                                  f"snapshots/) or a snapshot file{inside}")
    with pytest.raises(SnapshotError) as empty:
        find_snapshot(tmp_path / "nothing")
    assert "holds runs" not in str(empty.value)


def warning_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """The ``corral: warning:`` lines a run printed."""
    return [line for line in proc.stderr.splitlines() if line.startswith("corral: warning:")]


def test_an_epoch_far_larger_than_the_batch_size_is_said_once(tmp_path: Path) -> None:
    """trainer.batch_size is a minimum; whole episodes of 999 steps on 4 environments make every epoch
    ten times that, and the run says so once instead of training on ten times the data in silence."""
    proc = train(tmp_path / "long", *small("env=mountaincar_continuous", "trainer.n_epochs=2"))
    assert proc.returncode == 0, proc.stderr
    assert warning_lines(proc) == [
        "corral: warning: epoch 0 collected 3,996 environment steps for trainer.batch_size=400 (10.0x): the workers "
        "return whole episodes (this epoch 4, up to 999 steps long) and an epoch ends when the last one it started "
        "does; raise trainer.batch_size, or run fewer environments at once (worker.n_envs, sampler.n_workers)"
    ], proc.stderr
    short = train(tmp_path / "short", *small("trainer.n_epochs=2"))  # CartPole: ~1x
    assert short.returncode == 0 and "corral: warning" not in short.stderr, short.stderr
    # fragments: 1 worker x 1 environment x 300 steps per call, for a batch of 100
    fragments = train(tmp_path / "fragments", *small("trainer.n_epochs=2", "trainer.batch_size=100", "worker=fragment",
                                                  "worker.n_envs=1", "worker.timesteps_per_call=300"))
    assert warning_lines(fragments) == [
        "corral: warning: epoch 0 collected 300 environment steps for trainer.batch_size=100 (3.0x): each worker "
        "returns a fragment of a fixed size per call (worker.timesteps_per_call steps per environment), more than its "
        "share of the batch; raise trainer.batch_size, or lower worker.timesteps_per_call (or worker.n_envs, "
        "sampler.n_workers)"], fragments.stderr


def test_a_step_limit_below_one_epoch_is_said_before_training(tmp_path: Path) -> None:
    """``trainer.max_env_steps=300`` with a batch of 400: the first epoch alone passes the limit, and the
    run stopped at 400-odd steps without a word about why it trained on more than was asked."""
    proc = train(tmp_path / "run", *small("trainer.max_env_steps=300", "trainer.n_epochs=null"))
    assert proc.returncode == 0, proc.stderr
    assert warning_lines(proc) == [
        "corral: warning: trainer.max_env_steps=300 is below trainer.batch_size=400, the steps of one epoch at least: "
        "the run stops after its first epoch, with 400 steps or more; lower trainer.batch_size to stop nearer 300"
    ], proc.stderr
    assert "completed (max_env_steps=300 reached) after 1 epoch" in proc.stderr
    resumed = train(tmp_path / "run", f"trainer.resume={tmp_path / 'run'}", "trainer.max_env_steps=600")
    assert resumed.returncode == 0 and warning_lines(resumed) == [], resumed.stderr  # not a fresh run
