"""The public exception tree of corral."""

from __future__ import annotations


class CorralError(Exception):
    """Base class of every error corral raises on purpose."""


class PluginError(CorralError):
    """A plugin failed to load or register, or two plugins clash."""


class ConfigError(CorralError, ValueError):
    """A configuration value or a combination of choices is invalid."""


class BatchError(CorralError, ValueError):
    """An EpisodeBatch was built from inconsistent arrays."""


class WorkerError(CorralError):
    """A sampling worker failed: it raised, died or stopped answering.

    Attributes:
        worker_number: index of the failed worker.
        exitcode: process exit code (negative: killed by that signal), if known.
        remote_traceback: the worker's own formatted traceback, if it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        worker_number: int | None = None,
        exitcode: int | None = None,
        remote_traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.worker_number = worker_number
        self.exitcode = exitcode
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        text = super().__str__()
        if self.remote_traceback:
            text += "\n\nWorker traceback:\n" + self.remote_traceback.rstrip()
        return text


class SnapshotError(CorralError):
    """A snapshot could not be written, found or restored."""
