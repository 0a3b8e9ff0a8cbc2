"""``corral plot``: learning curves from runs' ``progress.csv``, one line per group of runs.

Runs are grouped like ``corral results`` groups them (by the swept keys, seeds together). Each
line is the mean across the group's runs, interpolated onto the environment steps where every
run of the group has data, with a band of +- one standard deviation (the spread across seeds).
matplotlib is imported only when a PNG is drawn.
"""

from __future__ import annotations

import csv
import io
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Sequence

import numpy as np

from corral.results.labels import legend_labels
from corral.results.select import Only, describe, select_runs
from corral.results.summary import Roots, RunRecord, check_root, find_runs_under, root_paths
from corral.results.table import group_runs
from corral.results.writable import directory_problem, write_atomically

#: How to install what ``corral plot`` needs.
PLOT_EXTRA = "pip install 'corral[plot]'"
#: Default image name inside the directory that was plotted.
DEFAULT_PNG = "learning_curves.png"
X_KEY = "env_steps"


def read_curve(path: str | Path, metric: str, x_key: str = X_KEY) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of the rows of a ``progress.csv`` that have ``metric`` (empty arrays if none).

    Raises ``ValueError`` naming the file and line for a row that is not whole (a last line without
    its line end: a write or a copy cut short, so its last value may be too; fewer or more fields than
    the header) or whose ``x_key`` or ``metric`` is not a number, and for a file that is not text;
    ``OSError`` when it cannot be read.
    """
    try:
        return _read_curve(path, metric, x_key)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _read_curve(path: str | Path, metric: str, x_key: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`read_curve`, its ``ValueError`` without the path."""
    xs, ys = [], []
    try:
        with open(path, newline="") as f:
            text = f.read()
        if text and not text.endswith(("\n", "\r")):  # the logger ends every row with one
            raise ValueError(f"its last line (line {len(text.splitlines())}) has no line end: a row cut short (a copy "
                             "or a write cut off)")
        reader = csv.reader(io.StringIO(text, newline=""))
        header = next(reader, [])
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise ValueError(f"line {reader.line_num} has {len(row)} fields, the header {len(header)}")
            values = dict(zip(header, row))
            x, y = values.get(x_key, ""), values.get(metric, "")
            if x != "" and y != "":
                xs.append(_number(x, x_key, reader.line_num))
                ys.append(_number(y, metric, reader.line_num))
    except csv.Error as exc:  # a NUL byte, a quote left open
        raise ValueError(str(exc)) from None
    except UnicodeDecodeError as exc:  # a binary file
        raise ValueError(f"not text ({exc.reason} at byte {exc.start})") from None
    return np.asarray(xs), np.asarray(ys)


def _number(text: str, column: str, line: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"line {line}: {column} is {text!r}, not a number") from None


def _read_problem(run: RunRecord, exc: Exception) -> str:
    """Why a run's ``progress.csv`` gave no curve, for its ``skipped:`` line."""
    why = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
    return f"its {run.progress_path.name} cannot be read: {why}"


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
    #: How many of ``curves`` (the first ones) the legend names; the others are drawn in gray.
    named: int = 0
    #: When the legend names only some lines: one line that says so and how to narrow the plot
    #: (what ``corral plot`` prints as ``legend: ...``); empty when it names them all.
    legend_note: str = ""
    #: The runs and unfinished job directories found under the directories, and of them those ``--only`` kept.
    n_found: int = 0
    n_kept: int = 0


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


def group_curve(label: str, runs: Sequence[RunRecord], metric: str, x_key: str = X_KEY,
                problems: dict[str, str] | None = None) -> Curve | None:
    """The mean +- std curve of ``runs`` for ``metric`` (see :func:`mean_curve`), with each run's
    final value (:func:`final_values`); None when no run has it. A run whose ``progress.csv`` cannot
    be read (:func:`read_curve` raises) is left out, and ``problems`` (when given) gets its path and why."""
    data = []
    for r in runs:
        if r.progress_path.is_file():
            try:
                data.append((r, *_read_curve(r.progress_path, metric, x_key)))
            except (OSError, ValueError) as exc:
                if problems is not None:
                    problems[str(r.path)] = _read_problem(r, exc)
    data = [(r, x, y) for r, x, y in data if len(x)]
    curve = mean_curve(label, [(x, y) for _, x, y in data], [str(r.path) for r, _, _ in data])
    if curve is not None:
        curve.finals = final_values([r for r, _, _ in data], [y for _, _, y in data], metric)
    return curve


def choose_metric(runs: Iterable[RunRecord]) -> str:
    """``eval/return_mean`` when every run evaluated at least twice, else ``train/return_mean``."""
    runs = list(runs)
    for run in runs:
        try:
            if not run.progress_path.is_file() or len(read_curve(run.progress_path, "eval/return_mean")[0]) < 2:
                return "train/return_mean"
        except (OSError, ValueError):  # a file that cannot be read: the run is skipped, saying why
            continue
    return "eval/return_mean" if runs else "train/return_mean"


def columns_hint(runs: Iterable[RunRecord], metric: str = "", shown: int = 12) -> str:
    """What the runs' ``progress.csv`` files offer to plot, for a message about a ``metric`` none has:
    the nearest column name (`` (did you mean eval/return_mean?)``), then ``; the runs' columns are
    train/return_mean, ...: give one with --metric``, or a note that no run has a ``progress.csv``
    (the csv logger was off)."""
    import difflib

    columns: dict[str, None] = {}
    for run in runs:
        try:
            with open(run.progress_path, newline="") as f:
                columns.update(dict.fromkeys(next(csv.reader(f), [])))
        except (OSError, ValueError, csv.Error):  # none, or unreadable: its own skipped line says why
            continue
    names = [c for c in columns if c not in ("epoch", "env_steps")]
    if not names:
        return " (no run has a progress.csv with columns: is the csv logger on?)"
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    near = difflib.get_close_matches(metric, names, n=1, cutoff=0.6) if metric else []
    guess = f" (did you mean {near[0]}?)" if near else ""
    return f"{guess}; the runs' columns are {', '.join(names[:shown])}{more}: give one with --metric"


def learning_curves(runs: Sequence[RunRecord], metric: str, ignore: Iterable[str] = ("seed",),
                    problems: dict[str, str] | None = None) -> list[Curve]:
    """One :class:`Curve` per group of ``runs`` (grouped by the swept keys, ``ignore`` merged);
    ``problems``: see :func:`group_curve`."""
    _, groups = group_runs(runs, ignore)
    curves = [group_curve(g.label, g.runs, metric, problems=problems) for g in groups]
    return [c for c in curves if c is not None]


def _matplotlib() -> ModuleType:
    """matplotlib, or an ImportError that names the extra that installs it."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"corral plot needs matplotlib: {PLOT_EXTRA} (or pip install matplotlib)") from None
    return matplotlib


#: How many groups the legend names by default (``corral plot --legend N``); the others are drawn in gray.
LEGEND_MAX = 10
#: The most groups a legend may name: more colours than tab20's cannot be told apart.
LEGEND_LIMIT = 20
#: The colour of the lines the legend does not name (one legend entry, ``+K more``, stands for them).
OTHERS_COLOR = "0.72"


def legend_colors(n: int, beside_gray: bool = False) -> list[str]:
    """Distinct colours for ``n`` named lines (``n`` at most :data:`LEGEND_LIMIT`): matplotlib's
    default ten (``C0``..``C9``), or tab20's for more (its strong ten first, then their light pairs).
    ``beside_gray``: gray lines stand for the groups not named, so no named one is gray (black and
    dark blue take the places of the palettes' grays)."""
    if n <= 10:
        colors = [f"C{i}" for i in range(10)]
    else:
        from matplotlib import colormaps
        from matplotlib.colors import to_hex

        tab20 = [to_hex(colormaps["tab20"](i)) for i in range(20)]
        colors = tab20[0::2] + tab20[1::2]
    if beside_gray:
        colors = [_NOT_GRAY.get(c, c) for c in colors]
    return colors[:n]


#: The palettes' grays (C7 and tab20's gray pair), and what takes their places beside gray lines.
_NOT_GRAY = {"C7": "#000000", "#7f7f7f": "#000000", "#c7c7c7": "#393b79"}


def check_legend(legend: int) -> None:
    """Raise ValueError unless ``legend`` (the groups a legend names) is 1 to :data:`LEGEND_LIMIT`."""
    if isinstance(legend, bool) or not isinstance(legend, int) or not 1 <= legend <= LEGEND_LIMIT:
        raise ValueError(f"--legend {legend}: give 1 to {LEGEND_LIMIT} groups to name in the legend (more colours "
                         "than that cannot be told apart; the other groups are drawn in gray)")


def draw(curves: Sequence[Curve], path: str | Path, metric: str, title: str = "", legend: int = LEGEND_MAX) -> int:
    """Draw ``curves`` (mean line, +- std band) into the image ``path``; return the number of lines drawn.

    The legend names the first ``legend`` curves, each in its own colour; any further curve is still
    drawn, as a thin gray line without its band, and one legend entry ``+K more (gray)`` stands for
    them all. Long labels are wrapped, and very long ones shortened (:func:`corral.results.labels.legend_labels`).
    Up to ten entries sit inside the axes as before, where they fit; a longer legend, or one wider or
    taller than the axes, goes to the right of them, and the figure grows to hold it, so it is never cut off.
    """
    check_legend(legend)
    matplotlib = _matplotlib()
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    named, others = list(curves[:legend]), list(curves[legend:])
    labels = legend_labels([f"{c.label} (n={c.n_runs})" for c in named])
    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        handles: list[Any] = []
        for c, color, label in zip(named, legend_colors(len(named), beside_gray=bool(others)), labels):
            marker = "o" if c.x.size < 3 else None
            (line,) = ax.plot(c.x, c.mean, marker=marker, color=color, label=label)
            handles.append(line)
            if c.n_runs > 1:
                ax.fill_between(c.x, c.mean - c.std, c.mean + c.std, color=color, alpha=0.2, linewidth=0)
        # under the named lines, above their bands; one artist for them all (2,000 lines of their own took
        # a second), but a line of fewer than three points gets its own, with markers, as the named ones do
        others_drawn = [np.column_stack([c.x, c.mean]) for c in others if c.x.size >= 3]
        if others_drawn:
            ax.add_collection(LineCollection(others_drawn, colors=OTHERS_COLOR, linewidths=0.8, zorder=1.5))
        for c in others:
            if c.x.size < 3:
                ax.plot(c.x, c.mean, marker="o", markersize=3, color=OTHERS_COLOR, linewidth=0.8, zorder=1.5)
        if others:
            handles.append(Line2D([], [], color=OTHERS_COLOR, linewidth=0.8, label=f"+{len(others)} more (gray)"))
        ax.set_xlabel("environment steps")
        ax.set_ylabel(metric)
        if title:
            ax.set_title(title)
        ax.grid(alpha=0.3)
        if 0 < len(handles) <= 10:  # as it always was: inside, where it hides the fewest lines, if it fits there
            inside = ax.legend(handles=handles, fontsize="small")
            fig.tight_layout()
            if not _within(inside.get_window_extent(), ax.get_window_extent()):  # wider or taller than the axes
                inside.remove()
                _legend_beside(fig, ax, handles)
        elif handles:
            _legend_beside(fig, ax, handles)
        fig.tight_layout()
        # tight_layout leaves a placeholder layout engine, for which savefig draws the whole figure once
        # more before it draws it into the file; the layout is done, so no engine: one draw
        fig.set_layout_engine(None)
        n_lines = len(ax.get_lines()) + len(others_drawn)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # whole or not at all: a disk that fills up leaves the last image (if any) as it was
        write_atomically(path, lambda f: fig.savefig(f, dpi=100, format=Path(path).suffix[1:].lower() or "png"))
    finally:
        plt.close(fig)
    return n_lines


def _within(inner: Any, outer: Any, slack: float = 0.5) -> bool:
    """Whether the box ``inner`` lies inside the box ``outer`` (display units; ``slack`` for rounding)."""
    return (inner.x0 >= outer.x0 - slack and inner.y0 >= outer.y0 - slack and inner.x1 <= outer.x1 + slack
            and inner.y1 <= outer.y1 + slack)


def _legend_beside(fig: Any, ax: Any, handles: Sequence[Any]) -> None:
    """The legend of ``handles`` to the right of ``ax``, which keeps its size: the figure widens (and
    heightens) by the legend's size."""
    box = ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1),
                    borderaxespad=0).get_window_extent()
    width, height = fig.get_size_inches()
    fig.set_size_inches(width + box.width / fig.dpi + 0.2, max(height, box.height / fig.dpi + 1.2))


def output_path(out: str | Path | None, roots: Sequence[Path]) -> Path:
    """Where ``corral plot -o OUT`` writes: ``OUT`` itself, ``OUT/learning_curves.png`` when ``OUT`` is a
    directory (or ends with a slash), ``OUT.png`` when it has no suffix (what matplotlib would
    write); without ``-o``, ``<root>/learning_curves.png`` for one directory ``roots``. Raises
    ValueError, naming the reason, when its directory cannot be created, matplotlib writes no such
    file type (``-o curves.txt``) or cannot here (``-o curves.pgf`` without its TeX program), or several directories are plotted without ``-o`` (no one of them
    is the plot's home)."""
    _matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if out is not None and not str(out).strip():
        raise ValueError("-o is empty; give it an image file (OUT.png) or a directory to write learning_curves.png in")
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
    if path.suffix.lower() == ".pgf":  # matplotlib writes PGF through a TeX program it starts
        import shutil

        tex = str(_matplotlib().rcParams["pgf.texsystem"])
        if shutil.which(tex) is None:
            raise ValueError(f"-o {out}: matplotlib writes .pgf files with {tex}, which is not installed here; install "
                             "it, or give -o a name ending in .pdf or .svg")
    if (problem := directory_problem(path.absolute().parent)) is not None:
        raise ValueError(f"cannot write {path}: {problem}; give -o a file in a directory you can write to")
    return path


def _no_curve(run: RunRecord, metric: str) -> str:
    return f"{'no ' + metric + ' in its' if run.progress_path.is_file() else 'no'} progress.csv"


def legend_note(curves: Sequence[Curve], runs: Sequence[RunRecord], ignore: Sequence[str],
                legend: int = LEGEND_MAX) -> str:
    """The line ``corral plot`` prints when its legend names only the first ``legend`` of ``curves``
    (empty when it names them all): how many are gray, and how to see the ones wanted: ``--legend``
    up to :data:`LEGEND_LIMIT`, ``--ignore`` with the swept key whose values merged leave the fewest
    lines (when more than one key is swept), or ``--only`` some values of a swept key."""
    if len(curves) <= legend:
        return ""
    from corral.results.table import swept_keys

    keys = swept_keys(runs, ignore)
    dicts = [r.override_dict() for r in runs]
    ways = [f"--legend {LEGEND_LIMIT} names up to {LEGEND_LIMIT}"] if legend < LEGEND_LIMIT else []
    if len(keys) > 1:  # merging the only swept key would leave one line of every run
        left = {k: len({tuple(d.get(o, "-") for o in keys if o != k) for d in dicts}) for k in keys}
        key = min(keys, key=lambda k: left[k])
        ways.append(f"--ignore {' '.join([*ignore, key])} merges the values of {key} into one line "
                    f"({left[key]} line(s); swept: {', '.join(keys)})")
    if keys:  # two values of the swept key of the most values, as an example: keeping a few of them leaves the fewest
        values = {k: list(dict.fromkeys(d[k] for d in dicts if k in d)) for k in keys}
        many = max(keys, key=lambda k: len(values[k]))
        ways.append(f"--only {' '.join(shlex.quote(f'{many}={v}') for v in values[many][:2])} ... keeps the runs "
                    f"with those values of {many}")
    else:
        ways.append("plot only some runs' directories (corral plot DIR/0 DIR/3 ... -o OUT.png)")
    how = "; ".join(ways[:-1]) + "; or " + ways[-1] if len(ways) > 1 else ways[0]
    return (f"the legend names the first {legend} of {len(curves)} lines (listed above in that order); the other "
            f"{len(curves) - legend} are drawn in gray, without their std band. To see others: {how}")


def plot_dir(roots: Roots, out: str | Path | None = None, metric: str | None = None,
             ignore: Iterable[str] = ("seed",), title: str | None = None, legend: int = LEGEND_MAX,
             only: Only | None = None) -> PlotResult:
    """Learning curves of every completed run under ``roots`` (a run or a multirun directory, or
    several: runs with the same overrides make one line whichever directory holds them) as an image.

    ``out``: see :func:`output_path`; ``metric`` defaults to :func:`choose_metric`; ``legend``: how
    many groups the legend names (see :func:`draw`, :func:`legend_note`); ``only``: just the runs
    :func:`corral.results.select.select_runs` keeps (a key or value no run has raises ``ValueError``),
    named in the default title.
    """
    check_legend(legend)
    ignore = list(ignore)
    given = root_paths(roots)
    if metric is not None and not metric.strip():
        raise ValueError("--metric is empty; give it a progress.csv column (train/return_mean, eval/return_mean, ...), "
                         "or leave it out for the default")
    for root in given:  # a directory that is not there, or a file: said as such, before -o is looked at
        check_root(root)
    path = output_path(out, given)  # a file that cannot be written: before the runs are read
    everything = find_runs_under(given)
    found = select_runs(everything, only or {})
    where = f"{found.where} with --only {describe(only)}" if only else found.where
    runs = found.completed
    skipped = found.skipped()
    if not runs:
        counts = found.status_counts()
        command = " ".join(shlex.quote(str(g)) for g in given) + (
            " --only " + " ".join(shlex.quote(f"{k}={v}") for k, vs in only.items() for v in vs) if only else "")
        left = f" ({counts}; `corral results {command}` lists them)" if counts else ""
        raise FileNotFoundError(f"no completed run (a directory with summary.json) under {where}{left}")
    metric = metric or choose_metric(runs)
    problems: dict[str, str] = {}
    curves = learning_curves(runs, metric, ignore, problems)
    drawn = {run for c in curves for run in c.runs}
    skipped += [f"{r.path} ({problems.get(str(r.path)) or _no_curve(r, metric)})" for r in runs if str(r.path) not in drawn]
    if not curves and problems:  # the runs that have the metric could not be read: not a missing column
        first, why = next(iter(problems.items()))
        more = f" (and {len(problems) - 1} more run(s))" if len(problems) > 1 else ""
        raise ValueError(f"no curve of {metric} under {where}: {first} ({why}){more}; repair or move the file")
    if not curves:
        raise ValueError(f"no run under {where} has {metric!r} in its progress.csv{columns_hint(runs, metric)}")
    default_title = f"{found.where} (only {describe(only)})" if only else found.where
    n_lines = draw(curves, path, metric, title if title is not None else default_title, legend)
    drawn_runs = [r for r in runs if str(r.path) in drawn]
    return PlotResult(path=path, metric=metric, curves=curves, n_lines=n_lines, skipped=skipped,
                      named=min(legend, len(curves)), legend_note=legend_note(curves, drawn_runs, ignore, legend),
                      n_found=len(everything.runs) + len(everything.unfinished),
                      n_kept=len(found.runs) + len(found.unfinished))


__all__ = ["Curve", "DEFAULT_PNG", "LEGEND_LIMIT", "LEGEND_MAX", "OTHERS_COLOR", "PlotResult", "SUMMARY_FINALS",
           "check_legend", "choose_metric", "columns_hint", "draw", "final_values", "group_curve", "learning_curves",
           "legend_colors", "legend_note", "mean_curve", "output_path", "plot_dir", "read_curve"]
