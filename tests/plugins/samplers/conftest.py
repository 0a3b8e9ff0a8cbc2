"""Fixtures of the sampler tests."""

from __future__ import annotations

import os
from typing import Iterator

import pytest


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[None]:
    """One Ray runtime for the module (the samplers must not shut it down); one already running is
    used as it is. Only for modules that need Ray (they skip without it)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False,
                 log_to_driver=False)
    yield
    if started:
        ray.shutdown()
