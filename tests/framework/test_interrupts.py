"""Ctrl-C and SIGTERM at many points of a run never lose or repeat an epoch.

Each case starts ``train.py`` through a small driver that sends a real signal to its own process
at a chosen point (while sampling, training, evaluating, logging or snapshotting a chosen epoch),
then resumes the run with plain ``train.py trainer.resume=<dir>`` and compares ``progress.csv``
with an uninterrupted run's (every column but the wall-clock ``time/*`` ones).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "trainer.n_epochs=4",
    "trainer.batch_size=200",
    "trainer.eval_every=2",
    "trainer.eval_episodes=2",
    "trainer.max_env_steps=null",
    "trainer.progress=false",
    "logger=[console,csv,tensorboard]",
    "seed=3",
]
TIMEOUT = 240

#: The driver: patches nothing corral does, only watches it (Trainer.phase, CartPole steps, the CSV
#: logger, save_snapshot) and sends the signal to its own process when the chosen point is reached.
DRIVER = r'''
import os, signal, sys, time

from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from corral.framework import trainer as T
from corral.framework.entry import main
from corral.plugins.loggers import csv as csv_logger

phase, row, nth, signame, times = (os.environ["CORRAL_TEST_INTERRUPT"] + ":1").split(":")[:5]
group = signame.endswith("-group")  # to the whole process group, workers included, as a terminal's Ctrl-C
row, nth, times = int(row), int(nth), int(times)
sig = None if signame == "RAISE" else getattr(signal, signame.replace("-group", ""))  # RAISE: a failure there
now = {"trainer": None, "phase": "idle", "count": 0, "fired": 0}


def fire():
    if now["fired"] < times:
        now["fired"] += 1
        if sig is None:
            raise RuntimeError(f"failed on purpose while {phase} epoch {row}")
        if group:
            os.killpg(os.getpgrp(), sig)
        else:
            os.kill(os.getpid(), sig)


def current_row():
    t = now["trainer"]
    # the counters move on when training ends, so evaluation and the commit belong to epoch - 1
    return t.epoch - (1 if now["phase"] in ("evaluating", "committing") else 0)


def set_phase(self, value):
    self.__dict__["_phase"] = value
    now["trainer"], now["phase"] = self, value
    if value == phase and nth == 0 and current_row() == row:
        fire()


T.Trainer.phase = property(lambda self: self.__dict__.get("_phase", "idle"), set_phase)

step = CartPoleEnv.step


def counting_step(self, action):
    if now["trainer"] is not None and now["phase"] == phase and current_row() == row:
        now["count"] += 1
        if nth <= now["count"] < nth + times:  # a second signal one step later: "press Ctrl-C again"
            fire()
    return step(self, action)


CartPoleEnv.step = counting_step

log = csv_logger.CSVLogger.log


def logging(self, epoch, stats):
    if phase == "logging" and epoch == row:
        fire()
        # CORRAL_TEST_LOG_S: that epoch's row takes that long to write, and a second signal (times 2) arrives in it
        seconds = float(os.environ.get("CORRAL_TEST_LOG_S", "0"))
        if seconds:
            time.sleep(seconds)
            fire()
            time.sleep(0.2)
    return log(self, epoch, stats)


csv_logger.CSVLogger.log = logging

save = T.Trainer.save_snapshot


def snapshotting(self, **kwargs):
    if phase == "snapshotting" and self.epoch - 1 == row:
        fire()
    return save(self, **kwargs)


T.Trainer.save_snapshot = snapshotting

update = T.Trainer._train


def timed_update(self, epoch, episodes):
    # CORRAL_TEST_UPDATE_S: the chosen epoch's update takes that long, and a second signal (times 2)
    # arrives in it; CORRAL_TEST_MARK: a file written when that update has run to its end
    seconds = float(os.environ.get("CORRAL_TEST_UPDATE_S", "0"))
    if phase == "training" and epoch == row and seconds:
        time.sleep(seconds)
        fire()
        time.sleep(0.2)
    out = update(self, epoch, episodes)
    if phase == "training" and epoch == row and os.environ.get("CORRAL_TEST_MARK"):
        open(os.environ["CORRAL_TEST_MARK"], "w").close()
    return out


T.Trainer._train = timed_update
if __name__ == "__main__":  # worker processes (spawn) import this file too
    sys.argv = ["train.py", *sys.argv[1:]]
    main()
'''


def _default_sigint() -> None:
    # A test that sends SIGINT must not inherit an ignored SIGINT (e.g. from `cmd &` in a script).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def train(run_dir: Path, *overrides: str, interrupt: str | None = None, driver: Path | None = None,
          env_vars: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``train.py`` (through the driver when ``interrupt`` is given) into ``run_dir``."""
    env = {**os.environ, **(env_vars or {})}
    if interrupt is None:
        cmd = [sys.executable, str(ROOT / "train.py")]
    else:
        assert driver is not None
        cmd = [sys.executable, str(driver)]
        env["CORRAL_TEST_INTERRUPT"] = interrupt
    cmd += [f"hydra.run.dir={run_dir}", *SMALL, *overrides]
    # its own session: a signal to its process group reaches it and its workers, never pytest
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          preexec_fn=_default_sigint, start_new_session=True)


def rows(run_dir: Path) -> list[dict[str, str]]:
    """progress.csv rows without the wall-clock columns."""
    with open(run_dir / "progress.csv", newline="") as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


def csv_curve(run_dir: Path, key: str = "train/return_mean") -> list[tuple[int, float]]:
    """``(env_steps, value)`` of ``key`` in progress.csv."""
    return [(int(float(r["env_steps"])), float(r[key])) for r in rows(run_dir)]


def tensorboard_curve(run_dir: Path, key: str = "train/return_mean") -> list[tuple[int, float]]:
    """``(step, value)`` of ``key`` as TensorBoard shows it (events hidden by a resume's purge_step left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, pytest.approx(e.value, rel=1e-6)) for e in events.Scalars(key)]  # type: ignore[misc]


def _filled(row: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in row.items() if v != ""}


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("driver") / "interrupting_train.py"
    path.write_text(DRIVER)
    return path


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    """The uninterrupted run's rows."""
    run = tmp_path_factory.mktemp("full") / "run"
    proc = train(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = rows(run)
    assert [float(r["epoch"]) for r in got] == [0.0, 1.0, 2.0, 3.0]
    return got


CASES = [
    # (phase, epoch row, n-th env step in that phase (0: on entering it), signal[:times], overrides, what it says)
    pytest.param("sampling", 2, 60, "SIGINT", (), ["while sampling epoch 2", "epochs 0-1 are saved"], id="sampling"),
    pytest.param("training", 1, 0, "SIGINT", (), ["while training epoch 1", "epoch 0 is saved"], id="training"),
    pytest.param("evaluating", 1, 40, "SIGINT", (), ["while evaluating epoch 1", "epoch 0 is saved"], id="evaluating"),
    pytest.param("logging", 1, 0, "SIGINT", (), ["after epoch 1", "epochs 0-1 are saved"], id="logging"),
    pytest.param("snapshotting", 2, 0, "SIGINT", (), ["after epoch 2", "epochs 0-2 are saved"], id="snapshotting"),
    pytest.param("evaluating", 3, 40, "SIGTERM", (), ["interrupted by SIGTERM while evaluating epoch 3"],
                 id="sigterm-evaluating-last-epoch"),
    # snapshot_every > 1: a first Ctrl-C finishes the epoch and saves it; a second one stops at once,
    # and the resume runs the epochs after the last snapshot again
    pytest.param("sampling", 1, 60, "SIGINT", ("trainer.snapshot_every=3",),
                 ["Ctrl-C: finishing epoch 1 to save it", "after epoch 1", "epochs 0-1 are saved"],
                 id="ctrl-c-finishes-an-unsaved-epoch"),
    pytest.param("sampling", 3, 60, "SIGINT:2", ("trainer.snapshot_every=2",),
                 ["press Ctrl-C again to stop now", "while sampling epoch 3",
                  "the last snapshot epochs 0-1 (trainer.snapshot_every=2)", "runs epoch 2 again"],
                 id="ctrl-c-twice-between-snapshots"),
    # worker processes: Ctrl-C reaches the whole process group (same seed and one worker: the local run's episodes)
    pytest.param("sampling", 2, 0, "SIGINT-group", ("sampler=multiprocessing", "sampler.n_workers=1"),
                 ["while sampling epoch 2", "epochs 0-1 are saved"], id="multiprocessing-ctrl-c-sampling"),
    pytest.param("evaluating", 1, 0, "SIGTERM", ("sampler=multiprocessing", "sampler.n_workers=1",
                                                 "trainer.snapshot_every=3"),
                 ["SIGTERM: finishing epoch 1", "interrupted by SIGTERM after epoch 1", "epochs 0-1 are saved"],
                 id="multiprocessing-sigterm-evaluating"),
    # SIGTERM twice at once (a scheduler's to every process and a launcher's copy): one stop, the epoch
    # finishes and is saved (the copy stopped it at once: "while sampling epoch 1", the epoch dropped)
    pytest.param("sampling", 1, 60, "SIGTERM:2", ("trainer.snapshot_every=3",),
                 ["SIGTERM: finishing epoch 1 to save it", "interrupted by SIGTERM after epoch 1", "epochs 0-1 are saved"],
                 id="sigterm-twice-at-once-is-one"),
]


@pytest.mark.parametrize(("phase", "row", "nth", "signame", "extra", "says"), CASES)
def test_interrupt_then_resume_logs_every_epoch_once(tmp_path: Path, driver: Path, expected: list[dict[str, str]],
                                                     phase: str, row: int, nth: int, signame: str,
                                                     extra: tuple[str, ...], says: list[str]) -> None:
    run = tmp_path / "run"
    proc = train(run, *extra, interrupt=f"{phase}:{row}:{nth}:{signame}", driver=driver)
    assert proc.returncode == (143 if signame.startswith("SIGTERM") else 130), proc.stderr[-3000:]
    assert "corral: interrupted" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "trainer.resume=" in proc.stderr
    for words in says:
        assert words in proc.stderr, proc.stderr[-3000:]
    before = rows(run)
    # what was logged is a prefix of the uninterrupted run (whose later epochs add the eval columns)
    assert [_filled(r) for r in before] == [_filled(r) for r in expected[: len(before)]]
    latest = (run / "snapshots" / "latest").read_text().strip()
    assert int(latest.split("_")[1].split(".")[0]) <= len(before)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["epochs"] == len(before)

    resumed = train(run, *extra, f"trainer.resume={run}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert rows(run) == expected  # every epoch exactly once, the same values as without the interrupt
    assert tensorboard_curve(run) == csv_curve(run)  # TensorBoard too: one curve, what was re-run shown once
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs"] == 4
    assert len(summary["resumes"]) == 1


@pytest.mark.parametrize(("update_s", "signals", "extra", "notice", "update_ends", "says"), [
    # a short update: the signal is acted on when it ends, with no notice
    pytest.param(0, 1, (), None, True, "while training epoch 1", id="short-update"),
    # a long one says at once (after HOLD_NOTICE_AFTER_S) that it waits, and still ends
    pytest.param(1.5, 1, (), "corral: Ctrl-C: stopping once epoch 1's update ends (an update is never left half "
                 "done); press Ctrl-C again to stop now", True, "while training epoch 1", id="long-update"),
    # a second Ctrl-C stops it at once: the epoch is dropped either way
    pytest.param(1.5, 2, (), "press Ctrl-C again to stop now", False, "while training epoch 1", id="second-ctrl-c"),
    # between snapshots the first Ctrl-C's notice is the finishing one, printed once
    pytest.param(1.5, 1, ("trainer.snapshot_every=3",), "corral: Ctrl-C: finishing epoch 1 to save it", True,
                 "after epoch 1", id="finishing"),
])
def test_a_signal_in_a_long_update_is_acknowledged_and_a_second_stops_it(
        tmp_path: Path, driver: Path, expected: list[dict[str, str]], update_s: float, signals: int,
        extra: tuple[str, ...], notice: str | None, update_ends: bool, says: str) -> None:
    """Ctrl-C waits for an update to end (never half done), but says so when that takes a while,
    and a second Ctrl-C does not wait."""
    run, mark = tmp_path / "run", tmp_path / "updated"
    proc = train(run, *extra, interrupt=f"training:1:0:SIGINT:{signals}", driver=driver,
                 env_vars={"CORRAL_TEST_UPDATE_S": str(update_s), "CORRAL_TEST_MARK": str(mark)})
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and says in proc.stderr, proc.stderr[-3000:]
    notices = [line for line in proc.stderr.splitlines() if line.startswith("corral: Ctrl-C: ")]
    assert notices == ([] if notice is None else [next(n for n in notices if notice in n)]), proc.stderr[-3000:]
    assert mark.exists() == update_ends
    before = rows(run)
    assert [_filled(r) for r in before] == [_filled(r) for r in expected[: len(before)]]
    assert len(before) == (2 if extra else 1)


@pytest.mark.parametrize(("gap_s", "update_ends"), [
    # the copy 0.3 s after the first (a scheduler's and a launcher's): held as the first is, the update ends
    pytest.param(0.3, True, id="copy-within-the-window"),
    # sent again 2 s later (past SAME_SIGTERM_WINDOW_S): the second signal, which stops the update at once
    pytest.param(2.0, False, id="second-after-the-window"),
])
def test_a_sigterm_repeated_within_the_window_is_one_and_a_later_one_stops_at_once(
        tmp_path: Path, driver: Path, expected: list[dict[str, str]], gap_s: float, update_ends: bool) -> None:
    """SIGTERM as training epoch 1 starts, and again ``gap_s`` seconds later during its update: within
    SAME_SIGTERM_WINDOW_S it is the same stop (the update still ends; before, it was cut as by a second
    signal); later, it is a second one and cuts the update. Either way the epoch is dropped and epoch 0 kept."""
    run, mark = tmp_path / "run", tmp_path / "updated"
    proc = train(run, interrupt="training:1:0:SIGTERM:2", driver=driver,
                 env_vars={"CORRAL_TEST_UPDATE_S": str(gap_s), "CORRAL_TEST_MARK": str(mark)})
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "interrupted by SIGTERM while training epoch 1" in proc.stderr, \
        proc.stderr[-3000:]
    assert mark.exists() == update_ends, proc.stderr[-3000:]
    assert [_filled(r) for r in rows(run)] == [_filled(r) for r in expected[:1]]
    from corral.framework.interrupts import SAME_SIGTERM_WINDOW_S

    assert gap_s < SAME_SIGTERM_WINDOW_S - 1.0 if update_ends else gap_s > SAME_SIGTERM_WINDOW_S + 0.4


@pytest.mark.parametrize("signals", [1, 2])
def test_a_signal_in_a_long_commit_is_acknowledged_and_the_epoch_still_saved(tmp_path: Path, driver: Path,
                                                                           expected: list[dict[str, str]],
                                                                           signals: int) -> None:
    """Logging and saving an epoch is never cut: a signal held there for more than a second is
    acknowledged (once), a second one is held too, and the epoch is logged, saved and resumable."""
    run = tmp_path / "run"
    proc = train(run, interrupt=f"logging:1:0:SIGINT:{signals}", driver=driver, env_vars={"CORRAL_TEST_LOG_S": "1.5"})
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "after epoch 1" in proc.stderr, proc.stderr[-3000:]
    notices = [line for line in proc.stderr.splitlines() if line.startswith("corral: Ctrl-C: ")]
    assert notices == ["corral: Ctrl-C: stopping once epoch 1 is logged and saved"], proc.stderr[-3000:]
    assert rows(run) == expected[:2]
    assert (run / "snapshots" / "latest").read_text().strip() == "epoch_000002.pt"


@pytest.mark.parametrize("phase", ["evaluating", "training"])
def test_a_run_that_fails_inside_an_epoch_counts_only_its_committed_epochs(tmp_path: Path, driver: Path,
                                                                          phase: str) -> None:
    """A failure while evaluating (or training) epoch 1 leaves epoch 0 as the run: summary.json and
    the closing line say 1 epoch and epoch 0's steps (they said 2 epochs and both epochs' steps, and
    the summary had no final return while the closing line had one)."""
    run = tmp_path / "run"
    proc = train(run, interrupt=f"{phase}:1:0:RAISE", driver=driver)
    assert proc.returncode != 0 and f"failed on purpose while {phase} epoch 1" in proc.stderr, proc.stderr[-3000:]
    logged = rows(run)
    assert len(logged) == 1
    summary = json.loads((run / "summary.json").read_text())
    steps = int(float(logged[0]["env_steps"]))
    assert (summary["status"], summary["epochs"], summary["env_steps"]) == ("failed", 1, steps)
    assert summary["final_train_return"] == pytest.approx(float(logged[0]["train/return_mean"]))
    closing = next(line for line in proc.stderr.splitlines() if line.startswith("corral: failed after"))
    assert closing.startswith(f"corral: failed after 1 epoch | final eval n/a | best eval n/a | {steps:,} env steps")
    # nothing is lost, and the line says how to go on (it said only that the run failed)
    assert closing.endswith(f" | {run} | epoch 0 is saved: trainer.resume={run} continues from it"), closing
    assert (run / "snapshots" / "latest").read_text().strip() == "epoch_000001.pt"


def test_interrupt_before_the_first_epoch_ends_says_there_is_nothing_to_resume(tmp_path: Path, driver: Path) -> None:
    run = tmp_path / "run"
    proc = train(run, interrupt="sampling:0:60:SIGINT", driver=driver)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "no epoch finished, so there is nothing to resume" in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not (run / "snapshots").exists()


def test_two_interrupts_and_two_resumes_make_one_run(tmp_path: Path, driver: Path,
                                                     expected: list[dict[str, str]]) -> None:
    run = tmp_path / "run"
    assert train(run, interrupt="evaluating:1:40:SIGINT", driver=driver).returncode == 130
    second = train(run, f"trainer.resume={run}", interrupt="sampling:2:60:SIGTERM", driver=driver)
    assert second.returncode == 143, second.stderr[-3000:]
    assert train(run, f"trainer.resume={run}").returncode == 0
    assert rows(run) == expected
    assert len(json.loads((run / "summary.json").read_text())["resumes"]) == 2


def _without_epochs() -> list[str]:
    return [o for o in SMALL if not o.startswith("trainer.n_epochs=")]


def test_resume_under_another_sampler_continues_the_same_episodes(tmp_path: Path, expected: list[dict[str, str]]
                                                                  ) -> None:
    """A run started with the local sampler and resumed in place under the multiprocessing sampler
    (same worker, same number of workers) logs exactly the uninterrupted local run's rows."""
    run = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}", *_without_epochs()]
    first = subprocess.run([*cmd, "trainer.n_epochs=2"], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = subprocess.run([sys.executable, str(ROOT / "train.py"), f"trainer.resume={run}", "trainer.n_epochs=4",
                              "sampler=multiprocessing"], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert rows(run) == expected
    summary = json.loads((run / "summary.json").read_text())
    assert summary["config"]["sampler"]["name"] == "multiprocessing" and summary["config"]["sampler"]["n_workers"] == 1
    # The run's own, for corral results: it now trains 4 epochs; the sampler is how it ran (same episodes).
    assert summary["overrides"] == [*_without_epochs(), "trainer.n_epochs=4"]


def test_resume_from_an_older_snapshot_file_branches_into_a_new_directory(tmp_path: Path,
                                                                          expected: list[dict[str, str]]) -> None:
    run = tmp_path / "run"
    assert train(run).returncode == 0
    original = (run / "progress.csv").read_text()
    older = run / "snapshots" / "epoch_000002.pt"
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), f"trainer.resume={older}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"a branch of {run}" in proc.stderr
    (branch,) = [p.parent for p in (tmp_path / "outputs").rglob("summary.json")]
    assert rows(branch) == expected  # the original's epochs 0-1, then 2-3 run again from the snapshot
    assert (run / "progress.csv").read_text() == original
    assert json.loads((branch / "summary.json").read_text())["resumes"][0]["branch_of"] == str(run)


def test_interrupt_in_the_final_evaluation_leaves_a_completed_run(tmp_path: Path, driver: Path) -> None:
    """Three epochs with eval_every=2: one more evaluation runs after training (for the run's
    objective); Ctrl-C there loses nothing, and the run counts as completed."""
    run = tmp_path / "run"
    proc = train(run, "trainer.n_epochs=3", interrupt="idle:3:10:SIGINT", driver=driver)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "interrupted in the final evaluation; training had finished (n_epochs=3 reached)" in proc.stderr
    assert "Traceback" not in proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs"] == 3
    assert [float(r["epoch"]) for r in rows(run)] == [0.0, 1.0, 2.0]


def _sigint_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_defer_interrupts_holds_one_signal_and_a_second_stops_where_allowed() -> None:
    """In process: the first Ctrl-C is acted on when the block ends; with ``second_stops`` a second
    one interrupts inside it; without, both wait."""
    from corral.framework.interrupts import defer_interrupts

    reached = []
    # Python's own Ctrl-C handler, whatever this suite inherited (a suite started with `cmd &` ignores SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with defer_interrupts():
                _sigint_self()
                _sigint_self()
                reached.append("end of block")
        assert reached == ["end of block"]
        with pytest.raises(KeyboardInterrupt):
            with defer_interrupts(second_stops=True):
                _sigint_self()
                reached.append("after the first")
                _sigint_self()
                reached.append("after the second")
        assert reached == ["end of block", "after the first"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_defer_interrupts_leaves_an_ignored_sigint_ignored() -> None:
    """A run started in the background of a script ignores SIGINT; holding signals must not turn
    that into a KeyboardInterrupt (nor a notice)."""
    from corral.framework.interrupts import defer_interrupts

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with defer_interrupts(lambda signum: "held", second_stops=True):
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            _sigint_self()
            _sigint_self()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_the_environment_swallows_still_stops_the_run_after_sampling(tmp_path: Path) -> None:
    """An environment whose step swallows KeyboardInterrupt (a bare ``except:``) gets nearly every
    Ctrl-C of this run; the trainer still stops once the sampling returns, with the usual line and
    exit status, and the epoch that was sampling is not committed."""
    import time

    from corral.testing.processes import started_session, wait_for_path

    run = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}", "trainer.progress=false",
           "env.id=corral.testing.faulty_envs:corral/SwallowingCartPole-v1", "+env.kwargs.fail_at=1",
           "+env.kwargs.hang_s=0.01", "trainer.batch_size=100", "trainer.n_epochs=100000", "trainer.max_env_steps=null",
           "trainer.eval_every=0", "logger=[csv]"]
    with started_session(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        wait_for_path(proc, run / "snapshots" / "latest", timeout=120)
        time.sleep(0.3)  # into a later epoch's sampling: ~99 % of its time is in the swallowing sleep
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    (line,) = [x for x in err.splitlines() if x.startswith("corral: interrupted while") or x.startswith("corral: interrupted after epoch")]
    assert "resume with trainer.resume=" in line, err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert len(rows(run)) == summary["epochs"], (rows(run), summary)


def test_catch_stop_signals_keeps_a_swallowed_signal_and_restores_the_handlers() -> None:
    """In process: the latch holds a Ctrl-C whose KeyboardInterrupt was caught, ``check`` raises it,
    and leaving the block puts Python's handlers back; an ignored SIGINT stays ignored."""
    from corral.framework.interrupts import Terminated, catch_stop_signals

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with catch_stop_signals() as latch:
            latch.check()  # nothing yet
            try:
                _sigint_self()
            except KeyboardInterrupt:
                pass  # swallowed, as a bare except: does
            assert latch.signum == signal.SIGINT
            with pytest.raises(KeyboardInterrupt):
                latch.check()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(Terminated):
            with catch_stop_signals() as latch:
                os.kill(os.getpid(), signal.SIGTERM)
        assert latch.signum == signal.SIGTERM
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with catch_stop_signals() as latch:
            _sigint_self()
        assert latch.signum is None and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("sampler", ["multiprocessing", "ray"])
def test_a_second_ctrl_c_right_after_the_first_still_shuts_the_workers_down(tmp_path: Path, sampler: str) -> None:
    """Ctrl-C pressed twice (a second SIGINT to the group 0.3 s after the first, while the run stops):
    the workers are still shut down, summary.json is written, exit status 130, and the lines say
    where training stopped. (Under Ray, the second one cut the shutdown short: exit status 1 at
    times, Ray's agents left running, and a second line "interrupted before training started".)"""
    if sampler == "ray":
        pytest.importorskip("ray")
    import time

    from corral.testing.processes import cmdline, descendants, started_session, wait_for_path, wait_gone

    run = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "train.py"), f"sampler={sampler}", "sampler.n_workers=2", "trainer.n_epochs=100000",
           "trainer.max_env_steps=null", "trainer.batch_size=400", "trainer.eval_every=0", "trainer.progress=false",
           "logger=[csv]", f"hydra.run.dir={run}"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with started_session(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        wait_for_path(proc, run / "snapshots" / "latest", timeout=180)
        time.sleep(0.5)
        spawned = descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:  # already gone: nothing to hold
            pass
        _, err = proc.communicate(timeout=90)
    # 130, or -2 (a shell's 130 too) when the second one lands after the run finished stopping, as the
    # interpreter exits with Python's handlers gone: the record is written either way (checked below).
    assert proc.returncode in (130, -signal.SIGINT), err[-3000:]
    assert "before training started" not in err and "Traceback" not in err, err[-3000:]
    stopped = [x for x in err.splitlines() if re.match(r"corral: interrupted (while \w+ epoch|after epoch) \d+ \(", x)]
    assert len(stopped) == 1, err[-3000:]
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"
    left = wait_gone(spawned, timeout=30)
    assert not left, [cmdline(p) for p in left]


def test_hold_while_stopping_drops_one_signal_with_a_notice_and_a_second_interrupts(capsys) -> None:
    """In process: inside the block a first Ctrl-C prints the notice and is dropped, a second raises."""
    from corral.framework.interrupts import hold_while_stopping, stopping_notice

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    reached = []
    try:
        with hold_while_stopping(stopping_notice):
            _sigint_self()
            reached.append("after the first")
        assert reached == ["after the first"]
        assert capsys.readouterr().err == ("corral: Ctrl-C: already stopping, and finishing that first (workers shut down, "
                                           "files written; a few seconds); press Ctrl-C again to leave at once\n")
        with pytest.raises(KeyboardInterrupt):
            with hold_while_stopping(stopping_notice):
                _sigint_self()
                _sigint_self()
                reached.append("after the second")
        assert reached == ["after the first"] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def _sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture
def fresh_sigterms(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SIGTERM acted on yet in this process (an earlier test's would make this one's first a repeat)."""
    from corral.framework import interrupts

    monkeypatch.setattr(interrupts, "_sigterm_taken_at", [], raising=False)


def test_a_sigterm_repeated_at_once_is_the_same_request_and_a_later_one_a_second(
        fresh_sigterms: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """In process: in finish_epoch_on_interrupt a SIGTERM and its copy at once are one request (one
    notice, no interrupt); a SIGTERM past SAME_SIGTERM_WINDOW_S is a second one and interrupts; Ctrl-C
    twice at once is still two. Each block puts the handlers back."""
    from corral.framework import interrupts
    from corral.framework.interrupts import Terminated, finish_epoch_on_interrupt

    previous = {sig: signal.signal(sig, h) for sig, h in ((signal.SIGINT, signal.default_int_handler),
                                                          (signal.SIGTERM, signal.SIG_DFL))}
    try:
        try:
            with finish_epoch_on_interrupt(lambda signum: f"finishing on {signum}") as request:
                _sigterm_self()
                _sigterm_self()
        except KeyboardInterrupt as exc:  # a failure, not pytest's own Ctrl-C
            pytest.fail(f"the copy interrupted the block as a second signal does: {exc!r}")
        assert request.signum == signal.SIGTERM
        assert capsys.readouterr().err == f"finishing on {int(signal.SIGTERM)}\n"
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

        monkeypatch.setattr(interrupts, "SAME_SIGTERM_WINDOW_S", 0.2)
        time.sleep(0.3)  # past the window of the SIGTERM above
        reached = []
        with pytest.raises(Terminated):
            with finish_epoch_on_interrupt(lambda signum: "finishing"):
                _sigterm_self()
                reached.append("after the first")
                time.sleep(0.3)
                _sigterm_self()
                reached.append("after the second")
        assert reached == ["after the first"]

        with pytest.raises(KeyboardInterrupt) as raised:
            with finish_epoch_on_interrupt(lambda signum: "finishing"):
                _sigint_self()
                _sigint_self()
        assert not isinstance(raised.value, Terminated)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def test_a_held_sigterm_and_its_copy_reach_the_outer_handler_once(fresh_sigterms: None,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """In process: a SIGTERM and its copy while defer_interrupts(second_stops=True) holds them are one
    signal, handed on when the block ends to catch_stop_signals, which raises Terminated for it (the
    hand-on is not taken for a copy of itself); the copy arriving while stopping says nothing."""
    from corral.framework.interrupts import Terminated, catch_stop_signals, defer_interrupts, hold_while_stopping

    reached = []
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(Terminated):
            with catch_stop_signals() as latch:
                with defer_interrupts(second_stops=True):
                    _sigterm_self()
                    _sigterm_self()
                    reached.append("end of block")
                reached.append("after the block")
        assert reached == ["end of block"] and latch.signum == signal.SIGTERM
        with hold_while_stopping(lambda signum: "already stopping"):
            _sigterm_self()  # a copy of the one above: dropped, no notice
            reached.append("stopping")
        assert reached == ["end of block", "stopping"] and capsys.readouterr().err == ""
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_sigterm_notices_say_a_second_one_counts_only_past_the_window(
        fresh_sigterms: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """In process: the notice of a first SIGTERM says to send it again more than SAME_SIGTERM_WINDOW_S seconds
    later (it said "send SIGTERM again", and one sent again at once is dropped as the same stop), and that is
    what happens: a SIGTERM at once is dropped, one past the window leaves. Ctrl-C's says "press Ctrl-C again"."""
    from corral.framework import interrupts
    from corral.framework.interrupts import Terminated, hold_while_stopping, send_again, stopping_notice

    monkeypatch.setattr(interrupts, "SAME_SIGTERM_WINDOW_S", 0.5)
    assert send_again(signal.SIGTERM) == "send SIGTERM again (more than 0.5 s later)"
    assert send_again(signal.SIGINT) == "press Ctrl-C again"
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    reached = []
    try:
        with pytest.raises(Terminated):
            with hold_while_stopping(stopping_notice):
                _sigterm_self()
                _sigterm_self()  # again at once: the same stop, dropped
                reached.append("after the repeat")
                time.sleep(0.7)
                _sigterm_self()  # again, more than the window later: leaves at once
                reached.append("after the second")
        assert reached == ["after the repeat"]
        assert capsys.readouterr().err == ("corral: SIGTERM: already stopping, and finishing that first (workers shut "
                                           "down, files written; a few seconds); send SIGTERM again (more than 0.5 s "
                                           "later) to leave at once\n")
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_trainers_sigterm_notices_say_when_a_second_one_counts(tmp_path: Path, driver: Path) -> None:
    """End to end: SIGTERM in a long update is acknowledged with the notice that says how to stop at once."""
    run, mark = tmp_path / "run", tmp_path / "updated"
    proc = train(run, interrupt="training:1:0:SIGTERM:1", driver=driver,
                 env_vars={"CORRAL_TEST_UPDATE_S": "1.5", "CORRAL_TEST_MARK": str(mark)})
    assert proc.returncode == 143, proc.stderr[-3000:]
    notices = [line for line in proc.stderr.splitlines() if line.startswith("corral: SIGTERM: ")]
    assert notices == ["corral: SIGTERM: stopping once epoch 1's update ends (an update is never left half done); "
                       "send SIGTERM again (more than 1.5 s later) to stop now"], proc.stderr[-3000:]
