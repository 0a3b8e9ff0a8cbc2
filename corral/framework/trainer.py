"""Trainer: runs epochs, logs, evaluates, snapshots atomically and resumes bit-for-bit."""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from corral.framework.algorithm import Algorithm
from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.checks import check
from corral.framework.env import EnvSpec, make_env
from corral.framework.errors import ConfigError, SnapshotError
from corral.framework.evaluation import evaluate, record_video, run_worker_factory
from corral.framework.logger import Logger
from corral.framework.progress import ProgressBar

SNAPSHOT_FORMAT = 1


@dataclass
class TrainerConfig:
    """Settings of the default trainer (``trainer.*`` on the command line)."""

    n_epochs: int = field(default=100, metadata=check(ge=1, help="number of epochs to train (at most)"))
    max_env_steps: Optional[int] = field(
        default=100_000, metadata=check(ge=1, help="stop after the epoch that reaches this many environment steps (null: no limit)")
    )
    batch_size: int = field(default=2048, metadata=check(ge=1, help="environment steps collected per epoch (at least)"))
    eval_every: int = field(default=5, metadata=check(ge=0, help="run deterministic evaluation every N epochs (0: never)"))
    eval_episodes: int = field(default=10, metadata=check(ge=1, help="episodes per evaluation"))
    video_every: int = field(default=0, metadata=check(
        ge=0, help="record one evaluation episode as MP4 every K evaluations to <run dir>/videos and TensorBoard "
                   "(needs corral[video]; 0: never)"))
    snapshot_every: int = field(default=1, metadata=check(ge=0, help="write a snapshot every N epochs (0: only at the end)"))
    keep_snapshots: int = field(default=3, metadata=check(ge=0, help="how many recent snapshots to keep (0: all)"))
    resume: Optional[str] = field(default=None, metadata={"help": "run directory (or snapshot file) to resume from"})
    progress: bool = field(default=True, metadata={"help": "live progress bar when stderr is a terminal"})
    torch_threads: int = field(
        default=1, metadata=check(ge=0, help="torch intra-op threads in the training process (0: torch's default)")
    )


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a cluster scheduler's preemption) arrived while training."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped training after a snapshot was written; ``exit_code`` is the shell's
    convention for the signal (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, snapshot: Path | None, exit_code: int = 130) -> None:
        super().__init__(str(snapshot))
        self.snapshot = snapshot
        self.exit_code = exit_code


class Trainer:
    """Runs an algorithm for epochs of ``batch_size`` environment steps.

    Library use, as in garage::

        trainer = Trainer(snapshot_dir="runs/ppo")
        trainer.setup(algo, env)
        trainer.train(n_epochs=50, batch_size=2048)
    """

    def __init__(
        self,
        config: TrainerConfig | None = None,
        *,
        snapshot_dir: str | os.PathLike | None = None,
        loggers: Sequence[Logger] | None = None,
        seed: int = 1,
        run_config: Any = None,
        hooks: Any = None,
    ) -> None:
        self.config = config or TrainerConfig()
        self.log_dir = Path(snapshot_dir) if snapshot_dir is not None else None
        if loggers is None:
            from corral.framework.plugins import get_registry

            loggers = [get_registry().get("logger", "console").factory(None, log_dir=self.log_dir)]
        self.loggers = list(loggers)
        self.seed = seed
        self.run_config = run_config
        self._hooks = hooks
        self.algo: Algorithm | None = None
        self.env: Any = None
        self.env_spec: EnvSpec | None = None
        #: The video the last evaluation recorded (``trainer.video_every``), else None; loggers get it
        #: through ``Logger.log_video`` and hooks can read it in ``corral_epoch_end``.
        self.last_video: Path | None = None
        self.epoch = 0
        self.total_env_steps = 0
        self.elapsed = 0.0
        self.last_stats: dict[str, float] = {}
        self.best_eval_return: float | None = None
        self._sampler_state: Any = None
        self._progress: ProgressBar | None = None
        if self.config.torch_threads > 0:
            # Small networks are fastest single-threaded, and extra threads spin against workers.
            import torch

            torch.set_num_threads(self.config.torch_threads)

    # ------------------------------------------------------------------ setup
    def setup(self, algo: Algorithm, env: Any) -> None:
        """Give the trainer its algorithm and its environment (an Env or an EnvFactory)."""
        self.algo = algo
        self.env = env
        probe = make_env(env)
        try:
            # The episode limit the workers use (env.max_episode_length), not only the env's own.
            factory = run_worker_factory(algo, seed=self.seed, max_episode_length=None)
            self.env_spec = EnvSpec.from_env(probe, factory.max_episode_length)
        finally:
            probe.close()

    @property
    def snapshot_dir(self) -> Path | None:
        """Where snapshots go (``<log_dir>/snapshots``)."""
        return self.log_dir / "snapshots" if self.log_dir is not None else None

    @property
    def hooks(self) -> Any:
        """The plugin hook relay."""
        if self._hooks is None:
            from corral.framework.plugins import get_plugin_manager

            self._hooks = get_plugin_manager().hook
        return self._hooks

    # ------------------------------------------------------------------ training
    def train(self, n_epochs: int | None = None, batch_size: int | None = None) -> dict[str, float]:
        """Train until epoch ``n_epochs``; return the last epoch's statistics.

        The sampler stays up afterwards so ``train`` can be called again to continue; call
        :meth:`shutdown` (or use the trainer as a context manager) when done. On an error or
        Ctrl-C the sampler is shut down before the exception propagates.
        """
        if self.algo is None:
            raise RuntimeError("call trainer.setup(algo, env) before trainer.train()")
        n_epochs = int(n_epochs if n_epochs is not None else self.config.n_epochs)
        batch_size = int(batch_size if batch_size is not None else self.config.batch_size)
        if batch_size < 1:
            raise ConfigError(f"trainer.batch_size must be >= 1, got {batch_size}")
        if self.config.resume and self.epoch == 0 and self.total_env_steps == 0:
            self.restore(self.config.resume)
        sampler = self.algo.sampler
        if self._sampler_state is None and sampler is not None:
            self._sampler_state = _try_state(sampler)
        if self.config.progress and sys.stderr.isatty():
            self._progress = ProgressBar(total=n_epochs, start=self.epoch)
        error: BaseException | None = None
        self.hooks.corral_run_start(trainer=self, cfg=self.run_config)
        try:
            with sigterm_as_interrupt():
                limit = self.config.max_env_steps
                while self.epoch < n_epochs and (not limit or self.total_env_steps < limit):
                    self._run_epoch(batch_size)
                if self.snapshot_dir is not None and self.last_stats:
                    self.save_snapshot()
        except KeyboardInterrupt as exc:
            error = exc
            terminated = isinstance(exc, Terminated)
            path = self.save_snapshot() if self.snapshot_dir is not None else None
            where = f"snapshot saved to {path}; resume with trainer.resume={self.log_dir}" if path else "no snapshot dir"
            by = " by SIGTERM" if terminated else ""
            print(f"\ncorral: interrupted{by} at epoch {self.epoch} ({self.total_env_steps} env steps); {where}",
                  file=sys.stderr, flush=True)
            raise TrainingInterrupted(path, 143 if terminated else 130) from None
        except BaseException as exc:
            error = exc
            raise
        finally:
            if self._progress is not None:
                self._progress.close()
            try:
                self.hooks.corral_run_end(trainer=self, error=error)
            finally:
                if error is not None:
                    self.shutdown()
        return self.last_stats

    def _run_epoch(self, batch_size: int) -> None:
        assert self.algo is not None
        epoch = self.epoch
        t0 = time.perf_counter()
        episodes = self.algo.sample(epoch, batch_size)
        t_sampled = time.perf_counter()
        with defer_interrupts():
            train_stats = self.algo.train_once(epoch, episodes)
            self.epoch = epoch + 1
            self.total_env_steps += len(episodes)
            if self.algo.sampler is not None:
                self._sampler_state = _try_state(self.algo.sampler)
        t_trained = time.perf_counter()
        stats: dict[str, float] = {"epoch": float(epoch), "env_steps": float(self.total_env_steps)}
        stats.update(episode_stats(episodes))
        stats.update({k: float(v) for k, v in (train_stats or {}).items()})
        self.last_video = None
        if self.config.eval_every and (self.epoch % self.config.eval_every == 0):
            stats.update(self.evaluate(video=self._video_due()))
        t_end = time.perf_counter()
        self.elapsed += t_end - t0
        stats["time/sample_s"] = t_sampled - t0
        stats["time/train_s"] = t_trained - t_sampled
        stats["time/epoch_s"] = t_end - t0
        stats["time/total_s"] = self.elapsed
        stats["time/steps_per_s"] = len(episodes) / max(t_sampled - t0, 1e-9)
        if "eval/return_mean" in stats:
            best = self.best_eval_return
            self.best_eval_return = stats["eval/return_mean"] if best is None else max(best, stats["eval/return_mean"])
        self.hooks.corral_epoch_end(trainer=self, epoch=epoch, stats=stats)
        self.last_stats = stats
        if self._progress is not None:
            self._progress.clear()
        for logger in self.loggers:
            logger.log(epoch, stats)
            if self.last_video is not None and callable(getattr(logger, "log_video", None)):
                logger.log_video(epoch, self.last_video, stats)
        if self._progress is not None:
            self._progress.update(self.epoch, self.total_env_steps, stats)
        every = self.config.snapshot_every
        if self.snapshot_dir is not None and every and self.epoch % every == 0:
            self.save_snapshot()

    def evaluate(self, video: bool = False) -> dict[str, float]:
        """Deterministic evaluation episodes with fixed seeds, through workers built like the run's
        own (:mod:`corral.framework.evaluation`), plus, when the algorithm has one, its
        ``meta_evaluate(env, seed=...)`` statistics (meta-RL: adaptation on held-out tasks).
        ``video``: also record the first evaluation episode to ``<run dir>/videos`` (``last_video``)."""
        assert self.algo is not None and self.env_spec is not None
        factory = run_worker_factory(self.algo, seed=self.seed, max_episode_length=self.env_spec.max_episode_length)
        stats = evaluate(self.algo.eval_policy, self.env, n_episodes=self.config.eval_episodes, worker_factory=factory)
        if video and self.log_dir is not None:
            self.last_video, _ = record_video(self.algo.eval_policy, self.env, factory, self.log_dir / "videos",
                                              name_prefix=f"epoch_{self.epoch:06d}")
        meta_evaluate = getattr(self.algo, "meta_evaluate", None)
        if callable(meta_evaluate):
            stats.update(meta_evaluate(self.env, seed=self.seed))
        return stats

    def _video_due(self) -> bool:
        """True at every ``video_every``-th evaluation (counted from the epoch, so resume keeps the rhythm)."""
        every, eval_every = self.config.video_every, self.config.eval_every
        return bool(every and eval_every and (self.epoch // eval_every) % every == 0)

    def shutdown(self) -> None:
        """Stop the sampler and close the loggers (idempotent)."""
        if self.algo is not None and self.algo.sampler is not None:
            self.algo.sampler.shutdown_worker()
        for logger in self.loggers:
            logger.close()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs."""
        import torch

        assert self.algo is not None
        return {
            "format": SNAPSHOT_FORMAT,
            "epoch": self.epoch,
            "total_env_steps": self.total_env_steps,
            "elapsed": self.elapsed,
            "best_eval_return": self.best_eval_return,
            "last_stats": self.last_stats,
            "algo": self.algo.state_dict(),
            "sampler": self._sampler_state,
            "rng": {
                "python": random.getstate(),
                "numpy": np.random.get_state(),
                "torch": torch.get_rng_state(),
            },
            "config": self.run_config_yaml(),
        }

    def run_config_yaml(self) -> str | None:
        """The composed run config as YAML (None in library use)."""
        if self.run_config is None:
            return None
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(self.run_config)

    def save_snapshot(self) -> Path:
        """Write a snapshot atomically (temporary file, fsync, rename) and prune old ones."""
        import torch

        directory = self.snapshot_dir
        if directory is None:
            raise SnapshotError("this trainer has no snapshot_dir")
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"epoch_{self.epoch:06d}.pt"
        tmp = directory / f".{path.name}.tmp"
        with open(tmp, "wb") as f:
            torch.save(self.state_dict(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        latest_tmp = directory / ".latest.tmp"
        latest_tmp.write_text(path.name + "\n")
        os.replace(latest_tmp, directory / "latest")
        keep = self.config.keep_snapshots
        if keep:
            for old in sorted(directory.glob("epoch_*.pt"))[:-keep]:
                old.unlink(missing_ok=True)
        return path

    def restore(self, source: str | os.PathLike) -> Path:
        """Load the latest snapshot of a run directory (or a snapshot file) into this trainer."""
        import torch

        assert self.algo is not None
        path = find_snapshot(source)
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except (OSError, pickle.UnpicklingError, RuntimeError, EOFError) as exc:
            raise SnapshotError(f"cannot read snapshot {path}: {exc}") from exc
        if state.get("format") != SNAPSHOT_FORMAT:
            raise SnapshotError(f"{path} has snapshot format {state.get('format')}, expected {SNAPSHOT_FORMAT}")
        self.algo.load_state_dict(state["algo"])
        self.epoch = int(state["epoch"])
        self.total_env_steps = int(state["total_env_steps"])
        self.elapsed = float(state["elapsed"])
        self.best_eval_return = state.get("best_eval_return")
        self.last_stats = dict(state.get("last_stats") or {})
        if state.get("sampler") is not None and self.algo.sampler is not None:
            self.algo.sampler.load_state_dict(state["sampler"])
            self._sampler_state = state["sampler"]
        rng = state["rng"]
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        print(f"corral: resumed from {path} at epoch {self.epoch} ({self.total_env_steps} env steps)",
              file=sys.stderr, flush=True)
        return path


def find_snapshot(source: str | os.PathLike) -> Path:
    """Resolve a run directory, a snapshot directory or a file to the snapshot to load."""
    p = Path(source).expanduser()
    if p.is_file():
        return p
    for d in (p / "snapshots", p):
        latest = d / "latest"
        if latest.is_file():
            candidate = d / latest.read_text().strip()
            if candidate.is_file():
                return candidate
        found = sorted(d.glob("epoch_*.pt")) if d.is_dir() else []
        if found:
            return found[-1]
    raise SnapshotError(f"no snapshot found in {p} (expected {p}/snapshots/epoch_*.pt); check trainer.resume")


def episode_stats(episodes: EpisodeBatch) -> dict[str, float]:
    """Return and length statistics of the episodes that end in a batch.

    A fragment that continues an episode from an earlier batch counts with its episode's whole
    return and length when the worker records ``episode_infos["prior_return"]`` and
    ``["prior_length"]`` (the ``fragment`` worker does); without them it is left out.
    """
    complete = episodes.complete
    returns = episodes.episode_returns
    lengths = episodes.lengths
    infos = episodes.episode_infos
    if "prior_return" in infos and "prior_length" in infos:
        returns = returns + infos["prior_return"]
        lengths = lengths + infos["prior_length"]
    elif episodes.n_episodes:
        complete = complete & ((episodes.step_types[episodes.starts] != StepType.MID) | (episodes.lengths == 1))
    returns = returns[complete]
    lengths = lengths[complete]
    if not len(returns):
        return {"train/n_episodes": 0.0}
    return {
        "train/return_mean": float(returns.mean()),
        "train/return_min": float(returns.min()),
        "train/return_max": float(returns.max()),
        "train/episode_length": float(lengths.mean()),
        "train/n_episodes": float(len(returns)),
    }


def _try_state(sampler: Any) -> Any:
    try:
        return sampler.state_dict()
    except NotImplementedError:
        return None


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (a KeyboardInterrupt), so ``kill`` or a
    scheduler's preemption takes Ctrl-C's path: snapshot, sampler shut down, a clear line."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def defer_interrupts() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, so state updates are never half done; the
    first signal that arrived is then handled as it would have been."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[Any] = []

    def handler(signum: int, frame: Any) -> None:
        received.append((signum, frame))

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if received:
            signum, frame = received[0]
            old = previous[signum]
            if callable(old):
                old(signum, frame)
            elif old == signal.SIG_DFL and signum == signal.SIGTERM:
                raise Terminated()
            elif old != signal.SIG_IGN:
                raise KeyboardInterrupt


__all__ = [
    "Terminated", "Trainer", "TrainerConfig", "TrainingInterrupted", "defer_interrupts", "episode_stats",
    "find_snapshot", "sigterm_as_interrupt",
]
