"""The entry point of corral-faultyplugin: mistakes a third-party author might make, on demand.

- ``env=faultyenv``: its registered factory raises ``RuntimeError`` (a bug in the plugin's env).
- ``sampler=typosampler``: its config dataclass has a field (``chunk_sise``, a typo) that the
  sampler's ``__init__`` does not take.
- ``corral_epoch_end`` adds the statistic ``audit/str = "hello"`` (not a number) from the epoch
  ``CORRAL_FAULTYPLUGIN_BAD_STAT`` names on, and numpy numbers with ``CORRAL_FAULTYPLUGIN_NUMPY_STATS``.
- ``corral_run_summary`` raises ``RuntimeError`` when ``CORRAL_FAULTYPLUGIN_SUMMARY_RAISES`` is set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corral import LocalSampler, hookimpl


@dataclass
class FaultyEnvConfig:
    """Settings of ``env=faultyenv``."""

    max_episode_length: int = field(default=200, metadata={"help": "steps per episode"})


def make_faulty_env(config: Any) -> Any:
    """An environment factory with a bug: it raises."""
    raise RuntimeError("env factory failed on purpose")


@dataclass
class TypoSamplerConfig:
    """Settings of ``sampler=typosampler``."""

    n_workers: int = field(default=1, metadata={"help": "workers, run one after another in this process"})
    chunk_sise: int = field(default=10, metadata={"help": "a typo: the sampler takes chunk_size"})


class TypoSampler(LocalSampler):
    """``sampler=local`` with a ``chunk_size`` its config misspells."""

    def __init__(self, agents: Any, envs: Any, *, chunk_size: int = 10, **kwargs: Any) -> None:
        self.chunk_size = chunk_size
        super().__init__(agents, envs, **kwargs)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``env=faultyenv`` and ``sampler=typosampler``."""
    register("env", "faultyenv", make_faulty_env, config=FaultyEnvConfig, help="an env whose factory raises")
    register("sampler", "typosampler", TypoSampler, config=TypoSamplerConfig,
             help="sampler=local whose config misspells a setting")


@hookimpl
def corral_epoch_end(trainer: Any, epoch: int, stats: dict[str, Any]) -> None:
    """Add numpy numbers (``audit/np_float``, ``audit/np_int``) when CORRAL_FAULTYPLUGIN_NUMPY_STATS is
    set, and a statistic that is not a number (``audit/str``) from the epoch CORRAL_FAULTYPLUGIN_BAD_STAT
    names on."""
    if os.environ.get("CORRAL_FAULTYPLUGIN_NUMPY_STATS"):
        stats["audit/np_float"] = np.float32(0.5)
        stats["audit/np_int"] = np.int64(epoch)
    first_bad = os.environ.get("CORRAL_FAULTYPLUGIN_BAD_STAT")
    if first_bad is not None and epoch >= int(first_bad):
        stats["audit/str"] = "hello"


@hookimpl
def corral_run_summary(log_dir: Any, summary: dict[str, Any]) -> None:
    """Raise, when CORRAL_FAULTYPLUGIN_SUMMARY_RAISES is set."""
    if os.environ.get("CORRAL_FAULTYPLUGIN_SUMMARY_RAISES"):
        raise RuntimeError("summary hook failed on purpose")
