"""corral.results.table: grouping by swept keys, mean ± std across seeds."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from corral.results.summary import RunRecord
from corral.results.table import group_runs, mean_std, results_table, swept_keys


def record(overrides: list[str], status: str = "completed", **summary: float) -> RunRecord:
    return RunRecord(path=Path("/runs") / "_".join(overrides), summary={"status": status, **summary},
                     overrides=overrides)


def test_mean_std() -> None:
    assert mean_std([]) is None
    assert mean_std([3.0]) == (3.0, 0.0)
    m, s = mean_std([1.0, 2.0, 3.0])
    assert m == 2.0 and s == pytest.approx(1.0)  # sample standard deviation


def test_groups_by_swept_keys_without_seed() -> None:
    runs = [record([f"seed={s}", f"algo={a}", "trainer.max_env_steps=1000"], final_eval_return=r)
            for a, base in (("vpg", 10.0), ("ppo", 100.0)) for s, r in zip((1, 2, 3), (base, base + 2, base + 4))]
    assert swept_keys(runs) == ["algo"]  # the constant override is not a swept key; seed is ignored
    keys, groups = group_runs(runs)
    assert keys == ["algo"] and [g.label for g in groups] == ["algo=vpg", "algo=ppo"]
    table = results_table(runs)
    rows = {r["key"]["algo"]: r for r in table.rows}
    assert rows["vpg"]["n"] == 3 and rows["vpg"]["final_eval_return"] == (12.0, 2.0)
    assert rows["ppo"]["final_eval_return"] == (102.0, 2.0)
    text = table.format()
    assert "| algo |" in text.splitlines()[0]
    assert "12.0 ± 2.0" in text and "102.0 ± 2.0" in text


def test_missing_values_and_unfinished_runs() -> None:
    runs = [record(["seed=1", "x=a"], final_eval_return=1.0), record(["seed=2", "x=a"], final_eval_return=None),
            record(["seed=3", "x=a"], status="interrupted", final_eval_return=50.0),
            record(["seed=1", "x=b"], final_eval_return=float("nan"))]
    table = results_table(runs)
    rows = {r["key"]["x"]: r for r in table.rows}
    assert rows["a"]["n"] == 2 and rows["a"]["final_eval_return"] == (1.0, 0.0)
    assert rows["b"]["final_eval_return"] is None
    assert "n/a" in table.format()
    assert any("interrupted" in s for s in table.skipped)
    assert not any(math.isnan(v) for r in table.to_json()["rows"] for v in (r["final_eval_return"] or []))


def test_only_seeds_swept_gives_one_group() -> None:
    runs = [record([f"seed={s}"], env_steps=100.0 * s) for s in (1, 2)]
    table = results_table(runs)
    assert table.keys == [] and len(table.rows) == 1 and table.rows[0]["n"] == 2
    assert table.format().splitlines()[2].startswith("| all runs")


def test_results_of_a_sweep_with_no_completed_run_list_why_and_print_no_empty_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from corral.framework.cli import results_command
    from corral.results.summary import write_summary

    write_summary(tmp_path / "0", {"status": "failed", "error": "EnvironmentValueError: NaN\nmore", "overrides": ["seed=1"]})
    write_summary(tmp_path / "1", {"status": "failed", "error": "ConfigError: no", "overrides": ["seed=2"]})
    write_summary(tmp_path / "2", {"status": "interrupted", "overrides": ["seed=3"]})
    assert results_command([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"skipped: {tmp_path / '0'} (failed: EnvironmentValueError: NaN)",
                                f"skipped: {tmp_path / '1'} (failed: ConfigError: no)",
                                f"skipped: {tmp_path / '2'} (interrupted)"]
    assert err.splitlines() == [f"corral results: error: no completed run under {tmp_path} (2 failed, 1 interrupted; "
                                "listed above)"]


def test_a_broken_summary_is_one_skipped_line_and_the_other_runs_are_tabled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A summary.json cut short or edited into something else leaves out its run, saying why; it does
    not stop the table of the whole sweep."""
    from corral.framework.cli import results_command
    from corral.results.summary import find_runs, write_summary

    write_summary(tmp_path / "0", {"status": "completed", "overrides": ["seed=1"], "env_steps": 100.0})
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "summary.json").write_text('{"status": ')
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "summary.json").write_text("[1]")
    assert [r.status for r in find_runs(tmp_path)] == ["completed", "unreadable", "unreadable"]
    assert results_command([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("| all runs | 1 ")
    assert out[3:] == [f"skipped: {tmp_path / '1'} (unreadable: summary.json cannot be read: Expecting value: line 1 "
                       "column 12 (char 11))",
                       f"skipped: {tmp_path / '2'} (unreadable: summary.json cannot be read: it holds a JSON list, "
                       "not an object)"]


def test_an_ignore_key_no_run_overrides_is_one_warning_line(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``--ignore sed`` (a typo of seed) merged nothing, in silence: the table simply kept one row per
    seed. Both commands now say so; ``--ignore`` keys that runs do override, and the default, say nothing."""
    pytest.importorskip("matplotlib")
    from corral.framework.cli import plot_command, results_command
    from corral.results.summary import write_summary

    for i, (seed, algo) in enumerate([(1, "vpg"), (2, "vpg"), (1, "ppo")]):
        run = tmp_path / str(i)
        write_summary(run, {"status": "completed", "overrides": [f"seed={seed}", f"algo={algo}"], "env_steps": 10.0})
        (run / "progress.csv").write_text("env_steps,train/return_mean\n5,1.0\n10,2.0\n")
    for command, name in ((results_command, "results"), (plot_command, "plot")):
        assert command([str(tmp_path), "--ignore", "sed", "seed"]) == 0
        assert capsys.readouterr().err.splitlines() == [
            f"corral {name}: warning: --ignore sed: no run under {tmp_path} overrides sed, so it merges nothing (the "
            "runs override: seed, algo); check the spelling"]
        for args in ([], ["--ignore", "seed"], ["--ignore", "algo"], ["--ignore"]):
            assert command([str(tmp_path), *args]) == 0
            assert capsys.readouterr().err == "", args
    assert results_command([str(tmp_path), "--ignore", "algo"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("| seed |")  # the other key is the group now


def test_results_of_several_directories_group_their_runs_by_overrides(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``corral results a b``: the runs of both directories in one table, the same overrides in one
    row whichever directory holds them; a run given twice (itself, and inside its sweep) counts once."""
    from corral.framework.cli import main, results_command
    from corral.results.summary import write_summary
    from corral.results.table import results_for_dir

    a, b = tmp_path / "seeds12", tmp_path / "later"
    for i, seed in enumerate((1, 2)):
        write_summary(a / str(i), {"status": "completed", "overrides": ["algo=vpg", f"seed={seed}"],
                                   "job": {"num": i}, "final_eval_return": 10.0 * seed})
    write_summary(b / "0", {"status": "completed", "overrides": ["algo=vpg", "seed=3"], "final_eval_return": 30.0})
    write_summary(b / "1", {"status": "completed", "overrides": ["algo=ppo", "seed=1"], "final_eval_return": 50.0})
    write_summary(b / "2", {"status": "failed", "error": "ConfigError: no", "overrides": ["algo=ppo", "seed=2"]})
    table = results_for_dir([a, b, a / "1"])
    rows = {r["key"]["algo"]: r for r in table.rows}
    assert table.keys == ["algo"] and list(rows) == ["vpg", "ppo"]
    assert rows["vpg"]["n"] == 3 and rows["vpg"]["final_eval_return"] == (20.0, 10.0)
    assert rows["vpg"]["runs"] == [str(a / "0"), str(a / "1"), str(b / "0")]
    assert rows["ppo"]["n"] == 1 and table.skipped == [f"{b / '2'} (failed: ConfigError: no)"]
    assert results_command([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "20.0 ± 10.0" in out and f"skipped: {b / '2'} (failed: ConfigError: no)" in out
    assert main(["results", str(a), str(tmp_path / "nope")]) == 2  # the one that is not there, by name
    assert capsys.readouterr().err == f"corral results: error: {tmp_path / 'nope'} does not exist\n"


def test_a_directory_given_beside_others_that_holds_no_run_is_a_skipped_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``corral results run1 empty``: the empty directory was left out without a word (a typo, a
    sweep not yet copied over); alone, it is still the command's error."""
    from corral.framework.cli import main
    from corral.results.summary import write_summary

    run, empty = tmp_path / "run1", tmp_path / "empty"
    empty.mkdir()
    write_summary(run, {"status": "completed", "overrides": ["seed=1"], "final_eval_return": 10.0})
    assert main(["results", str(run), str(empty)]) == 0
    assert f"skipped: {empty} (no run under it: no summary.json, no job directory)" in capsys.readouterr().out
    assert main(["results", str(empty)]) == 2
    assert "corral results: error: no completed run" in capsys.readouterr().err
