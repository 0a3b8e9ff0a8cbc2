"""Each run's machine-readable ``summary.json``: writing it atomically and finding runs under a directory.

A summary holds ``status`` (``completed``, ``interrupted`` or ``failed``; ``killed`` for a sweep's job its
launcher killed after the sweep was stopped, with ``last_saved_epoch`` when its snapshots say), ``stop_reason`` (the
limit that ended a completed run: ``n_epochs=100`` or ``max_env_steps=100000``), the final and
best evaluation returns, the final training return, environment steps, epochs, wall and training
time, UTC start and end times, the host, the job's Hydra overrides and number, and the resolved
config. A resumed run keeps one summary: its first session's start time, overrides and job, the
wall time of all sessions, and ``resumes`` (one entry per resume: when, from which snapshot and
epoch, with which overrides, in place or as a branch of another directory). Everything else in a run directory (``progress.csv``, ``.hydra/``) stays where Hydra and
the loggers put it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence, Union

from corral.results.writable import write_atomically

#: File name of a run's summary inside its output directory.
SUMMARY_FILE = "summary.json"
#: File name of a run's per-epoch statistics (written by the csv logger).
PROGRESS_FILE = "progress.csv"


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> Path:
    """Write ``summary`` as ``<run_dir>/summary.json`` atomically (temporary file, fsync, rename).

    A reader (or a sweep interrupted while this runs) sees either the old file or the new one,
    never a half-written one.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / SUMMARY_FILE
    text = json.dumps(summary, indent=2, default=str) + "\n"
    write_atomically(path, lambda f: f.write(text), text=True)  # its mode follows the umask, as the run's other files
    return path


@dataclass
class RunRecord:
    """One run found on disk: its directory, its summary and its Hydra overrides."""

    path: Path
    summary: dict[str, Any]
    overrides: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``completed``, ``interrupted``, ``failed``, ``unreadable`` (a ``summary.json`` that is not a
        JSON object; ``summary["error"]`` says why) or ``unknown`` (a summary without a status)."""
        return str(self.summary.get("status", "completed" if "env_steps" in self.summary else "unknown"))

    @property
    def progress_path(self) -> Path:
        """The run's ``progress.csv``: the file its csv logger wrote (``logger.csv.filename`` in the
        summary's config; ``progress.csv`` by default)."""
        config = self.summary.get("config")
        csv_node = ((config or {}).get("logger") or {}).get("csv") if isinstance(config, dict) else None
        name = csv_node.get("filename") if isinstance(csv_node, dict) else None
        return self.path / (str(name) if name else PROGRESS_FILE)

    def override_dict(self) -> dict[str, str]:
        """The overrides as ``{key: value}`` (``+``/``++``/``~`` prefixes dropped). A resumed run's
        summary holds its first session's overrides with each resume's own changes
        (:func:`corral.framework.entry.resumed_overrides`)."""
        return parse_overrides(self.overrides)


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    """``["algo=ppo", "+x=1"]`` -> ``{"algo": "ppo", "x": "1"}``; a deletion ``~key`` maps to ``"~"``."""
    out: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if key.startswith("~"):
            out[key.lstrip("~")] = "~" if not sep else f"~{value}"
            continue
        out[key.lstrip("+")] = value
    return out


def _overrides_from_hydra_dir(run_dir: Path) -> list[str]:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    from omegaconf import OmegaConf

    loaded = OmegaConf.load(path)
    return [str(x) for x in loaded] if loaded is not None else []


def read_run(run_dir: str | Path) -> RunRecord:
    """The :class:`RunRecord` of one run directory, from its ``summary.json``; a summary that cannot be
    read (not JSON, not an object, missing) gives a record of status ``unreadable`` that says why."""
    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
        if not isinstance(summary, dict):
            raise ValueError(f"it holds a JSON {type(summary).__name__}, not an object")
    except (ValueError, OSError) as exc:  # edited by hand, cut short by a copy, unreadable: left out, and said why
        why = f"{SUMMARY_FILE} cannot be read: {exc}"
        return RunRecord(path=run_dir, summary={"status": "unreadable", "error": why},
                         overrides=_overrides_from_hydra_dir(run_dir))
    overrides = summary.get("overrides")
    if overrides is None:  # a summary written before overrides were recorded
        overrides = _overrides_from_hydra_dir(run_dir)
    return RunRecord(path=run_dir, summary=summary, overrides=[str(o) for o in overrides])


def why_not_completed(run: RunRecord) -> str:
    """Why ``run`` is not among the completed ones, as its status: ``failed: ConfigError: ...`` (the
    error's first line, shortened) for a failed run, ``killed: JobKilled: ...`` for a sweep's job its launcher
    killed (:func:`corral.launchers.job_death.killed`), ``unreadable: summary.json cannot be read: ...``
    for a broken summary, else the status alone (``interrupted``)."""
    error = str(run.summary.get("error") or "").strip()
    if run.status not in ("failed", "killed", "unreadable") or not error:
        return run.status
    first = error.splitlines()[0]
    return f"{run.status}: {first if len(first) <= 200 else first[:200].rsplit(' ', 1)[0] + ' ...'}"


def _sort_key(run: RunRecord) -> tuple[Any, ...]:
    num = (run.summary.get("job") or {}).get("num")
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in run.path.parts)
    return (num if isinstance(num, int) else 10**9, parts)


#: What a run directory holds beside ``summary.json`` (Hydra's record, the run's log); its
#: ``progress.csv`` is looked for as well. ``snapshots/`` is not among them: an MLflow file store
#: keeps a run's uploaded snapshots next to its uploaded ``summary.json``.
RUN_FILES = (".hydra", "corral.log")


def looks_like_run(run_dir: str | Path) -> bool:
    """True when ``run_dir`` holds a run's own files beside its ``summary.json``: ``.hydra/``,
    ``corral.log`` or its ``progress.csv`` (see :attr:`RunRecord.progress_path`)."""
    run_dir = Path(run_dir)
    if any((run_dir / name).exists() for name in RUN_FILES) or (run_dir / PROGRESS_FILE).is_file():
        return True
    return read_run(run_dir).progress_path.is_file()


def find_runs(root: str | Path, unlistable: dict[Path, str] | None = None) -> list[RunRecord]:
    """Every run under ``root``, ``root`` itself included when it is a run directory, in job order.

    A run is a directory holding ``summary.json``: ``root`` itself, a directory that no run under
    ``root`` holds (a sweep's jobs, runs copied with only their summaries), and, inside a run
    directory, one that also holds a run's own files (``.hydra/``, ``corral.log``, its
    ``progress.csv``): a branch written into the run it continued (``trainer.resume=nest
    hydra.run.dir=nest/longer``), the jobs of a sweep directory a single run was written into. A
    ``summary.json`` inside a run without them is not a run: a copy, such as the one the MLflow
    logger uploads into a file store under the run (``mlruns/<experiment>/<run>/artifacts/``).
    ``unlistable``, when given, gets each directory under ``root`` that cannot be listed (no
    permission), with why: a run inside it is not found.
    Raises ``FileNotFoundError`` when ``root`` does not exist, ``NotADirectoryError`` when it is a file.
    """
    root = Path(root)
    check_root(root)
    holders: set[Path] = set()
    for dirpath, _, filenames in _walk(root, {} if unlistable is None else unlistable):
        if SUMMARY_FILE in filenames and (dirpath / SUMMARY_FILE).is_file():
            holders.add(dirpath)

    runs = [read_run(d) for d in holders
            if d == root or not any(parent in holders for parent in d.parents) or looks_like_run(d)]
    return sorted(runs, key=_sort_key)


def check_root(root: str | Path) -> None:
    """Raise ``FileNotFoundError`` when ``root`` (a directory given to ``corral results`` / ``corral
    plot``) does not exist, ``NotADirectoryError`` when it is a file (``summary.json`` or
    ``progress.csv`` instead of the run directory that holds them), each naming what to give."""
    root = Path(root)
    if root.is_file():
        raise NotADirectoryError(f"{root} is a file, not a run or sweep directory; give the directory that holds it "
                                 f"({root.parent})")
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")


def _walk(root: Path, unlistable: dict[Path, str]) -> Iterable[tuple[Path, list[str], list[str]]]:
    """``os.walk`` of ``root`` (symbolic links to directories not followed, as ``Path.rglob``), with
    ``unlistable`` given each directory that could not be listed and why."""
    def failed(exc: OSError) -> None:
        unlistable[Path(exc.filename) if exc.filename else root] = exc.strerror or str(exc)

    for dirpath, dirnames, filenames in os.walk(root, onerror=failed):
        yield Path(dirpath), dirnames, filenames


def unfinished_job_dirs(root: str | Path) -> list[Path]:
    """Job directories under ``root`` that Hydra created (``.hydra/``) but that have no summary."""
    root = Path(root)
    return sorted(dirpath for dirpath, dirnames, _ in _walk(root, {})
                  if ".hydra" in dirnames and not (dirpath / SUMMARY_FILE).is_file())


def unfinished_record(job_dir: str | Path) -> RunRecord:
    """A :class:`RunRecord` for a job directory without a summary (status ``unfinished``), with the
    overrides Hydra recorded in its ``.hydra/overrides.yaml``."""
    job_dir = Path(job_dir)
    return RunRecord(path=job_dir, summary={"status": "unfinished"}, overrides=_overrides_from_hydra_dir(job_dir))


#: One directory, or several, to look for runs under (``corral results A B``).
Roots = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


@dataclass
class FoundRuns:
    """What lies under the directories given to ``corral results`` / ``corral plot``: every run (a
    directory with ``summary.json``) and every job directory without one, each once, in the order
    the directories were given, each directory's in job order."""

    roots: list[Path]
    runs: list[RunRecord]
    unfinished: list[Path]
    #: The directories given under which nothing was found (no run, no job directory).
    empty: list[Path] = field(default_factory=list)
    #: Directories under them that could not be listed (no permission), with why: a run in one is not found.
    unlistable: dict[Path, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """The directories, for a message: ``sweep`` or ``sweep, run2``."""
        return ", ".join(str(r) for r in self.roots)

    @property
    def completed(self) -> list[RunRecord]:
        """The runs whose status is ``completed``."""
        return [r for r in self.runs if r.status == "completed"]

    def skipped(self) -> list[str]:
        """``<path> (<why>)`` for every run that did not complete and every unfinished job directory."""
        # A directory that holds nothing, beside others that do (when none does, the command says so itself).
        empty = [f"{p} (no run under it: no summary.json, no job directory)" for p in self.empty
                 ] if self.runs or self.unfinished else []
        unlistable = [f"{p} (unreadable: cannot list it: {why}; a run in it is left out: give read access to it)"
                      for p, why in self.unlistable.items()]
        return ([f"{r.path} ({why_not_completed(r)})" for r in self.runs if r.status != "completed"]
                + [f"{p} (no summary.json: unfinished)" for p in self.unfinished] + unlistable + empty)

    def status_counts(self) -> str:
        """``"1 failed, 2 unfinished"``: see :func:`status_counts` (a directory that cannot be listed
        counts as ``unreadable``)."""
        counts = status_counts(self.runs, len(self.unfinished))
        if self.unlistable:
            counts = ", ".join(filter(None, [counts, f"{len(self.unlistable)} unreadable director"
                                                     f"{'y' if len(self.unlistable) == 1 else 'ies'}"]))
        return counts


def root_paths(roots: Roots) -> list[Path]:
    """``roots`` (one directory or several) as a list of paths."""
    return [Path(roots)] if isinstance(roots, (str, os.PathLike)) else [Path(r) for r in roots]


def find_runs_under(roots: Roots) -> FoundRuns:
    """The :class:`FoundRuns` under ``roots`` (one directory or several). A run directory given twice,
    or found again under another of the directories, counts once. Raises, before any is read, as
    :func:`check_root` does for the first directory that does not exist or is a file."""
    given = root_paths(roots)
    for root in given:
        check_root(root)
    runs: list[RunRecord] = []
    unfinished: list[Path] = []
    seen: set[Path] = set()
    empty: list[Path] = []
    unlistable: dict[Path, str] = {}
    for root in given:
        found = [*find_runs(root, unlistable)]
        jobs = [*unfinished_job_dirs(root)]
        if not found and not jobs and not any(p == root or root in p.parents for p in unlistable):
            empty.append(root)
        for run in found:
            if (key := run.path.resolve()) not in seen:
                seen.add(key)
                runs.append(run)
        for job in jobs:
            if (key := job.resolve()) not in seen:
                seen.add(key)
                unfinished.append(job)
    return FoundRuns(roots=given, runs=runs, unfinished=unfinished, empty=empty, unlistable=unlistable)


def status_counts(runs: Iterable[RunRecord], n_unfinished: int = 0) -> str:
    """``"2 failed, 1 interrupted, 1 unfinished"``: how many of ``runs`` have each status, in the
    order first seen, then the ``n_unfinished`` job directories without a summary."""
    counts = Counter([r.status for r in runs] + ["unfinished"] * n_unfinished)
    return ", ".join(f"{n} {status}" for status, n in counts.items())


__all__ = [
    "PROGRESS_FILE",
    "SUMMARY_FILE",
    "FoundRuns",
    "Roots",
    "RunRecord",
    "check_root",
    "find_runs",
    "find_runs_under",
    "looks_like_run",
    "parse_overrides",
    "read_run",
    "root_paths",
    "status_counts",
    "unfinished_job_dirs",
    "unfinished_record",
    "why_not_completed",
    "write_summary",
]
