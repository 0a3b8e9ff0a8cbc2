"""``corral results``: one row per group of runs (the swept keys' values), mean +- std across seeds.

Runs are grouped by their Hydra overrides without the ignored keys (``seed`` by default); the
table's key columns are the keys whose values differ between runs (the swept keys), found among
every run of the sweep, interrupted and unfinished ones included. The std is the sample standard
deviation across the group's runs; the table shows ``mean ± std`` only where a group has two runs
or more (a single run shows its value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from corral.results.select import Only, select_runs
from corral.results.summary import FoundRuns, Roots, RunRecord, find_runs_under, unfinished_record, why_not_completed

#: Summary fields shown by default: (field, column title).
DEFAULT_METRICS: tuple[tuple[str, str], ...] = (
    ("final_eval_return", "final eval return"),
    ("best_eval_return", "best eval return"),
    ("final_train_return", "final train return"),
    ("env_steps", "env steps"),
    ("wall_time_s", "wall time s"),
)


@dataclass
class Group:
    """Runs that share every override except the ignored keys."""

    key: tuple[tuple[str, str], ...]
    runs: list[RunRecord] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``algo=ppo sampler=ray``, or ``all runs`` when nothing was swept."""
        return " ".join(f"{k}={v}" for k, v in self.key) or "all runs"

    def values(self, metric: str) -> list[float]:
        """The metric of every run of the group that has it."""
        out = []
        for run in self.runs:
            v = run.summary.get(metric)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out.append(float(v))
        return out


def mean_std(values: Sequence[float]) -> tuple[float, float] | None:
    """Mean and sample standard deviation (0 for one value); None for no values."""
    if not values:
        return None
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var)


def format_number(x: float) -> str:
    """A mean or std as ``corral results`` and ``corral plot`` print it: one decimal with thousands
    separators from 1 up (``1,875.3``, ``36.7``), 4 significant figures below 1 (``0.001234``,
    ``-0.04210``, ``1.234e-05``), so small metrics (``ppo/approx_kl``, ``loss/policy``) do not all
    read ``0.0``; ``0.0`` for zero (never ``-0.0``)."""
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0.0"
    if abs(x) >= 1:
        return f"{x:,.1f}"
    return f"{x:#.4g}"


def format_mean_std(mean: float, std: float | None = None) -> str:
    """``mean ± std`` as ``corral results`` and ``corral plot`` print it (``mean`` alone when ``std`` is
    None: one run has no spread). The mean is :func:`format_number`'s; the std has the mean's one
    decimal where the mean has one (``22.0 ± 0.6``), else its own 4 significant figures
    (``0.0009216 ± 0.0003514``)."""
    if std is None:
        return format_number(mean)
    spread = f"{float(std):,.1f}" if math.isfinite(mean) and abs(mean) >= 1 else format_number(std)
    return f"{format_number(mean)} ± {spread}"


def swept_keys(runs: Iterable[RunRecord], ignore: Iterable[str] = ("seed",)) -> list[str]:
    """Override keys whose values differ between ``runs`` (a key missing from a run counts as a value)."""
    runs = list(runs)
    ignore = set(ignore)
    dicts = [r.override_dict() for r in runs]
    keys: list[str] = []
    for d in dicts:
        for k in d:
            if k not in keys and k not in ignore:
                keys.append(k)
    return [k for k in keys if len({d.get(k) for d in dicts}) > 1]


def unused_ignore_keys(roots: Roots, ignore: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(unused, overridden)``: the keys of ``ignore`` that no run under ``roots`` (one directory or
    several) overrides (a typo would merge nothing, in silence), and every key the runs do override,
    for the message."""
    found = find_runs_under(roots)
    records = [*found.runs, *(unfinished_record(p) for p in found.unfinished)]
    overridden: list[str] = []
    for record in records:
        overridden += [k for k in record.override_dict() if k not in overridden]
    return [k for k in ignore if k not in overridden], overridden


def group_runs(runs: Iterable[RunRecord], ignore: Iterable[str] = ("seed",),
               keys: Sequence[str] | None = None) -> tuple[list[str], list[Group]]:
    """``(swept keys, groups)``: runs grouped by the values of the swept keys (``keys``, default
    :func:`swept_keys` of ``runs``), in first-seen order."""
    runs = list(runs)
    keys = swept_keys(runs, ignore) if keys is None else list(keys)
    groups: dict[tuple[tuple[str, str], ...], Group] = {}
    for run in runs:
        d = run.override_dict()
        key = tuple((k, d.get(k, "-")) for k in keys)
        groups.setdefault(key, Group(key)).runs.append(run)
    return keys, list(groups.values())


@dataclass
class ResultsTable:
    """The table ``corral results`` prints, also available as data (``rows``)."""

    keys: list[str]
    metrics: list[tuple[str, str]]
    rows: list[dict[str, Any]]
    skipped: list[str] = field(default_factory=list)

    def format(self) -> str:
        """A Markdown table: key columns, ``n`` (runs), then ``mean ± std`` per metric (:func:`format_mean_std`)."""
        headers = [*self.keys, "n"] + [title for _, title in self.metrics]
        if not self.keys:
            headers = ["group", *headers]
        lines = []
        for row in self.rows:
            cells = [str(row["key"].get(k, "-")) for k in self.keys] if self.keys else [row["label"]]
            cells.append(str(row["n"]))
            for metric, _ in self.metrics:
                ms = row[metric]
                if ms is None:
                    cells.append("n/a")
                else:  # one run has no spread to show
                    one = (row.get("counts") or {}).get(metric, row["n"]) < 2
                    cells.append(format_mean_std(ms[0], None if one else ms[1]))
            lines.append(cells)
        widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h) for i, h in enumerate(headers)]
        out = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |",
               "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        out += ["| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |" for cells in lines]
        out += [f"skipped: {s}" for s in self.skipped]
        return "\n".join(out)

    def to_json(self) -> dict[str, Any]:
        """Plain data: keys, metrics and rows with ``[mean, std]`` pairs."""
        return {
            "keys": self.keys,
            "metrics": [m for m, _ in self.metrics],
            "rows": [
                {"key": r["key"], "n": r["n"], "runs": r["runs"],
                 **{m: (list(r[m]) if r[m] is not None else None) for m, _ in self.metrics}}
                for r in self.rows
            ],
            "skipped": self.skipped,
        }


def results_table(
    runs: Sequence[RunRecord],
    metrics: Sequence[tuple[str, str]] = DEFAULT_METRICS,
    ignore: Iterable[str] = ("seed",),
    unfinished: Sequence[RunRecord] = (),
) -> ResultsTable:
    """Group ``runs`` (completed ones only; the others are listed as skipped) and aggregate ``metrics``.

    The swept keys come from every run, unfinished ones included (``unfinished``: job directories
    without a summary), so an interrupted sweep's table still has one column per swept key.
    """
    ignore = list(ignore)
    done = [r for r in runs if r.status == "completed"]
    skipped = [f"{r.path} ({why_not_completed(r)})" for r in runs if r.status != "completed"]
    keys, groups = group_runs(done, ignore, keys=swept_keys([*runs, *unfinished], ignore))
    rows = []
    for g in groups:
        row: dict[str, Any] = {"key": dict(g.key), "label": g.label, "n": len(g.runs),
                               "runs": [str(r.path) for r in g.runs], "counts": {}}
        for metric, _ in metrics:
            values = g.values(metric)
            row[metric] = mean_std(values)
            row["counts"][metric] = len(values)
        rows.append(row)
    return ResultsTable(keys=keys, metrics=list(metrics), rows=rows, skipped=skipped)


def results_for_dir(roots: Roots, ignore: Iterable[str] = ("seed",), only: Only | None = None) -> ResultsTable:
    """The results table of every run under ``roots`` (a run or sweep directory, or several: runs with
    the same overrides form one group whichever directory holds them), with unfinished job
    directories listed as skipped; ``only``: just the runs :func:`corral.results.select.select_runs`
    keeps (a key or value no run has raises ``ValueError``)."""
    return found_runs_table(select_runs(find_runs_under(roots), only or {}), ignore)


def found_runs_table(found: FoundRuns, ignore: Iterable[str] = ("seed",)) -> ResultsTable:
    """The results table of the runs ``found`` (:func:`corral.results.summary.find_runs_under`), with its
    runs that did not complete and its unfinished job directories listed as skipped."""
    table = results_table(found.runs, ignore=ignore, unfinished=[unfinished_record(p) for p in found.unfinished])
    table.skipped = found.skipped()
    return table


__all__ = ["DEFAULT_METRICS", "Group", "ResultsTable", "format_mean_std", "format_number", "found_runs_table",
           "group_runs", "mean_std", "results_for_dir", "results_table", "swept_keys", "unused_ignore_keys"]
