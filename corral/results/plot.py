"""``corral plot``: learning curves from runs' ``progress.csv``, one line per group of runs.

Runs are grouped like ``corral results`` groups them (by the swept keys, seeds together). Each
line is the mean across the group's runs, interpolated onto the environment steps where every
run of the group has data, with a band of +- one standard deviation (the spread across seeds).
matplotlib is imported only when a PNG is drawn.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Iterable, Sequence

import numpy as np

from corral.results.summary import Roots, RunRecord, find_runs_under, root_paths
from corral.results.table import group_runs
from corral.results.writable import directory_problem, write_atomically

#: How to install what ``corral plot`` needs.
PLOT_EXTRA = "pip install 'corral[plot]'"
#: Default image name inside the directory that was plotted.
DEFAULT_PNG = "learning_curves.png"
X_KEY = "env_steps"


def read_curve(path: str | Path, metric: str, x_key: str = X_KEY) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of the rows of a ``progress.csv`` that have ``metric`` (empty arrays if none)."""
    xs, ys = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            x, y = row.get(x_key, ""), row.get(metric, "")
            if x not in ("", None) and y not in ("", None):
                xs.append(float(x))
                ys.append(float(y))
    return np.asarray(xs), np.asarray(ys)


@dataclass
class Curve:
    """One line of the plot: a group's mean and spread across its runs."""

    label: str
    n_runs: int
    x: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    runs: list[str] = field(default_factory=list)
    #: Each run's own final value of the metric, in the order of ``runs`` (what ``corral plot``
    #: prints: the line itself ends where the shortest run ends, at a value interpolated there).
    finals: list[float] = field(default_factory=list)


@dataclass
class PlotResult:
    """What ``corral plot`` drew: the image path, the metric and the curves (one per line)."""

    path: Path | None
    metric: str
    curves: list[Curve]
    n_lines: int = 0
    #: The runs it left out, as ``<path> (<why>)``: not completed (failed, interrupted, unreadable),
    #: unfinished, or without the metric in a ``progress.csv``.
    skipped: list[str] = field(default_factory=list)


def mean_curve(label: str, series: Sequence[tuple[np.ndarray, np.ndarray]], runs: Sequence[str] = ()) -> Curve | None:
    """The mean +- std of several ``(x, y)`` series on the x values where all of them have data.

    Each series is interpolated onto the union of the series' x values inside the range every
    series covers (or, where the ranges do not overlap, the whole range). None for no data.
    """
    data = [(np.asarray(x, dtype=float), np.asarray(y, dtype=float)) for x, y in series]
    data = [(x, y) for x, y in data if len(x)]
    if not data:
        return None
    lo = max(float(x[0]) for x, _ in data)
    hi = min(float(x[-1]) for x, _ in data)
    if lo > hi:  # the series' step ranges do not overlap: use every series' own points
        lo, hi = min(float(x[0]) for x, _ in data), max(float(x[-1]) for x, _ in data)
    grid = np.unique(np.concatenate([x[(x >= lo) & (x <= hi)] for x, _ in data]))
    if grid.size == 0:
        grid = np.asarray([lo])
    ys = np.stack([np.interp(grid, x, y) for x, y in data])
    std = ys.std(axis=0, ddof=1) if len(data) > 1 else np.zeros(grid.shape)
    return Curve(label=label, n_runs=len(data), x=grid, mean=ys.mean(axis=0), std=std, runs=list(runs))


#: The summary field that holds a run's final value of a ``progress.csv`` column, as ``corral results``
#: shows it (the final evaluation of a run that did not evaluate at its last epoch is only there).
SUMMARY_FINALS = {"train/return_mean": "final_train_return", "eval/return_mean": "final_eval_return"}


def final_values(runs: Sequence[RunRecord], series: Sequence[np.ndarray], metric: str) -> list[float]:
    """Each run's final value of ``metric``: its summary's (``final_train_return`` for
    ``train/return_mean``, ``final_eval_return`` for ``eval/return_mean``, the values ``corral
    results`` averages) when every run has it, else the last value of each run's own ``series``."""
    name = SUMMARY_FINALS.get(metric)
    given = [r.summary.get(name) for r in runs] if name else []
    finals = [float(v) for v in given if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)]
    if finals and len(finals) == len(runs):
        return finals
    return [float(y[-1]) for y in series]


def group_curve(label: str, runs: Sequence[RunRecord], metric: str, x_key: str = X_KEY) -> Curve | None:
    """The mean +- std curve of ``runs`` for ``metric`` (see :func:`mean_curve`), with each run's
    final value (:func:`final_values`); None when no run has it."""
    data = [(r, *read_curve(r.progress_path, metric, x_key)) for r in runs if r.progress_path.is_file()]
    data = [(r, x, y) for r, x, y in data if len(x)]
    curve = mean_curve(label, [(x, y) for _, x, y in data], [str(r.path) for r, _, _ in data])
    if curve is not None:
        curve.finals = final_values([r for r, _, _ in data], [y for _, _, y in data], metric)
    return curve


def choose_metric(runs: Iterable[RunRecord]) -> str:
    """``eval/return_mean`` when every run evaluated at least twice, else ``train/return_mean``."""
    runs = list(runs)
    for run in runs:
        if not run.progress_path.is_file() or len(read_curve(run.progress_path, "eval/return_mean")[0]) < 2:
            return "train/return_mean"
    return "eval/return_mean" if runs else "train/return_mean"


def columns_hint(runs: Iterable[RunRecord], metric: str = "", shown: int = 12) -> str:
    """What the runs' ``progress.csv`` files offer to plot, for a message about a ``metric`` none has:
    the nearest column name (`` (did you mean eval/return_mean?)``), then ``; the runs' columns are
    train/return_mean, ...: give one with --metric``, or a note that no run has a ``progress.csv``
    (the csv logger was off)."""
    import csv
    import difflib

    columns: dict[str, None] = {}
    for run in runs:
        if run.progress_path.is_file():
            with open(run.progress_path, newline="") as f:
                columns.update(dict.fromkeys(next(csv.reader(f), [])))
    names = [c for c in columns if c not in ("epoch", "env_steps")]
    if not names:
        return " (no run has a progress.csv with columns: is the csv logger on?)"
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    near = difflib.get_close_matches(metric, names, n=1, cutoff=0.6) if metric else []
    guess = f" (did you mean {near[0]}?)" if near else ""
    return f"{guess}; the runs' columns are {', '.join(names[:shown])}{more}: give one with --metric"


def learning_curves(runs: Sequence[RunRecord], metric: str, ignore: Iterable[str] = ("seed",)) -> list[Curve]:
    """One :class:`Curve` per group of ``runs`` (grouped by the swept keys, ``ignore`` merged)."""
    _, groups = group_runs(runs, ignore)
    curves = [group_curve(g.label, g.runs, metric) for g in groups]
    return [c for c in curves if c is not None]


def _matplotlib() -> ModuleType:
    """matplotlib, or an ImportError that names the extra that installs it."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"corral plot needs matplotlib: {PLOT_EXTRA} (or pip install matplotlib)") from None
    return matplotlib


def draw(curves: Sequence[Curve], path: str | Path, metric: str, title: str = "") -> int:
    """Draw ``curves`` (mean line, +- std band) into the PNG ``path``; return the number of lines drawn."""
    matplotlib = _matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        for c in curves:
            marker = "o" if c.x.size < 3 else None
            (line,) = ax.plot(c.x, c.mean, marker=marker, label=f"{c.label} (n={c.n_runs})")
            if c.n_runs > 1:
                ax.fill_between(c.x, c.mean - c.std, c.mean + c.std, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(metric)
        if title:
            ax.set_title(title)
        if curves:
            ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        n_lines = len(ax.get_lines())
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # whole or not at all: a disk that fills up leaves the last image (if any) as it was
        write_atomically(path, lambda f: fig.savefig(f, dpi=100, format=Path(path).suffix[1:].lower() or "png"))
    finally:
        plt.close(fig)
    return n_lines


def output_path(out: str | Path | None, roots: Sequence[Path]) -> Path:
    """Where ``corral plot -o OUT`` writes: ``OUT`` itself, ``OUT/learning_curves.png`` when ``OUT`` is a
    directory (or ends with a slash), ``OUT.png`` when it has no suffix (what matplotlib would
    write); without ``-o``, ``<root>/learning_curves.png`` for one directory ``roots``. Raises
    ValueError, naming the reason, when its directory cannot be created, matplotlib writes no such
    file type (``-o curves.txt``), or several directories are plotted without ``-o`` (no one of them
    is the plot's home)."""
    _matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if out is None:
        if len(roots) != 1:
            raise ValueError(f"{len(roots)} directories are plotted together, so none of them is the plot's place; "
                             "give -o OUT.png")
        path = roots[0] / DEFAULT_PNG
    elif Path(out).is_dir() or str(out).endswith(("/", os.sep)):
        path = Path(out) / DEFAULT_PNG
    else:
        path = Path(out) if Path(out).suffix else Path(f"{out}.png")
    if path.suffix[1:].lower() not in formats:
        raise ValueError(f"-o {out}: matplotlib writes no {path.suffix} files; give -o a name ending in .png, .svg or "
                         f".pdf (it also writes {', '.join('.' + f for f in sorted(formats) if f not in ('png', 'svg', 'pdf'))})")
    if (problem := directory_problem(path.absolute().parent)) is not None:
        raise ValueError(f"cannot write {path}: {problem}; give -o a file in a directory you can write to")
    return path


def plot_dir(roots: Roots, out: str | Path | None = None, metric: str | None = None,
             ignore: Iterable[str] = ("seed",), title: str | None = None) -> PlotResult:
    """Learning curves of every completed run under ``roots`` (a run or a multirun directory, or
    several: runs with the same overrides make one line whichever directory holds them) as an image.

    ``out``: see :func:`output_path`; ``metric`` defaults to :func:`choose_metric`.
    """
    given = root_paths(roots)
    path = output_path(out, given)  # a file that cannot be written: before the runs are read
    found = find_runs_under(given)
    runs = found.completed
    skipped = found.skipped()
    if not runs:
        counts = found.status_counts()
        left = f" ({counts}; `corral results {' '.join(map(str, given))}` lists them)" if counts else ""
        raise FileNotFoundError(f"no completed run (a directory with summary.json) under {found.where}{left}")
    metric = metric or choose_metric(runs)
    curves = learning_curves(runs, metric, ignore)
    drawn = {run for c in curves for run in c.runs}
    skipped += [f"{r.path} ({'no ' + metric + ' in its' if r.progress_path.is_file() else 'no'} progress.csv)"
                for r in runs if str(r.path) not in drawn]
    if not curves:
        raise ValueError(f"no run under {found.where} has {metric!r} in its progress.csv{columns_hint(runs, metric)}")
    n_lines = draw(curves, path, metric, title if title is not None else found.where)
    return PlotResult(path=path, metric=metric, curves=curves, n_lines=n_lines, skipped=skipped)


__all__ = ["Curve", "DEFAULT_PNG", "PlotResult", "SUMMARY_FINALS", "choose_metric", "columns_hint", "draw",
           "final_values", "group_curve", "learning_curves", "mean_curve", "output_path", "plot_dir", "read_curve"]
