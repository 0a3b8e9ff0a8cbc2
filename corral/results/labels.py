"""Legend labels of ``corral plot`` that fit beside the lines: long ones wrapped, very long ones shortened.

A group's label names every swept key (``algo.learning_rate=0.001 env.id=HalfCheetah-v4 ...``); the
keys common to all lines are already left out (:func:`corral.results.table.swept_keys`). On one line,
a label of a few long keys is wider than the axes. Each label is wrapped at its spaces into lines of
at most :data:`LABEL_WIDTH` characters (a word longer than that is broken), and a label that would
take more than :data:`LABEL_LINES` lines keeps its first lines and its end, with ``…`` between. Labels
stay unique: one whose shortened form another shares is wrapped whole instead. ``corral plot`` prints
every full label on its own line, so nothing shortened here is lost.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import Sequence

#: The most characters on one line of a legend label.
LABEL_WIDTH = 40
#: The most lines one legend label takes before it is shortened.
LABEL_LINES = 3
#: What stands for the part of a label left out.
ELLIPSIS = "…"


def wrapped(label: str, width: int = LABEL_WIDTH) -> list[str]:
    """``label`` in lines of at most ``width`` characters, broken at spaces (inside a longer word when
    it has none); an empty label is one empty line."""
    return textwrap.wrap(label, width, break_long_words=True, break_on_hyphens=False) or [""]


def short_label(label: str, width: int = LABEL_WIDTH, max_lines: int = LABEL_LINES) -> str:
    """``label`` wrapped (:func:`wrapped`) into at most ``max_lines`` lines: a longer one keeps its
    first ``max_lines - 1`` lines, then ``…`` and as much of its end as fills the last line."""
    lines = wrapped(label, width)
    if len(lines) <= max_lines:
        return "\n".join(lines)
    # the label's own end (its last value, and the run count), as much as fits one line after the ellipsis
    return "\n".join([*lines[:max_lines - 1], ELLIPSIS + label[-(width - len(ELLIPSIS)):].lstrip()])


def legend_labels(labels: Sequence[str], width: int = LABEL_WIDTH, max_lines: int = LABEL_LINES) -> list[str]:
    """:func:`short_label` of each of ``labels``, unique as ``labels`` are: a label whose shortened form
    another label's shares is wrapped whole instead (:func:`wrapped`, which leaves nothing out)."""
    short = [short_label(label, width, max_lines) for label in labels]
    counts = Counter(short)
    return [s if counts[s] == 1 else "\n".join(wrapped(label, width)) for s, label in zip(short, labels)]


__all__ = ["ELLIPSIS", "LABEL_LINES", "LABEL_WIDTH", "legend_labels", "short_label", "wrapped"]
