"""Whether a directory can be created where a run or a command is about to write, before it starts.

A path that cannot be written (under a file, on a file system that takes no new directory, on a
read-only mount) would otherwise stop a run or an evaluation with an ``OSError`` traceback, after
the work it was to keep was done. :func:`directory_problem` finds that in advance, for the one-line
errors of ``train.py`` (``hydra.run.dir``) and ``corral eval`` (``--video``, ``-o``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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


__all__ = ["directory_problem"]
