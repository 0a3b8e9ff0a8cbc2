"""Runs inside runs: a branch written into the run it continued, a run written into a sweep
directory; a tracker's copy of ``summary.json`` under a run is not a run. ``corral plot``'s
printed finals are the runs' own, as ``corral results`` shows them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from corral.framework.cli import main
from corral.framework.entry import resumed_overrides
from corral.results.summary import find_runs, find_runs_under, write_summary


def make_run(d: Path, overrides: list[str], rows: list[tuple[float, float]], num: int | None = None,
             final: float | None = None, **summary: object) -> Path:
    """A run directory as ``train.py`` leaves it: ``summary.json``, ``.hydra/``, ``progress.csv``, ``corral.log``."""
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (d / "corral.log").write_text("corral: completed\n")
    (d / "progress.csv").write_text("epoch,env_steps,train/return_mean\n"
                                    + "".join(f"{i},{x},{y}\n" for i, (x, y) in enumerate(rows)))
    write_summary(d, {"status": "completed", "overrides": overrides, "job": {"num": num},
                      "final_train_return": rows[-1][1] if final is None else final,
                      "env_steps": rows[-1][0], **summary})
    return d


def branch(origin: Path, d: Path, n_epochs: int, rows: list[tuple[float, float]]) -> Path:
    """``train.py trainer.resume=<origin> trainer.n_epochs=<n> hydra.run.dir=<d>``: the branch's summary
    holds the origin's overrides with the resume's changes, and names the resume's in ``resumes``."""
    overrides = [f"trainer.resume={origin}", f"trainer.n_epochs={n_epochs}"]
    first = [str(o) for o in (origin / ".hydra" / "overrides.yaml").read_text().replace("- ", "").split()]
    run = make_run(d, resumed_overrides(first, overrides), rows,
                   resumes=[{"overrides": overrides, "in_place": False, "branch_of": str(origin)}])
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return run


def table_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(["results", *argv]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_branch_written_into_the_run_it_continued_is_a_run_of_its_own(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nest = make_run(tmp_path / "nest", ["trainer.n_epochs=4"], [(100.0, 10.0), (200.0, 20.0)])
    longer = branch(nest, nest / "longer", 8, [(100.0, 10.0), (200.0, 20.0), (300.0, 30.0), (400.0, 40.0)])
    assert [r.path for r in find_runs(nest)] == [nest, longer]
    assert [r.path for r in find_runs(longer)] == [longer]
    # Grouped by what each was trained with: the branch's trainer.n_epochs=8, not its origin's 4 (the
    # two are not seeds of one configuration, to be averaged as n=2).
    assert find_runs(nest)[1].override_dict() == {"trainer.n_epochs": "8"}
    lines = table_lines(capsys, str(nest))
    assert lines[0].split("|")[1:3] == [" trainer.n_epochs ", " n "]
    assert [line.split("|")[1:5] for line in lines[2:]] == [
        [" 4                ", " 1 ", " n/a               ", " n/a              "],
        [" 8                ", " 1 ", " n/a               ", " n/a              "]]
    assert [line.split("|")[5].strip() for line in lines[2:]] == ["20.0", "40.0"]


def test_the_jobs_of_a_sweep_directory_a_run_was_written_into_are_found(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "sweep"
    for num in (0, 1, 2):
        make_run(sweep / str(num), [f"seed={num}"], [(100.0, 10.0 + num)], num=num)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    make_run(sweep, ["trainer.n_epochs=2"], [(50.0, 5.0)])  # train.py hydra.run.dir=<the sweep directory>
    assert [r.path for r in find_runs(sweep)] == [sweep / "0", sweep / "1", sweep / "2", sweep]
    lines = table_lines(capsys, str(sweep))
    assert [line.split("|")[1:3] for line in lines[2:]] == [[" -                ", " 3 "], [" 2                ", " 1 "]]
    assert not any(line.startswith("skipped:") for line in lines)


def test_a_summary_copy_under_a_run_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The MLflow logger uploads summary.json (and snapshots) into its store, which is under the run
    with hydra.job.chdir=true: that copy is not a second run, under the run or under its sweep."""
    sweep = tmp_path / "sweep"
    runs = [make_run(sweep / str(num), [f"seed={num}"], [(100.0, 10.0 + num)], num=num) for num in (0, 1)]
    for run in runs:
        artifacts = run / "mlruns" / "0" / "abc123" / "artifacts"
        (artifacts / "snapshots").mkdir(parents=True)
        (artifacts / "snapshots" / "epoch_000001.pt").write_bytes(b"")
        shutil.copy(run / "summary.json", artifacts / "summary.json")
        (artifacts.parent / "meta.yaml").write_text("run_id: abc123\n")
    assert [r.path for r in find_runs(runs[0])] == [runs[0]]
    assert [r.path for r in find_runs(sweep)] == runs
    found = find_runs_under([sweep, runs[0]])
    assert [r.path for r in found.runs] == runs and found.unfinished == []
    assert table_lines(capsys, str(sweep))[2].split("|")[1:3] == [" all runs ", " 2 "]
    # Copied with their summaries alone (rsync of summary.json files), a sweep's runs are still runs.
    bare = tmp_path / "bare"
    for num in (0, 1):
        write_summary(bare / str(num), {"status": "completed", "overrides": [f"seed={num}"], "job": {"num": num}})
    assert [r.path for r in find_runs(bare)] == [bare / "0", bare / "1"]


def test_plot_prints_each_runs_final_value_as_results_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The line ends where the shortest run ends (its value interpolated there); the printed final is
    the mean ± std of the runs' own final values, the numbers `corral results` shows."""
    pytest.importorskip("matplotlib")
    sweep = tmp_path / "sweep"
    make_run(sweep / "0", ["seed=1"], [(100.0, 10.0), (200.0, 20.0)], num=0)
    make_run(sweep / "1", ["seed=2"], [(100.0, 10.0), (200.0, 20.0), (400.0, 60.0)], num=1)
    make_run(sweep / "2", ["seed=3"], [(100.0, 12.0), (300.0, 30.0)], num=2)
    table = table_lines(capsys, str(sweep))
    assert table[2].split("|")[5].strip() == "36.7 ± 20.8"  # final train return: mean_std(20, 60, 30)
    assert main(["plot", str(sweep)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "all runs: 3 run(s), final train/return_mean 36.7 ± 20.8"  # not 20.3 ± 0.6, at step 200
    # A metric the summary does not hold: each run's last value in its progress.csv.
    for num, extra in ((0, 1.0), (1, 5.0), (2, 3.0)):
        csv = sweep / str(num) / "progress.csv"
        lines = csv.read_text().splitlines()
        csv.write_text("\n".join([lines[0] + ",loss"] + [f"{line},{extra + i}" for i, line in enumerate(lines[1:])])
                       + "\n")
    assert main(["plot", str(sweep), "--metric", "loss"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "all runs: 3 run(s), final loss 4.3 ± 2.5"  # 2, 7, 4
