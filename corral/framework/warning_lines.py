"""Other libraries' Python warnings as one line each on the command line.

Python prints a warning in two lines, ``/path/to/file.py:123: UserWarning: message`` and then the
source line that warned; every line corral prints is one line. Within :func:`corral.framework.errors.
warnings_as_lines` (``train.py``'s jobs, ``corral eval``), a warning that Python would print with
its own format is printed by :func:`show_warning_line` instead, as

    warning: gymnasium (envs/registration.py:123): UserWarning: message

(``[job 3] `` first in a sweep's job): the package and the file in it where it was raised, its
category and its message (a message of several lines joined into one). Only the format changes:
which warnings are shown is still up to the filters (``-W``, ``PYTHONWARNINGS``, the code's own), and
a ``warnings.showwarning`` that someone else installed (``logging.captureWarnings``, a test's
recorder) is left to show them.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from pathlib import Path
from typing import TextIO

from corral.framework.logger import job_prefix


def is_pythons_own(show: object) -> bool:
    """Whether ``show`` (a ``warnings.showwarning``) is Python's own and Python would print with it
    its two-line format: not when someone installed their own (``logging.captureWarnings``), nor
    inside ``warnings.catch_warnings(record=True)`` (pytest's, ``pytest.warns``), which keeps Python's
    ``showwarning`` but records the warnings instead of printing them."""
    impl = getattr(warnings, "_showwarnmsg_impl", None)
    printing = isinstance(impl, types.FunctionType) and impl.__module__ == "warnings" and \
        impl.__name__ == "_showwarnmsg_impl"
    return printing and show is getattr(warnings, "_showwarning_orig", None)


def origin(filename: str, lineno: int) -> str:
    """Where a warning was raised: ``gymnasium (envs/registration.py:123)`` for a file of a package on
    ``sys.path`` (the package, then the file's path in it), ``six (six.py:12)`` for a module there of
    its own, else the file as Python names it (``/elsewhere/x.py:7``, ``<string>:1``)."""
    if not filename or filename.startswith("<") or not os.path.isabs(filename) and not os.path.exists(filename):
        return f"{filename}:{lineno}"
    path = Path(os.path.abspath(filename))
    best: tuple[str, ...] | None = None
    for entry in sys.path:
        try:
            parts = path.relative_to(os.path.abspath(entry or os.curdir)).parts
        except ValueError:
            continue
        if parts and (best is None or len(parts) < len(best)):  # the innermost entry: site-packages in a venv
            best = parts
    if best is None:
        return f"{filename}:{lineno}"
    if len(best) == 1:
        return f"{Path(best[0]).stem} ({best[0]}:{lineno})"
    return f"{best[0]} ({'/'.join(best[1:])}:{lineno})"


def format_warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int) -> str:
    """The warning as one line (no newline at the end): ``warning: <origin>: <Category>: <message>``,
    a message of several lines joined with spaces, after :func:`job_prefix` in a sweep's job."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    return f"{job_prefix()}warning: {origin(filename, lineno)}: {category.__name__}: {text}"


def show_warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: TextIO | None = None, line: str | None = None) -> None:
    """A ``warnings.showwarning`` that prints :func:`format_warning_line` to ``file`` (stderr by
    default); the source ``line`` is not printed. Like Python's own, a stream that cannot be written
    (closed, gone) loses the warning and raises nothing."""
    stream = file if file is not None else sys.stderr
    if stream is None:  # pythonw, or stderr closed: Python's own shows nothing either
        return
    try:
        stream.write(format_warning_line(message, category, filename, lineno) + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def warnings_as_lines_here() -> None:
    """Call in a process a run starts (a sampler's worker process, a Ray actor): from now on a warning
    that Python would print in its own two lines is :func:`show_warning_line`'s one line, as in the
    job's process (:func:`corral.framework.errors.warnings_as_lines`). A ``warnings.showwarning``
    someone else installed is left as it is."""
    if is_pythons_own(warnings.showwarning):
        warnings.showwarning = show_warning_line


__all__ = ["format_warning_line", "is_pythons_own", "origin", "show_warning_line", "warnings_as_lines_here"]
