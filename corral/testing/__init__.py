"""Tools for testing samplers, workers, algorithms and plugins against corral's contracts.

- Contract suites (:mod:`corral.testing.contracts`): subclass one, set a few attributes, and
  pytest runs every check of the contract against your component::

      from corral.testing import SamplerContract

      class TestMySampler(SamplerContract):
          sampler_class = MySampler

- Fixtures (:mod:`corral.testing.plugin`, a pytest plugin loaded automatically through the
  ``pytest11`` entry point): ``corral_compose``, ``corral_build``, ``corral_inline_plugin``; and
  their plain-Python forms :func:`compose_config`, :func:`build_run`, :func:`inline_plugin`.
- Faulty environments for failure tests (:mod:`corral.testing.faulty_envs`).
- Leak checks (:mod:`corral.testing.processes`): child processes, descendants, ``/dev/shm``
  entries, bounded waits for processes to exit; children started for signal tests
  (:func:`started_session`, :func:`interruptible`) that do not depend on how the suite was
  launched and are cleaned up even when a test times out; :func:`import_path` loads a script by path.

Names are imported on first use, so ``import corral.testing`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "SamplerContract": "corral.testing.contracts",
    "WorkerContract": "corral.testing.contracts",
    "AlgorithmContract": "corral.testing.contracts",
    "EnvContract": "corral.testing.contracts",
    "LoggerContract": "corral.testing.contracts",
    "ConfigContract": "corral.testing.contracts",
    "compose_config": "corral.testing.plugin",
    "build_run": "corral.testing.plugin",
    "inline_plugin": "corral.testing.plugin",
    "child_processes": "corral.testing.processes",
    "descendants": "corral.testing.processes",
    "process_alive": "corral.testing.processes",
    "shm_entries": "corral.testing.processes",
    "wait_gone": "corral.testing.processes",
    "wait_for_path": "corral.testing.processes",
    "started_session": "corral.testing.processes",
    "stop_session": "corral.testing.processes",
    "interruptible": "corral.testing.processes",
    "default_signal_dispositions": "corral.testing.processes",
    "import_path": "corral.testing.modules",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'corral.testing' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
