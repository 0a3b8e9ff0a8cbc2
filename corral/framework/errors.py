"""The public exception tree of corral, and its warnings for the person running it."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import warnings
from types import CodeType
from typing import Container, Iterator, TextIO


class CorralWarning(UserWarning):
    """Base class of the warnings corral gives the person running it (a skipped plugin, a tracker
    that went quiet). The command-line entry points print each as one ``corral: warning: ...`` line
    (:func:`warnings_as_lines`); library users and tests see ordinary warnings."""


@contextlib.contextmanager
def warnings_as_lines(stream: TextIO | None = None) -> Iterator[None]:
    """Print each :class:`CorralWarning` raised in the block, when it is raised, as one
    ``corral: warning: <message>`` line (on stderr by default) instead of Python's warning format
    with its file name and source line. Every one is shown (no once-per-location filter: the code
    that warns decides how often). Other warnings, which the filters decide on as before, are one line
    each too when Python would print them in its own format
    (:func:`corral.framework.warning_lines.show_warning_line`: ``warning: gymnasium
    (envs/registration.py:123): UserWarning: message``); a ``warnings.showwarning`` installed by someone
    else (``logging.captureWarnings``, a test's recorder) still shows them."""
    from corral.framework.warning_lines import is_pythons_own, show_warning_line

    with warnings.catch_warnings():  # restores the filters and warnings.showwarning afterwards
        warnings.simplefilter("always", CorralWarning)
        shown = show_warning_line if is_pythons_own(warnings.showwarning) else warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            if issubclass(category, CorralWarning):
                print(f"corral: warning: {message}", file=stream if stream is not None else sys.stderr, flush=True)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


class CorralError(Exception):
    """Base class of every error corral raises on purpose."""


class PluginError(CorralError):
    """A plugin failed to load or register, or two plugins clash."""


class PluginHookError(PluginError):
    """A plugin's hook implementation raised an exception of its own (not a corral error): the
    message names the plugin, the hook and the exception; ``plugin_traceback`` is the traceback
    from the plugin's implementation down to where it raised."""

    def __init__(self, message: str, *, plugin: str, hook: str, plugin_traceback: str | None = None) -> None:
        super().__init__(message)
        self.plugin = plugin
        self.hook = hook
        self.plugin_traceback = plugin_traceback


class ComponentError(PluginError):
    """A component chosen on the command line (``env=``, ``sampler=``, a logger, ...) raised an
    exception of its own (not a corral error) while it was built: its factory, its config dataclass,
    its constructor. The message names the option, the plugin that registered it (corral's own: a
    bug in corral) and where it raised; the exception is the ``__cause__``."""

    def __init__(self, message: str, *, kind: str, name: str, plugin: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name
        self.plugin = plugin


class ConfigError(CorralError, ValueError):
    """A configuration value or a combination of choices is invalid."""


class SweepSettingError(ConfigError):
    """A setting of the sweep itself (``hydra.sweeper.*``) that a job found wrong: every job would
    fail on it alike, so the sweep stops at the first job that reports it instead of running the rest."""


class SweepError(CorralError):
    """A sweep as a whole came to nothing: e.g. every trial of an Optuna search failed."""


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

    @property
    def message(self) -> str:
        """The error's line, without the worker's traceback."""
        return super().__str__()

    def traceback_from_caller(self) -> str | None:
        """The worker's traceback without its leading frames in corral's own code (the sampler and
        the worker that called the environment, the same for every run), so it starts where the
        code that raised was entered: the environment, a wrapper, a policy of a plugin. The whole
        traceback when every frame is corral's (then corral itself raised). None without one."""
        if not self.remote_traceback:
            return None
        lines = self.remote_traceback.rstrip().splitlines()
        frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
        package = os.path.dirname(os.path.abspath(__file__)).rsplit(os.sep, 1)[0] + os.sep
        first_other = next((i for i in frames if not lines[i][len('  File "'):].startswith(package)), None)
        if first_other is None or first_other == frames[0]:
            return "\n".join(lines)
        skipped = sum(1 for i in frames if i < first_other)
        head = lines[:frames[0]]
        return "\n".join([*head, f"  ... {skipped} frame(s) in corral's sampler and worker ...", *lines[first_other:]])


def error_report(exc: BaseException, prefix: str = "corral: error: ", lead: str = "") -> str:
    """What a command prints for a corral error: ``lead``, ``prefix`` and its message. For a worker
    that raised, the worker's traceback (:meth:`WorkerError.traceback_from_caller`, each line after
    ``lead``, e.g. a sweep job's ``[job 3] ``) comes first and the error's line last, so the line is
    the last thing on the screen."""
    if isinstance(exc, WorkerError) and (tb := exc.traceback_from_caller()) is not None:
        shown = "\n".join(f"{lead}{line}" for line in tb.splitlines())
        return f"{shown}\n{lead}{prefix}{exc.message}; the traceback above shows where it raised"
    shown_traceback = (exc.plugin_traceback if isinstance(exc, PluginHookError)
                       else exc.algorithm_traceback if isinstance(exc, AlgorithmError) else None)
    if shown_traceback:
        shown = "\n".join(f"{lead}{line}" for line in shown_traceback.rstrip().splitlines())
        return f"{shown}\n{lead}{prefix}{exc}"
    return f"{lead}{prefix}{exc}"


def raised_within(exc: BaseException, codes: Container[CodeType]) -> bool:
    """Whether ``exc`` was raised while one of the functions whose code objects are ``codes`` ran:
    a frame of one of them is on ``exc``'s traceback (between where it was caught and where it was
    raised)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then the error it was raised from or while handling, and so on, nearest first (each
    once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def os_error_in(exc: BaseException) -> OSError | None:
    """The :class:`OSError` behind ``exc``: ``exc`` itself, or one it was raised from or while
    handling, nearest first (:func:`exception_chain`). A library may turn a full disk into an error
    of its own: ``torch.save`` raises ``RuntimeError: [enforce fail at inline_container.cc:...]
    unexpected pos ...`` while handling the ``OSError: [Errno 28] No space left on device`` of its
    write. None when there is none."""
    return next((e for e in exception_chain(exc) if isinstance(e, OSError)), None)


#: The ``errno`` values of a file system that takes no more of what a command writes: full, over
#: quota, a file over the size limit (``ulimit -f``), read-only.
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def no_room_error(exc: BaseException) -> OSError | None:
    """The :class:`OSError` behind ``exc`` (:func:`os_error_in`) when it says the file system takes no
    more (:data:`NO_ROOM_ERRNOS`), else None."""
    problem = os_error_in(exc)
    return problem if problem is not None and problem.errno in NO_ROOM_ERRNOS else None


class SnapshotError(CorralError):
    """A snapshot could not be written, found or restored."""


class EnvironmentValueError(CorralError, ValueError):
    """An environment returned what no algorithm can learn from: a NaN or infinite observation or reward."""


class TrainingDivergedError(CorralError, ArithmeticError):
    """An algorithm's update produced NaN or infinite values (a loss, the policy's parameters):
    training diverged. The run stops before it samples with them; the epoch is not part of it."""


class AlgorithmError(CorralError):
    """An algorithm's update raised an exception of its own (not a corral error, not NaNs): the
    message names the algorithm, the epoch and the exception; ``algorithm_traceback`` is the
    traceback from the update's call down to where it raised, shown above the line."""

    def __init__(self, message: str, *, algorithm_traceback: str | None = None) -> None:
        super().__init__(message)
        self.algorithm_traceback = algorithm_traceback


class OutputError(CorralError):
    """The run could not write what it keeps (a logger's row, a snapshot): a full disk, a permission,
    a path that cannot be written. The run stops at that epoch, which is not part of it."""
