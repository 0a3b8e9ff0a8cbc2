"""Writing a run's files safely: whether a directory can be created where a run or a command is
about to write, before it starts, and writing a file so that no reader sees half of it.

A path that cannot be written (under a file, on a file system that takes no new directory, on a
read-only mount) would otherwise stop a run or an evaluation with an ``OSError`` traceback, after
the work it was to keep was done. :func:`directory_problem` finds that in advance, for the one-line
errors of ``train.py`` (``hydra.run.dir``) and ``corral eval`` (``--video``, ``-o``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Any, Callable


def directory_problem(target: str | os.PathLike[str]) -> str | None:
    """Why the directory ``target`` could not be created (or written into, when it exists), or None
    when it can. The check makes and removes one empty directory in ``target``'s nearest existing
    ancestor, so it sees what the operating system says (a permission, a read-only or special file
    system) rather than guessing from file modes."""
    path = Path(target).expanduser().absolute()
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is a file, not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".corral-check-", dir=ancestor))
    except OSError as exc:
        return f"{ancestor} takes no new directory ({exc.strerror or exc})"
    return None


def write_atomically(path: str | os.PathLike[str], write: Callable[[IO[Any]], object], *, text: bool = False) -> None:
    """Write ``path`` through ``write(file)``: into a temporary file beside it, flushed and fsynced,
    then renamed over ``path``, so a reader (or a kill) sees the old file or the new one, never half.
    A write that fails (a full disk) leaves no temporary file behind, and its ``OSError`` names
    ``path`` (``write()`` gives none). ``text``: open in text mode
    (newlines untranslated, as the csv module wants), else binary."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", newline="") if text else open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        named = exc if isinstance(exc, OSError) else exc.__context__  # torch.save raises while handling it
        if isinstance(named, OSError) and not named.filename:
            named.filename = str(path)  # a failed write() names no file: the one being written
        raise


__all__ = ["directory_problem", "write_atomically"]
