"""Parts of a run that fail on purpose, for ``tests/framework/test_commit_rollback.py`` and
``tests/framework/test_setup_blame.py``.

This module is both a corral plugin (entry point ``faultyparts`` of the distribution ``corral-faultyparts``,
made visible to a ``train.py`` subprocess by :func:`install`, as pip would install it) and a
gymnasium environment module (``env=gym env.id=faulty_run_parts:corral_test/FlakyCartPole-v1``).

- ``corral_epoch_end``, with ``CORRAL_TEST_COMMIT_FAULT=hook-raises`` or ``hook-string``: at the first epoch whose
  evaluation return is above every earlier one (not the first evaluation), raises ``RuntimeError`` or
  sets the statistic ``corral_test/note`` to a string, so that epoch's commit fails.
- ``logger=failing``: with ``CORRAL_TEST_COMMIT_FAULT=logger-fails``, its ``log`` raises ``OSError`` (no space
  left) at that same epoch.
- ``trainer=brokensetup``: the default trainer whose ``setup`` makes its probe environment fine,
  then raises ``ValueError`` of its own.
- ``corral_test/FlakyCartPole-v1``: CartPole that is made fine ``fail_from - 1`` times in its process and
  raises ``RuntimeError`` from the ``fail_from``-th making on (0: never); each making is one line in
  the file ``log`` (when given), naming the corral functions it was made under.

:func:`run_train` runs ``python train.py`` with this module installed, for both tests.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from corral import hookimpl
from corral.framework.logger import Logger
from corral.framework.trainer import Trainer, TrainerConfig

DIST, ENTRY_POINT, VERSION = "corral-faultyparts", "faultyparts", "0.1.0"
#: The environment variable that says which part fails the commit of an epoch.
FAULT_VAR = "CORRAL_TEST_COMMIT_FAULT"
#: The name this module is imported by where :func:`install` puts it.
MODULE = Path(__file__).stem
ENV_ID = f"{MODULE}:corral_test/FlakyCartPole-v1"
#: The corral functions a making of the environment is named by in its log line, innermost first.
MAKERS = ("setup@trainer.py", "probe_env@compose.py", "update_env@worker.py", "check@env.py")

_evaluations: list[float] = []  # the evaluation returns of the epochs seen so far in this process


def _first_new_best(stats: Mapping[str, Any]) -> bool:
    """True when ``stats`` holds an evaluation return above every earlier one (not the first)."""
    value = stats.get("eval/return_mean")
    if value is None:
        return False
    new = bool(_evaluations) and float(value) > max(_evaluations)
    _evaluations.append(float(value))
    return new


@hookimpl
def corral_epoch_end(trainer: Any, epoch: int, stats: dict[str, Any]) -> None:
    """Fail the commit of the first epoch with a new best evaluation (``CORRAL_TEST_COMMIT_FAULT``)."""
    fault = os.environ.get(FAULT_VAR)
    if fault not in ("hook-raises", "hook-string") or not _first_new_best(stats):
        return
    if fault == "hook-raises":
        raise RuntimeError(f"audit service unreachable at epoch {epoch}")
    stats["corral_test/note"] = "new best"


@dataclass
class FailingLoggerConfig:
    """Settings of ``logger=failing`` (none)."""


class FailingLogger(Logger):
    """A logger whose disk fills up at the first epoch with a new best evaluation."""

    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Raise ``OSError(ENOSPC)`` at that epoch (``CORRAL_TEST_COMMIT_FAULT=logger-fails``), else nothing."""
        if os.environ.get(FAULT_VAR) == "logger-fails" and _first_new_best(stats):
            raise OSError(errno.ENOSPC, "No space left on device", "failing.log")


def make_failing_logger(config: Any, log_dir: Any = None) -> FailingLogger:
    """``logger=failing``."""
    return FailingLogger()


class BrokenSetupTrainer(Trainer):
    """The default trainer, whose ``setup`` raises an error of its own after making its probe."""

    def setup(self, algo: Any, env: Any) -> None:
        """Set up as the default trainer does, then raise ``ValueError``."""
        super().setup(algo, env)
        raise ValueError("setup of the broken trainer failed on purpose")


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``logger=failing`` and ``trainer=brokensetup``."""
    register("logger", "failing", make_failing_logger, config=FailingLoggerConfig,
             help="a logger whose disk fills up (tests)")
    register("trainer", "brokensetup", BrokenSetupTrainer, config=TrainerConfig,
             help="the default trainer with a setup that raises (tests)")


class FlakyCartPole(CartPoleEnv):
    """CartPole whose ``fail_from``-th making in this process, and every later one, raises."""

    made = 0

    def __init__(self, fail_from: int = 0, log: str = "", render_mode: str | None = None) -> None:
        type(self).made += 1
        number = type(self).made
        if log:
            frames = [f"{f.name}@{os.path.basename(f.filename)}" for f in traceback.extract_stack()]
            makers = [m for m in reversed(frames) if m in MAKERS]
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {number} {makers[0] if makers else '?'}\n")
        if fail_from and number >= int(fail_from):
            raise RuntimeError(f"licence server refused simulator {number}")
        super().__init__(render_mode=render_mode)


if "corral_test/FlakyCartPole-v1" not in gym.registry:
    gym.register(id="corral_test/FlakyCartPole-v1", entry_point=FlakyCartPole, max_episode_steps=500)


def install(site: Path) -> Path:
    """Install this module into the directory ``site`` as pip would install a distribution that
    holds it (the module, and a ``*.dist-info`` with its ``corral`` entry point); return ``site``,
    which goes on a ``train.py`` subprocess's ``PYTHONPATH``."""
    site.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(__file__, site / f"{MODULE}.py")
    info = site / f"{DIST.replace('-', '_')}-{VERSION}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\n")
    (info / "entry_points.txt").write_text(f"[corral]\n{ENTRY_POINT} = {MODULE}\n")
    return site


def run_train(cwd: Path, *args: str, fault: str | None = None, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python train.py *args`` in ``cwd`` with this module installed in ``cwd/site`` (:func:`install`)
    and ``CORRAL_TEST_COMMIT_FAULT=fault`` (unset when None); this process's plugin selection
    (``CORRAL_PLUGINS``, ...) and ``HYDRA_FULL_ERROR`` are left out of the child's environment."""
    site = install(cwd / "site")
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_PLUGINS", "CORRAL_DISABLE_PLUGINS",
                                                             "CORRAL_STRICT_PLUGINS", "HYDRA_FULL_ERROR", FAULT_VAR)}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    if fault is not None:
        env[FAULT_VAR] = fault
    train = Path(__file__).resolve().parents[2] / "train.py"  # run from tests/conf, not from an install
    return subprocess.run([sys.executable, str(train), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    """The exit status and the ends of stdout and stderr of ``proc``, for an assertion's message."""
    return f"--- rc={proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-6000:]}"
