"""The argument parser of corral's subcommands (``corral eval``, ``results``, ``plot``, ``plugins``).

argparse prints the whole usage block before a mistake's line; corral's commands say what is wrong
in one line, as every other error of theirs does, and point at ``--help`` for the usage.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class CommandParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose errors are one line on stderr and exit code 2:
    ``corral eval: error: argument --episodes: invalid int value: 'x' (`corral eval --help` shows
    the usage)``."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` as one ``<prog>: error:`` line and exit with code 2."""
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (`{self.prog} --help` shows the usage)\n")


__all__ = ["CommandParser"]
