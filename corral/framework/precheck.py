"""Check a ``train.py`` command line before Hydra starts the run: one message style for every config mistake.

``python train.py <overrides>`` composes the config once here, with Hydra's compose API, and checks
every value (:func:`corral.framework.compose.check_values`) before Hydra creates a run directory
or anything is built. Hydra's own composition errors (a value of the wrong type, an unknown option,
an override that does not parse) become the same one-paragraph ``corral: error: ...`` (exit status
2) as corral's range errors, instead of Hydra's format.

Skipped when the command line has flags (``--help``, ``--cfg``, ``-m`` and such: Hydra handles
those, and a sweep is checked job by job) or resumes a run (``trainer.resume``: the run's own
config is used, see :mod:`corral.framework.resume`).
"""

from __future__ import annotations

from typing import Sequence

from corral.framework.config import CONFIG_MODULE, CONFIG_NAME
from corral.framework.errors import ConfigError


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def precheck(args: Sequence[str]) -> None:
    """Compose ``args`` as ``train.py`` will and check every value; raise :class:`ConfigError` with a
    one-line message (Hydra's list of available options kept) when anything is wrong, and print one
    ``corral: warning:`` line for each value the command line set that the run would ignore."""
    if any(a.startswith("-") for a in args) or any(_key(a) == "trainer.resume" for a in args):
        return
    overrides = [a for a in args if not _key(a).startswith(("hydra.", "hydra/")) and _key(a) != "hydra"]
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from corral.framework.compose import check_values, warn_ignored

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose(config_name=CONFIG_NAME, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(hydra_message(exc)) from None
    finally:
        GlobalHydra.instance().clear()
    check_values(cfg)
    warn_ignored(cfg, given_keys(overrides))


def given_keys(overrides: Sequence[str]) -> set[str]:
    """The dotted keys a list of overrides sets (``+algo.x=1`` and ``algo.x=1`` both give ``algo.x``;
    ``algo=ppo`` gives ``algo``)."""
    return {_key(o) for o in overrides if "=" in o}


def hydra_message(exc: BaseException) -> str:
    """Hydra's composition error as one paragraph: the override and the reason (``worker.n_envs=abc:
    Value 'abc' of type 'str' could not be converted to Integer``); multi-line lists (available
    options) are kept, Hydra's hint about HYDRA_FULL_ERROR is dropped."""
    text = str(exc).strip()
    cause = exc.__cause__
    if text.startswith("Error merging override ") and cause is not None:
        reason = str(getattr(cause, "msg", None) or cause).strip().splitlines()[0]
        return f"{text.removeprefix('Error merging override ')}: {reason}"
    override = getattr(exc, "override", None)
    if override and str(override) not in text:  # a parse error: name the override that does not parse
        text = f"{override}: {text}"
    text = text.split("\nConfig search path:", 1)[0]  # Hydra's search path adds nothing for a user
    lines = [line for line in text.splitlines() if "HYDRA_FULL_ERROR" not in line]
    return "\n".join(lines).strip()


__all__ = ["given_keys", "hydra_message", "precheck"]
