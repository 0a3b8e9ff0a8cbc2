"""Points where a sweep's own process waits, for tests/launchers/test_sweep_stopped_anywhere.py (on ``PYTHONPATH``):
each writes the file named by ``CORRAL_TEST_PAUSED`` when it gets there, then sleeps (a minute at most), so the
test can signal the sweep's process at that moment."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

#: The environment variable naming the file written on arrival.
PAUSED_ENV = "CORRAL_TEST_PAUSED"
#: Most seconds a pause lasts.
PAUSE_S = 60.0


def pause(where: str) -> None:
    """Write ``where`` to the file of :data:`PAUSED_ENV`, then sleep :data:`PAUSE_S` seconds."""
    Path(os.environ[PAUSED_ENV]).write_text(f"{where} {os.getpid()}\n")
    time.sleep(PAUSE_S)


class PauseAtStart(Callback):
    """A Hydra callback: the sweep pauses once Hydra has composed it, before its sweeper asks for a job."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        pause("multirun start")


try:
    import optuna
except ImportError:  # no Optuna: its tests are skipped, and nothing here needs it
    optuna = None

if optuna is not None:
    class PausingSampler(optuna.samplers.RandomSampler):
        """Optuna's random sampler, pausing when it is asked for trial ``at``'s parameters."""

        def __init__(self, at: int = 1, seed: int | None = None) -> None:
            super().__init__(seed=seed)
            self.at = int(at)

        def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
            if trial.number == self.at:
                pause(f"trial {trial.number}")
            return super().sample_independent(study, trial, name, distribution)
