"""Overrides that corral prints for the user to paste into a shell, written so they read back exactly.

A line such as ``resume with trainer.resume=<run dir>`` is only useful if pasting it works for every
directory a run can have. Two readers come between the paste and the config: the shell splits the
line into words (a space, a quote or ``$`` would cut or change a path), then Hydra's override grammar
reads each ``key=value`` (it refuses a space or a non-ASCII letter unquoted, splits a sweep at ``,``,
types ``1`` or ``null``), and OmegaConf resolves ``${...}`` in the value. :func:`hydra_override` writes
``key=value`` for Hydra (for :func:`shlex.join`), :func:`shell_override` the whole shell word, and
:func:`value_of` reads such a value back from a command line. A plain path (ASCII letters, digits,
``/ . _ - +``) stays as it is: ``trainer.resume=/tmp/x/live``.
"""

from __future__ import annotations

import functools
import re
import shlex
from typing import Any

#: A value Hydra takes as it is, when it also reads back as a string (not ``1``, ``true`` or ``null``).
_PLAIN = re.compile(r"[A-Za-z0-9_/.+-]+")
#: A run of backslashes before ``${``: OmegaConf reads ``\${`` as a literal ``${``, ``\\`` before it as one ``\``.
_BEFORE_INTERPOLATION = re.compile(r"(\\*)\$\{")
#: The same, escaped (``\${``, after an even number of backslashes of its own).
_ESCAPED_INTERPOLATION = re.compile(r"((?:\\\\)*)\\\$\{")
#: An interpolation OmegaConf would resolve: ``${`` after an even number of backslashes (none included).
_LIVE_INTERPOLATION = re.compile(r"(?<!\\)(?:\\\\)*\$\{")
#: A run of backslashes before a double quote, or at the end: Hydra's quoted strings escape only those.
_BEFORE_QUOTE = re.compile(r'(\\*)("|\Z)')


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _reads_back(value: str) -> bool:
    """True when Hydra reads the unquoted ``value`` as exactly that string."""
    try:
        parsed = _parser().parse_override(f"k={value}").value()
    except Exception:  # noqa: BLE001 - Hydra refuses it unquoted
        return False
    return isinstance(parsed, str) and parsed == value


def hydra_value(value: Any) -> str:
    """``value`` (its ``str``) written in Hydra's override grammar so that the config holds exactly
    that string: as it is when plain (``/tmp/x/live``), otherwise in double quotes
    (``"/tmp/runs ü/live"``), with a backslash before each ``${`` (which OmegaConf would resolve) and
    the backslashes Hydra's quoted strings need before a ``"`` and at the end."""
    text = str(value)
    if _PLAIN.fullmatch(text) and _reads_back(text):
        return text
    text = _BEFORE_INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", text)
    return '"' + _BEFORE_QUOTE.sub(lambda m: m.group(1) * 2 + ("\\" + m.group(2) if m.group(2) else ""), text) + '"'


def hydra_override(key: str, value: Any) -> str:
    """The Hydra override ``key=value`` that sets ``key`` to exactly ``str(value)`` (a word for
    :func:`shlex.join`; :func:`shell_override` for one to print on its own)."""
    return f"{key}={hydra_value(value)}"


def shell_override(key: str, value: Any) -> str:
    """:func:`hydra_override` as one shell word: pasted into a POSIX shell, Hydra gets ``key`` set to
    exactly ``str(value)`` (``trainer.resume=/tmp/x/live``, ``'trainer.resume="/tmp/runs ü/live"'``)."""
    return shlex.quote(hydra_override(key, value))


def value_of(text: str) -> str | None:
    """The string a config holds for the value ``text`` of a Hydra ``key=text`` override (quotes
    and escapes taken off, the inverse of :func:`hydra_value`); None when it is not one string
    (a sweep, a list, a number, null, an interpolation OmegaConf resolves, or what Hydra refuses)."""
    try:
        parsed = _parser().parse_override(f"k={text}").value()
    except Exception:  # noqa: BLE001 - Hydra refuses it: not a value read here
        return None
    if not isinstance(parsed, str) or _LIVE_INTERPOLATION.search(parsed):
        return None
    return _ESCAPED_INTERPOLATION.sub(lambda m: m.group(1)[: len(m.group(1)) // 2] + "${", parsed)


__all__ = ["hydra_override", "hydra_value", "shell_override", "value_of"]
