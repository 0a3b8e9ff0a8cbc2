"""What the experiment-tracker loggers (``logger=wandb``, ``logger=mlflow``) share.

Not an option of its own (the leading underscore keeps it out of the ``logger=`` names): the Hydra
job a run belongs to (its run name and sweep), the tracker's run id kept in the run directory so
``trainer.resume`` of that directory continues the same tracker run (a branch into a new directory
starts its own), the resolved config flattened to ``a.b.c`` keys,
and the guard that turns any tracker failure into one warning while training goes on.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from corral.framework.errors import CorralWarning
from corral.results.writable import write_atomically


class TrackerWarning(CorralWarning):
    """An experiment tracker failed; the run goes on without it."""


@dataclass
class JobInfo:
    """The Hydra job of a run (defaults outside Hydra: library use)."""

    name: str = "corral"
    num: int | None = None
    override_dirname: str = ""
    multirun: bool = False
    sweep_dir: str | None = None
    output_dir: str | None = None

    def run_name(self) -> str:
        """``corral algo=ppo,seed=2`` for a single run, ``corral#3 algo=ppo,seed=2`` for job 3 of a multirun."""
        head = f"{self.name}#{self.num}" if self.multirun and self.num is not None else self.name
        return f"{head} {self.override_dirname}".strip()

    def sweep_group(self) -> str | None:
        """The sweep a multirun job belongs to: the last two parts of ``hydra.sweep.dir``
        (``2026-11-25/10-00-00`` for Hydra's default ``multirun/<date>/<time>``); None for a single run."""
        if not self.multirun or not self.sweep_dir:
            return None
        parts = Path(self.sweep_dir).parts
        return "/".join(parts[-2:]) if parts else None


def hydra_job() -> JobInfo:
    """The current Hydra job, read from ``HydraConfig`` (``JobInfo()`` when not under Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        hc: Any = HydraConfig.get()  # a DictConfig at run time (`.get`), typed as the HydraConf dataclass
    except (ImportError, ValueError):
        return JobInfo()
    multirun = str(hc.mode).rsplit(".", 1)[-1] == "MULTIRUN"
    num = hc.job.get("num")
    return JobInfo(
        name=str(hc.job.name or "corral"),
        num=int(num) if num is not None else None,
        override_dirname=str(hc.job.get("override_dirname") or ""),
        multirun=multirun,
        sweep_dir=str(hc.sweep.dir) if multirun and hc.sweep.get("dir") else None,
        output_dir=str(hc.runtime.output_dir) if hc.runtime.get("output_dir") else None,
    )


@dataclass
class PreviousRun:
    """What a run directory's tracker record says before the run starts.

    ``record``: the tracker run this directory logged to before (a run resumed in place continues it),
    and ``logged_through``: the last epoch it logged there (a resumed run's epochs up to it are in the
    tracker already, and a resume is exact, so they are not logged twice). ``branched_from``: the run
    id of a record that belongs to another directory: a branch (``trainer.resume=<run>
    hydra.run.dir=<new>``) copies the original's files, and it must start a tracker run of its own,
    or it would write its epochs into the original's (which the branch leaves as it was)."""

    record: dict[str, Any] | None = None
    branched_from: str | None = None

    @property
    def logged_through(self) -> int | None:
        """The last epoch the continued tracker run holds (None: none, or not known)."""
        value = (self.record or {}).get("logged_through")
        return int(value) if isinstance(value, int) else None


def previous_run(log_dir: Path | None, filename: str) -> PreviousRun:
    """The tracker record ``filename`` (JSON) in ``log_dir``, read as :class:`PreviousRun`."""
    if log_dir is None:
        return PreviousRun()
    path = log_dir / filename
    try:
        data = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or not data.get("run_id"):
        return PreviousRun()
    owner = data.get("run_dir")
    if owner is not None and Path(str(owner)) != log_dir.resolve():
        return PreviousRun(branched_from=str(data["run_id"]))
    return PreviousRun(record=data)


def write_run_record(log_dir: Path | None, filename: str, record: Mapping[str, Any]) -> None:
    """Keep the tracker's run id in the run directory (so ``trainer.resume=<this dir>`` finds it),
    with the directory it belongs to (a branch's copy of it is not its own)."""
    if log_dir is None:
        return
    log_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps({**dict(record), "run_dir": str(log_dir.resolve())}, indent=2) + "\n"
    write_atomically(log_dir / filename, lambda f: f.write(text), text=True)


def resolved_config(cfg: Any) -> dict[str, Any]:
    """The run's composed config as a plain, resolved dictionary (``{}`` without one)."""
    if cfg is None:
        return {}
    from omegaconf import DictConfig, OmegaConf

    data: Any = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"algo": {"lr": 0.1}}`` -> ``{"algo.lr": 0.1}``; lists and scalars are leaves."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


class Guard:
    """``with guard("logging metrics"):`` runs tracker calls; the first failure becomes one
    :class:`TrackerWarning` and switches the guard off (``guard.failed``), later calls are skipped.

    The warning names the tracker, what it was doing, the root cause (``Connection refused`` rather
    than the HTTP client's page of retries) and ``hint``, what to check. While the block runs, the
    HTTP client's own retry warnings are held back: the one warning reports the outcome.
    """

    def __init__(self, tracker: str, hint: str = "") -> None:
        self.tracker = tracker
        self.hint = hint
        self.failed = False
        self._action = ""
        self._quieted: list[tuple[logging.Logger, int]] = []

    def __call__(self, action: str) -> "Guard":
        self._action = action
        return self

    def __enter__(self) -> "Guard":
        self._quieted = []
        for name in _HTTP_RETRY_LOGGERS:
            log = logging.getLogger(name)
            self._quieted.append((log, log.level))
            log.setLevel(logging.ERROR)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        for log, level in self._quieted:
            log.setLevel(level)
        if exc is None or not isinstance(exc, Exception):
            return False  # KeyboardInterrupt and friends still stop the run
        if not self.failed:
            self.failed = True
            hint = f"; {self.hint}" if self.hint else ""
            warnings.warn(
                f"{self.tracker} logger failed while {self._action} ({failure_reason(exc)}); "
                f"training goes on without {self.tracker}{hint}",
                TrackerWarning,
                stacklevel=2,
            )
        return True


_HTTP_RETRY_LOGGERS = ("urllib3.connectionpool",)  # logs a warning per retry of a failed request


def failure_reason(exc: BaseException) -> str:
    """What went wrong, in a few words: the operating-system error at the root of ``exc``
    (``ConnectionRefusedError: Connection refused``), found through its causes, contexts and an
    HTTP client's ``reason``; otherwise the first line of ``exc`` itself, shortened."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        reason = getattr(current, "reason", None)
        current = current.__cause__ or current.__context__ or (reason if isinstance(reason, BaseException) else None)
    for error in reversed(chain):
        if isinstance(error, OSError) and error.strerror:
            where = f": {error.filename}" if error.filename else ""
            return f"{type(error).__name__}: {error.strerror}{where}"
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if len(first) > 300:
        first = first[:300].rsplit(" ", 1)[0] + " ..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


__all__ = ["Guard", "JobInfo", "PreviousRun", "TrackerWarning", "failure_reason", "flatten", "hydra_job",
           "previous_run", "resolved_config", "write_run_record"]
