"""The dotted keys that a command line's overrides set: what the user gave, told from the config's
defaults and presets (a warning about an ignored value names only those)."""

from __future__ import annotations

from typing import Sequence


def override_key(override: str) -> str:
    """The dotted key of one override: ``algo.x`` for ``algo.x=1``, ``+algo.x=1`` and ``~algo.x``."""
    return override.split("=", 1)[0].lstrip("+~")


def given_keys(overrides: Sequence[str]) -> set[str]:
    """The dotted keys a list of overrides sets (``+algo.x=1`` and ``algo.x=1`` both give ``algo.x``;
    ``algo=ppo`` gives ``algo``)."""
    return {override_key(o) for o in overrides if "=" in o}


def job_given_keys() -> set[str] | None:
    """The dotted keys this Hydra job's command line set (:func:`given_keys` of its overrides); None
    outside a Hydra job (the pre-run check, library use), where a given value cannot be told from a
    default. For a part that says something only about values the user gave."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return given_keys([str(o) for o in HydraConfig.get().overrides.task])
    except (ImportError, ValueError):
        return None
