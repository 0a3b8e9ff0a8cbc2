"""The logger contract: what a registered logger option must do with the statistics the trainer
gives it (see :class:`corral.framework.logger.Logger` for what ``stats`` holds)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Mapping

from corral.framework.logger import Logger
from corral.testing.contracts.config import config_problems


def sample_stats(epoch: int, *, evaluation: bool = False, extra: bool = False) -> dict[str, Any]:
    """One epoch's statistics shaped like the trainer's: ``epoch`` and ``env_steps`` as ints, then floats."""
    stats: dict[str, Any] = {"epoch": epoch, "env_steps": 2048 * (epoch + 1), "train/return_mean": 20.0 + epoch,
                             "train/return_min": 9.0, "train/return_max": 60.0 + epoch,
                             "train/episode_length": 20.0 + epoch, "train/n_episodes": 100.0,
                             "loss/policy": -0.01 * epoch, "time/sample_s": 1.0, "time/train_s": 0.5,
                             "time/epoch_s": 1.5, "time/total_s": 1.5 * (epoch + 1), "time/steps_per_s": 1365.3,
                             "time/sample_steps_per_s": 2048.0}
    if evaluation:
        stats.update({"eval/return_mean": 30.0 + epoch, "eval/return_std": 2.0, "eval/return_min": 25.0,
                      "eval/return_max": 35.0 + epoch, "eval/episode_length": 30.0})
    if extra:
        stats["loss/entropy"] = 0.5  # a key that first appears in a later epoch
    return stats


class LoggerContract:
    """The logger contract. Subclass it as ``Test...`` and set ``logger`` (a registered logger option
    name) with ``logger_config`` (fields of its config dataclass), or override :meth:`make_logger`.

    Checks: the factory builds a :class:`~corral.framework.logger.Logger`; it takes several epochs of
    trainer-shaped statistics (``epoch`` and ``env_steps`` as ints, a key that appears only in a
    later epoch, evaluation keys on some epochs); ``resume(epoch, env_steps)`` then logging again
    works (a resumed run appends to its own run directory); ``close()`` may be called twice; it
    writes only inside the run directory it was given; its config defaults satisfy their ranges.
    """

    logger: ClassVar[str | None] = None
    logger_config: ClassVar[Mapping[str, Any]] = {}

    def make_logger(self, log_dir: Path) -> Logger:
        """Build the logger under test for a run directory (default: the registered ``logger``)."""
        if self.logger is None:
            raise TypeError(f"{type(self).__name__} must set logger (or override make_logger)")
        from corral.framework.config import config_of
        from corral.framework.plugins import get_registry

        reg = get_registry().get("logger", self.logger)
        return reg.factory(config_of(reg, dict(self.logger_config)), log_dir=log_dir)

    # ------------------------------------------------------------------ the checks
    def test_builds_a_logger(self, tmp_path: Path) -> None:
        """The factory returns a corral Logger."""
        logger = self.make_logger(tmp_path / "run")
        try:
            assert isinstance(logger, Logger), f"the factory built {type(logger).__name__}, not a corral.Logger"
        finally:
            logger.close()

    def test_logs_trainer_shaped_epochs_and_closes_twice(self, tmp_path: Path) -> None:
        """Three epochs of statistics (one with evaluation, one with a new key), then close() twice."""
        logger = self.make_logger(tmp_path / "run")
        try:
            logger.log(0, sample_stats(0))
            logger.log(1, sample_stats(1, evaluation=True))
            logger.log(2, sample_stats(2, extra=True))
        finally:
            logger.close()
        logger.close()

    def test_resume_then_log(self, tmp_path: Path) -> None:
        """A resumed run: a new logger on the same run directory, ``resume(2, ...)``, then epochs 2 and 3."""
        first = self.make_logger(tmp_path / "run")
        for epoch in range(3):
            first.log(epoch, sample_stats(epoch))
        first.close()
        second = self.make_logger(tmp_path / "run")
        try:
            second.resume(2, sample_stats(1)["env_steps"])
            second.log(2, sample_stats(2))
            second.log(3, sample_stats(3, evaluation=True))
        finally:
            second.close()

    def test_writes_only_inside_its_run_directory(self, tmp_path: Path, monkeypatch: Any) -> None:
        """Nothing appears outside the run directory (the working directory stays untouched)."""
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        monkeypatch.chdir(cwd)
        logger = self.make_logger(tmp_path / "run")
        try:
            logger.log(0, sample_stats(0, evaluation=True))
        finally:
            logger.close()
        outside = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")
                         if not str(p.relative_to(tmp_path)).startswith(("run", "cwd" + os.sep)) and p != cwd)
        assert not outside and not any(cwd.iterdir()), f"the logger wrote outside its run directory: {outside}"

    def test_config_defaults_satisfy_their_ranges(self) -> None:
        """The option's config defaults satisfy the ranges its fields declare."""
        if self.logger is not None:
            from corral.testing.contracts.config import registered_config

            problems = config_problems(registered_config("logger", self.logger), f"logger.{self.logger}")
            assert not problems, "; ".join(problems)


__all__ = ["LoggerContract", "sample_stats"]
