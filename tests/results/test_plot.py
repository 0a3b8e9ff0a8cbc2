"""corral.results.plot: mean and spread across seeds, one line per group, written as a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corral.results.plot import choose_metric, plot_dir
from corral.results.summary import read_run, write_summary

pytest.importorskip("matplotlib")


def make_run(root: Path, num: int, overrides: list[str], rows: list[tuple[float, float, str]]) -> None:
    d = root / str(num)
    write_summary(d, {"status": "completed", "overrides": overrides, "job": {"num": num}})
    lines = ["epoch,env_steps,train/return_mean,eval/return_mean"]
    lines += [f"{i},{x},{y},{e}" for i, (x, y, e) in enumerate(rows)]
    (d / "progress.csv").write_text("\n".join(lines) + "\n")


def test_two_groups_of_three_seeds(tmp_path: Path) -> None:
    num = 0
    for algo, offset in (("vpg", 0.0), ("ppo", 100.0)):
        for seed in (1, 2, 3):
            # Slightly different step counts per seed (whole episodes), as in real runs.
            rows = [(500.0 * k + seed, offset + 10.0 * k + seed, "") for k in range(1, 5)]
            make_run(tmp_path, num, [f"seed={seed}", f"algo={algo}"], rows)
            num += 1
    result = plot_dir(tmp_path)
    assert result.path == tmp_path / "learning_curves.png"
    assert result.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.metric == "train/return_mean"  # no run evaluated twice
    assert [c.label for c in result.curves] == ["algo=vpg", "algo=ppo"]
    assert [c.n_runs for c in result.curves] == [3, 3]
    assert result.n_lines == 2
    vpg = result.curves[0]
    # Interpolated onto the steps every run covers: seeds' values 10k+1, 10k+2, 10k+3 (+ interpolation).
    assert vpg.x[0] >= 503.0 and vpg.x[-1] <= 2001.0
    assert np.all(vpg.std > 0)
    assert result.curves[1].mean[-1] > vpg.mean[-1] + 50


def test_single_run_with_eval_metric_and_custom_output(tmp_path: Path) -> None:
    make_run(tmp_path, 0, ["seed=1"], [(100.0, 1.0, "5"), (200.0, 2.0, ""), (300.0, 3.0, "9")])
    assert choose_metric([read_run(tmp_path / "0")]) == "eval/return_mean"
    out = tmp_path / "plots" / "x.png"
    result = plot_dir(tmp_path / "0", out=out, metric="eval/return_mean")
    assert out.is_file() and result.n_lines == 1
    c = result.curves[0]
    assert c.n_runs == 1 and list(c.x) == [100.0, 300.0] and list(c.mean) == [5.0, 9.0] and list(c.std) == [0.0, 0.0]


def test_the_runs_left_out_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A failed, interrupted, unfinished or unreadable run is not drawn, and ``corral plot`` says so
    (a missing line is never silent)."""
    from corral.framework.cli import plot_command

    make_run(tmp_path, 0, ["seed=1"], [(100.0, 1.0, ""), (200.0, 2.0, "")])
    write_summary(tmp_path / "1", {"status": "failed", "error": "EnvironmentFailure: boom", "overrides": ["seed=2"]})
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / "summary.json").write_text("{")
    (tmp_path / "3" / ".hydra").mkdir(parents=True)
    write_summary(tmp_path / "4", {"status": "completed", "overrides": ["seed=5"], "job": {"num": 4}})  # logger=[console]: no csv
    make_run(tmp_path, 5, ["seed=6"], [(100.0, 1.0, "")])
    (tmp_path / "5" / "progress.csv").write_text("epoch,env_steps\n0,100\n")  # a csv without the metric
    result = plot_dir(tmp_path)
    assert result.n_lines == 1 and result.curves[0].n_runs == 1
    assert result.skipped == [f"{tmp_path / '1'} (failed: EnvironmentFailure: boom)",
                              f"{tmp_path / '2'} (unreadable: summary.json cannot be read: Expecting property name "
                              "enclosed in double quotes: line 1 column 2 (char 1))",
                              f"{tmp_path / '3'} (no summary.json: unfinished)",
                              f"{tmp_path / '4'} (no progress.csv)",
                              f"{tmp_path / '5'} (no train/return_mean in its progress.csv)"]
    assert plot_command([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("skipped: ")] == [f"skipped: {s}" for s in result.skipped]


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        plot_dir(tmp_path)
    sweep = tmp_path / "sweep"  # nothing completed: the error counts what there is, as corral results does
    write_summary(sweep / "0", {"status": "failed", "error": "ConfigError: no"})
    (sweep / "1").mkdir()
    (sweep / "1" / "summary.json").write_text("{")
    (sweep / "2" / ".hydra").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as info:
        plot_dir(sweep)
    assert str(info.value) == (f"no completed run (a directory with summary.json) under {sweep} (1 failed, 1 unreadable, "
                               f"1 unfinished; `corral results {sweep}` lists them)")
    make_run(tmp_path, 0, ["seed=1"], [(100.0, 1.0, "")])
    with pytest.raises(ValueError) as info:
        plot_dir(tmp_path, metric="no_such_column")
    assert str(info.value) == (f"no run under {tmp_path} has 'no_such_column' in its progress.csv; the runs' columns are "
                               "train/return_mean, eval/return_mean: give one with --metric")
    with pytest.raises(ValueError) as info:  # a typo: the nearest column first
        plot_dir(tmp_path, metric="eval/retrun_mean")
    assert str(info.value).startswith(f"no run under {tmp_path} has 'eval/retrun_mean' in its progress.csv (did you mean "
                                      "eval/return_mean?); the runs' columns are")
    (tmp_path / "0" / "progress.csv").unlink()
    with pytest.raises(ValueError) as info:
        plot_dir(tmp_path, metric="eval/return_mean")
    assert str(info.value).endswith("in its progress.csv (no run has a progress.csv with columns: is the csv logger on?)")


def test_the_output_is_written_where_the_line_says(tmp_path: Path) -> None:
    """``-o DIR`` writes ``DIR/learning_curves.png``; ``-o NAME`` without a suffix writes ``NAME.png``
    (what matplotlib would write, while the line named NAME); a directory that cannot be made is a
    ValueError (one ``corral plot: error:`` line) naming why, before anything is written."""
    runs = tmp_path / "runs"
    make_run(runs, 0, ["seed=1"], [(100.0, 1.0, ""), (200.0, 2.0, "")])
    (tmp_path / "figures").mkdir()
    assert plot_dir(runs, out=tmp_path / "figures").path == tmp_path / "figures" / "learning_curves.png"
    assert plot_dir(runs, out=f"{tmp_path / 'new'}/").path == tmp_path / "new" / "learning_curves.png"
    assert plot_dir(runs, out=tmp_path / "curve").path == tmp_path / "curve.png"
    for path in (tmp_path / "figures" / "learning_curves.png", tmp_path / "new" / "learning_curves.png",
                 tmp_path / "curve.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "curve").exists()
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError) as refused:
        plot_dir(runs, out=tmp_path / "a_file" / "p.png")
    assert str(refused.value) == (f"cannot write {tmp_path / 'a_file' / 'p.png'}: {tmp_path / 'a_file'} is a file, not "
                                  "a directory; give -o a file in a directory you can write to")


def test_a_file_type_matplotlib_cannot_write_is_one_line_before_anything_is_written(tmp_path: Path) -> None:
    """``-o curves.txt`` reached matplotlib's ``Format 'txt' is not supported (...)``, which did not
    say it was ``-o``; a suffix in capitals is matplotlib's too."""
    runs = tmp_path / "runs"
    make_run(runs, 0, ["seed=1"], [(100.0, 1.0, ""), (200.0, 2.0, "")])
    with pytest.raises(ValueError) as refused:
        plot_dir(runs, out=tmp_path / "curves.txt")
    assert str(refused.value).startswith(f"-o {tmp_path / 'curves.txt'}: matplotlib writes no .txt files; give -o a "
                                         "name ending in .png, .svg or .pdf (it also writes .avif, .eps, ")
    assert not (tmp_path / "curves.txt").exists()
    assert plot_dir(runs, out=tmp_path / "curves.SVG").path.read_text().lstrip().startswith("<?xml")


def test_several_directories_are_plotted_together_into_the_image_given(tmp_path: Path) -> None:
    """``corral plot a b -o cmp.png``: one line per group over both directories' runs; without -o
    none of them is the image's place, and nothing is read or written."""
    rows = [(100.0, 1.0, ""), (200.0, 2.0, "")]
    make_run(tmp_path / "a", 0, ["algo=vpg", "seed=1"], rows)
    make_run(tmp_path / "b", 0, ["algo=vpg", "seed=2"], rows)
    make_run(tmp_path / "b", 1, ["algo=ppo", "seed=1"], rows)
    result = plot_dir([tmp_path / "a", tmp_path / "b"], out=tmp_path / "cmp.png")
    assert result.path == tmp_path / "cmp.png" and result.path.is_file()
    assert [(c.label, c.n_runs) for c in result.curves] == [("algo=vpg", 2), ("algo=ppo", 1)]
    with pytest.raises(ValueError, match=r"^2 directories are plotted together, so none of them is the plot's "
                                         r"place; give -o OUT.png$"):
        plot_dir([tmp_path / "a", tmp_path / "b"])
    assert not (tmp_path / "a" / "learning_curves.png").exists()


def _drawn_curves(fig: Any) -> list[tuple[float, ...]]:
    """Every curve on the figure's axes, as its y values: lines and the segments of line collections."""
    from matplotlib.collections import LineCollection

    ax = fig.axes[0]
    curves = [tuple(float(y) for y in line.get_ydata()) for line in ax.get_lines()]
    for coll in ax.collections:
        if isinstance(coll, LineCollection):
            curves += [tuple(float(y) for y in seg[:, 1]) for seg in coll.get_segments()]
    return curves


def test_a_sweep_of_many_groups_keeps_its_legend_on_the_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str], saved_figures: list[Any]) -> None:
    """60 groups: the legend named all 60 and ran off the 7x4 image (a sweep of 2,000 groups took
    14 s, nearly all of it laying out the legend). It names the first 10, in ten colours, and one
    ``+50 more (gray)`` entry; every group is still drawn (the 50 in gray); the legend lies inside
    the saved image; and one ``legend:`` line says so and how to narrow the plot."""
    import warnings

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_rgba
    from matplotlib.image import imread

    from corral.framework.cli import plot_command

    sweep = tmp_path / "sweep"
    for i in range(60):  # algo a/b x 30 learning rates; the last group's run logged one row (a point, no line)
        rows = [(100.0 * k, 1000.0 * i + k, "") for k in range(1, 2 if i == 59 else 4)]
        make_run(sweep, i, [f"algo={'ab'[i % 2]}", f"algo.lr={i // 2}", "seed=1"], rows)
    saved = saved_figures
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Tight layout not applied": the layout gave up
        result = plot_dir(sweep)
    fig = saved[-1]
    legend = fig.axes[0].get_legend()
    labels = [f"algo={'ab'[i % 2]} algo.lr={i // 2} (n=1)" for i in range(60)]
    assert [t.get_text() for t in legend.get_texts()] == labels[:10] + ["+50 more (gray)"]
    named = [to_rgba(h.get_color())[:3] for h in legend.legend_handles[:10]]
    assert len(set(named)) == 10  # a colour names one group
    assert all(len(set(c)) > 1 or c == (0, 0, 0) for c in named)  # none is gray, as the others are
    # every group is drawn: its mean is on the axes (named or gray)
    assert sorted(_drawn_curves(fig)) == sorted(tuple(c.mean.tolist()) for c in result.curves)
    assert result.n_lines == 60 and result.named == 10
    # the legend lies inside the image that was written (closed, the figure's canvas is a bare one again)
    box = legend.get_window_extent(FigureCanvasAgg(fig).get_renderer())
    height, width = imread(result.path).shape[:2]
    assert (width, height) == tuple(round(v) for v in fig.get_size_inches() * 100)
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, (box, width, height)

    assert plot_command([str(sweep)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("legend: ")] == [
        "legend: the legend names the first 10 of 60 lines (listed above in that order); the other 50 are drawn in "
        "gray, without their std band. To see others: --legend 20 names up to 20; --ignore seed algo.lr merges the "
        "values of algo.lr into one line (2 line(s); swept: algo, algo.lr); or --only algo.lr=0 algo.lr=1 ... keeps "
        "the runs with those values of algo.lr"]


def test_legend_names_as_many_groups_as_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str], saved_figures: list[Any]) -> None:
    """``--legend 20``: twenty groups named in twenty colours, beside the axes and inside the image;
    a legend that names every group prints no ``legend:`` line; ``--legend`` outside 1..20 is one
    error line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_rgba

    from corral.framework.cli import main

    sweep = tmp_path / "sweep"
    for i in range(25):
        make_run(sweep, i, [f"algo.lr={i}", "seed=1"], [(100.0, float(i), ""), (200.0, i + 1.0, "")])
    saved = saved_figures
    assert main(["plot", str(sweep), "--legend", "20"]) == 0
    fig = saved[-1]
    legend = fig.axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()][-2:] == ["algo.lr=19 (n=1)", "+5 more (gray)"]
    named = [to_rgba(h.get_color())[:3] for h in legend.legend_handles[:20]]
    assert len(set(named)) == 20 and all(len(set(c)) > 1 or c == (0, 0, 0) for c in named)
    box = legend.get_window_extent(FigureCanvasAgg(fig).get_renderer())
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
    out = capsys.readouterr().out
    assert "legend: the legend names the first 20 of 25 lines" in out and "--legend 20 names" not in out
    assert "--ignore" not in out  # one swept key: merging it would leave one line of every run

    few = tmp_path / "few"
    for i in range(10):
        make_run(few, i, [f"algo.lr={i}", "seed=1"], [(100.0, float(i), ""), (200.0, i + 1.0, "")])
    result = plot_dir(few)
    assert result.named == 10 and result.legend_note == ""
    assert len(saved[-1].axes[0].get_legend().get_texts()) == 10  # all named, inside the axes as before

    for bad in ("0", "21"):
        assert main(["plot", str(sweep), "--legend", bad]) == 2
        assert capsys.readouterr().err == (f"corral plot: error: --legend {bad}: give 1 to 20 groups to name in the "
                                           "legend (more colours than that cannot be told apart; the other groups "
                                           "are drawn in gray)\n")
