"""How ``train.py`` ends a sweep: a job's corral error is one line; anything else gets Hydra's report.

The sweeps themselves run end to end in ``tests/test_train_cli.py``; these tests give
:func:`corral.framework.entry._sweep_or_run` an entry point that raises, to reach the cases a real
sweep reaches only through a bug (an exception that is not a corral error)."""

from __future__ import annotations

import os

import pytest

from corral.framework import entry
from corral.framework.entry import SweepJobFailed


def _raising(exc: BaseException):  # type: ignore[no-untyped-def]
    def main() -> None:
        assert os.environ.get("HYDRA_FULL_ERROR") == "1"  # Hydra is asked to raise, not to report
        raise exc
    return main


def test_a_failed_sweep_job_ends_the_sweep_with_its_one_line(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(entry, "_hydra_main", _raising(SweepJobFailed("corral: job 0 (seed=1) failed: why")))
    with pytest.raises(SystemExit) as stopped:
        entry._sweep_or_run(multirun=True)
    assert stopped.value.code == 1
    assert capsys.readouterr().err == "corral: job 0 (seed=1) failed: why\n"  # no HYDRA_FULL_ERROR hint
    assert "HYDRA_FULL_ERROR" not in os.environ


def test_a_sweep_stopped_by_another_error_gets_hydras_report(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr("hydra._internal.utils.is_under_debugger", lambda: False)  # a coverage tracer looks like one
    monkeypatch.setattr(entry, "_hydra_main", _raising(ValueError("a bug")))
    with pytest.raises(SystemExit) as stopped:
        entry._sweep_or_run(multirun=True)
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("ValueError: a bug\n"), err  # as Hydra prints it
    assert "HYDRA_FULL_ERROR" not in os.environ


def test_hydra_full_error_set_by_the_user_is_left_to_hydra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    monkeypatch.setattr(entry, "_hydra_main", _raising(SweepJobFailed("corral: job 0 failed")))
    with pytest.raises(SweepJobFailed):
        entry._sweep_or_run(multirun=True)
    assert os.environ["HYDRA_FULL_ERROR"] == "1"


@pytest.mark.parametrize(("given", "ordered"), [
    (["a=1", "-m", "b=1,2"], ["a=1", "b=1,2", "-m"]),
    (["seed=1", "--cfg", "job", "algo=vpg"], ["seed=1", "algo=vpg", "--cfg", "job"]),
    (["--info", "seed=1"], ["seed=1", "--info"]),  # --info alone: the override is not its value
    (["--info", "defaults", "seed=1"], ["seed=1", "--info", "defaults"]),
    (["-cn", "other", "x=1", "--package", "trainer"], ["x=1", "-cn", "other", "--package", "trainer"]),
])
def test_hydra_flags_go_after_the_overrides_with_their_values(given: list[str], ordered: list[str]) -> None:
    assert entry.flags_last(given) == ordered


def test_a_run_whose_files_cannot_be_written_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A full disk under a library's own error (as torch.save gives it) is found and said in one line
    (without Hydra's line for a failed job before it)."""
    import errno

    def torch_like() -> None:
        import sys

        sys.stderr.write("Error executing job with overrides: ['seed=1']\n")  # Hydra's, for a job that raised
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 35136 vs 35088") from None

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(entry, "_hydra_main", lambda: torch_like())
    with pytest.raises(SystemExit) as stopped:
        entry._sweep_or_run(multirun=False)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "corral: error: could not write the run's files (OSError: No space left on device); make room there, or give "
        "hydra.run.dir= a directory on another file system, and start again\n")


def test_a_run_stopped_by_a_bug_still_gets_hydras_report(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr("hydra._internal.utils.is_under_debugger", lambda: False)
    monkeypatch.setattr(entry, "_hydra_main", _raising(PermissionError(13, "a bug's own file")))
    with pytest.raises(SystemExit) as stopped:
        entry._sweep_or_run(multirun=False)
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.endswith("PermissionError: [Errno 13] a bug's own file\n"), err
    assert "HYDRA_FULL_ERROR" not in os.environ


def test_a_bugs_report_starts_at_the_job_as_hydras_own_report_does(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Hydra's compact report drops its own frames down to ``run_job``, looking at the first ten only;
    a job's error re-raised through Hydra's launch has more above it, and is cut there first."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr("hydra._internal.utils.is_under_debugger", lambda: False)

    def the_jobs_own_code() -> None:
        raise ValueError("a bug")

    def run_job() -> None:  # Hydra's frame that calls the job
        the_jobs_own_code()

    def launch_frame(depth: int) -> None:  # Hydra's launch, deeper than ten frames
        if depth:
            launch_frame(depth - 1)
        else:
            run_job()

    monkeypatch.setattr(entry, "_hydra_main", lambda: launch_frame(12))
    with pytest.raises(SystemExit) as stopped:
        entry._sweep_or_run(multirun=False)
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert "the_jobs_own_code" in err and "launch_frame" not in err and "reraise" not in err, err
    assert err.startswith("Traceback") and "ValueError: a bug\n" in err
