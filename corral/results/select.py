"""Keeping only some runs: ``corral results --only KEY=VAL ...`` and ``corral plot --only KEY=VAL ...``.

A run is kept when, for every key given, its Hydra overrides set that key to one of the values given
for it (``--only algo=ppo algo=vpg seed=1``: ppo or vpg, and seed 1). Values match as text, or as
numbers when both are numbers (``algo.lr=1e-3`` keeps a run of ``algo.lr=0.001``). A key that no run
overrides, a value that no run has, or values that no run has together is a ``ValueError`` that says
what the runs do have, so a typo is one line rather than an empty table or plot.
"""

from __future__ import annotations

import difflib
from dataclasses import replace
from typing import Sequence

from corral.results.summary import FoundRuns, RunRecord, unfinished_record

#: ``{key: [value, ...]}``: the values each key may have (any of them).
Only = dict[str, list[str]]


def parse_only(items: Sequence[str]) -> Only:
    """``["algo=ppo", "algo=vpg", "seed=1"]`` -> ``{"algo": ["ppo", "vpg"], "seed": ["1"]}`` (``+``/``~``
    prefixes of a key dropped, as the runs' own overrides are read). Raises ``ValueError`` for an item
    that is not ``KEY=VALUE``."""
    only: Only = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("+~")
        if not sep or not key:
            raise ValueError(f"--only {item}: give KEY=VALUE, an override the runs were started with "
                             "(--only algo.learning_rate=0.001 seed=1)")
        values = only.setdefault(key, [])
        if value not in values:
            values.append(value)
    return only


def same_value(given: str, value: str) -> bool:
    """Whether an override's ``value`` is the ``given`` one: the same text, or the same number."""
    if given == value:
        return True
    try:
        return float(given) == float(value)
    except ValueError:
        return False


def matches(overrides: dict[str, str], only: Only) -> bool:
    """Whether a run of these overrides is kept: every key of ``only`` set to one of its values."""
    return all(k in overrides and any(same_value(v, overrides[k]) for v in vs) for k, vs in only.items())


def describe(only: Only) -> str:
    """``algo=ppo algo=vpg seed=1``: the selection as it is typed after ``--only``."""
    return " ".join(f"{k}={v}" for k, vs in only.items() for v in vs)


def select_runs(found: FoundRuns, only: Only) -> FoundRuns:
    """``found`` with only the runs and unfinished job directories that :func:`matches` keeps (``only``
    empty: ``found`` itself). Raises ``ValueError`` when a key of ``only`` is one no run overrides, one
    of its values is one no run has, or no run has them all together, naming what the runs have."""
    if not only:
        return found
    records: list[RunRecord] = [*found.runs, *(unfinished_record(p) for p in found.unfinished)]
    dicts = [r.override_dict() for r in records]
    check_selection(only, dicts, found.where)
    runs = [r for r in found.runs if matches(r.override_dict(), only)]
    unfinished = [p for p in found.unfinished if matches(unfinished_record(p).override_dict(), only)]
    return replace(found, runs=runs, unfinished=unfinished)


def check_selection(only: Only, dicts: Sequence[dict[str, str]], where: str) -> None:
    """Raise ``ValueError`` unless each key and value of ``only`` is among ``dicts`` (the runs' overrides)
    and some run has them all (see :func:`select_runs`)."""
    overridden: list[str] = []
    for d in dicts:
        overridden += [k for k in d if k not in overridden]
    for key, values in only.items():
        if key not in overridden:
            near = difflib.get_close_matches(key, overridden, n=1)
            guess = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(f"--only {key}={values[0]}: no run under {where} overrides {key}{guess}; the runs "
                             f"override: {', '.join(overridden) or 'nothing'}")
        have = _values(dicts, key)
        for value in values:
            if not any(same_value(value, v) for v in have):
                raise ValueError(f"--only {key}={value}: no run under {where} has {key}={value}; its values are "
                                 f"{', '.join(have)}")
    if len(only) > 1 and not any(matches(d, only) for d in dicts):
        *others, last = only
        rest = {k: only[k] for k in others}
        have = _values([d for d in dicts if matches(d, rest)], last)
        them = f"; the runs with {describe(rest)} have {last}={' or '.join(have)}" if have else ""
        raise ValueError(f"--only {describe(only)}: no run under {where} has them all together{them}")


def _values(dicts: Sequence[dict[str, str]], key: str) -> list[str]:
    """The values of ``key`` among ``dicts``, each once, in the order first seen."""
    return list(dict.fromkeys(d[key] for d in dicts if key in d))


__all__ = ["Only", "check_selection", "describe", "matches", "parse_only", "same_value", "select_runs"]
