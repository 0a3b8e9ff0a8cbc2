"""``sampler=alternating``: the action server with two groups of workers served in turn.

rlpyt's alternating sampler: the workers are split into two groups (the first ``ceil(n/2)``
workers, then the rest). While the server runs one group's batched forward pass, the other
group's workers step their environments, so inference and simulation overlap. Each group has its
own copy of the policy on the server, holding that group's recurrent state and noise streams, so
neither group's state is swapped in and out on every step.

Everything else (options, episodes, failures, shutdown) is the action-server sampler's
(:mod:`corral.plugins.samplers.action_server`); with the same seed, worker type and number of
workers, the episodes equal the local sampler's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral import hookimpl
from corral.plugins.samplers.action_server import (
    ActionServerSampler,
    ActionServerSamplerConfig,
)


@dataclass
class AlternatingSamplerConfig(ActionServerSamplerConfig):
    """Settings of the alternating sampler (the action server's; n_workers must be at least 2)."""


class AlternatingSampler(ActionServerSampler):
    """:class:`~corral.plugins.samplers.action_server.ActionServerSampler` with two groups of
    workers whose stepping and forward passes alternate (``n_workers >= 2``)."""

    n_groups = 2
    option_name = "alternating"


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``sampler=alternating``."""
    register("sampler", "alternating", AlternatingSampler, config=AlternatingSamplerConfig,
             help="action server with two groups of workers: one group steps while the other's forward pass runs")
