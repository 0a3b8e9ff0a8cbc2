"""Optuna trials inside a run: report each epoch's evaluation return to the trial, stop when pruned.

The job side of ``hydra/sweeper=optuna`` (corral's sweeper, ``hydra_plugins.corral_optuna_sweeper``).
The sweeper launches each trial's job with ``CORRAL_OPTUNA_TRIAL_ID`` and ``CORRAL_OPTUNA_STUDY`` set
(``hydra.job.env_set``), and
the job's Hydra config holds the sweeper's settings (``hydra.sweeper.storage``, ``study_name``,
``pruner``, ``prune_on``). On every epoch that has the ``prune_on`` statistic (``eval/return_mean``,
the evaluation return; evaluations come every ``trainer.eval_every`` epochs) this plugin reports it as
the trial's intermediate value at that epoch, and when the study's pruner says so it raises
``optuna.TrialPruned``: the run ends there, and the sweeper records the trial as pruned. With a
pruner, a ``prune_on`` that an epoch should have and does not (a misspelt ``eval/`` or ``train/``
name, evaluation turned off) stops the job with a :class:`~corral.framework.errors.SweepSettingError`,
and the sweep with it.

The study is reached through its storage (``sqlite:///optuna.db`` and the like), so trials may run
in other processes (``hydra/launcher=joblib``, ``ray``, ``submitit_*``); an in-memory study (no
storage) is found only by jobs that run in the sweeper's own process (Hydra's basic launcher).
Outside an Optuna sweep this plugin does nothing.
"""

from __future__ import annotations

import os
import warnings
import weakref
from typing import Any

from corral import hookimpl
from corral.framework.errors import CorralWarning, SweepSettingError

#: Environment variables naming the Optuna trial (its storage id) that a job runs, and its study.
TRIAL_ENV = "CORRAL_OPTUNA_TRIAL_ID"
STUDY_ENV = "CORRAL_OPTUNA_STUDY"
#: Studies the sweeper created in this process, by study name (in-memory studies are found here).
LIVE_STUDIES: dict[str, Any] = {}

_TRIALS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def make_pruner(spec: Any) -> Any:
    """An Optuna pruner from the sweeper's ``pruner`` setting (a ``_target_`` node, or a pruner Hydra
    already built), or ``NopPruner`` for none."""
    import optuna

    if spec is None:
        return optuna.pruners.NopPruner()
    if isinstance(spec, optuna.pruners.BasePruner):
        return spec
    from hydra.utils import instantiate

    return instantiate(spec)


def current_trial() -> Any:
    """The ``optuna.Trial`` this job runs, or None outside an Optuna sweep (or without a reachable study)."""
    trial_id = os.environ.get(TRIAL_ENV)
    if not trial_id:
        return None
    try:
        from hydra.core.hydra_config import HydraConfig

        sweeper: Any = HydraConfig.get().sweeper
    except (ImportError, ValueError):
        return None
    import optuna

    name = os.environ.get(STUDY_ENV) or str(sweeper.get("study_name") or "")
    study = LIVE_STUDIES.get(name)
    if study is None:
        storage = sweeper.get("storage")
        if not storage:
            return None
        study = optuna.load_study(study_name=name, storage=str(storage), pruner=make_pruner(sweeper.get("pruner")))
    return optuna.trial.Trial(study, int(trial_id))


@hookimpl
def corral_run_start(trainer: Any, cfg: Any) -> None:
    """Find the trial of this job (once per run)."""
    if os.environ.get(TRIAL_ENV) and trainer not in _TRIALS:
        _TRIALS[trainer] = current_trial()


@hookimpl
def corral_epoch_end(trainer: Any, epoch: int, stats: dict[str, float]) -> None:
    """Report the evaluation return to the trial; raise ``optuna.TrialPruned`` when the pruner says so."""
    trial = _TRIALS.get(trainer)
    if trial is None:
        return
    from hydra.core.hydra_config import HydraConfig

    sweeper = HydraConfig.get().sweeper
    key = str(sweeper.get("prune_on") or "eval/return_mean")
    if sweeper.get("pruner") is not None:
        _SEEN.setdefault(trainer, set()).update(stats)
        if key not in stats:
            _check_statistic(trainer, key, stats)
    if key not in stats:
        return
    value = float(stats[key])
    trial.report(value, step=int(epoch))
    if trial.should_prune():
        raise _pruned()(f"trial {trial.number} pruned at epoch {epoch} ({key} = {value:.4g})")


def _check_statistic(trainer: Any, key: str, stats: dict[str, float]) -> None:
    """Raise :class:`SweepSettingError` when ``prune_on`` is missing from an epoch that would have it:
    an ``eval/`` statistic from an evaluated epoch (or any epoch, with evaluation off), a ``train/``
    one from an epoch that finished episodes. Another name (an algorithm's loss, which may start
    later) is one warning, at the first evaluated epoch that has not seen it yet."""
    seen = _SEEN.get(trainer, set())  # every epoch's statistics so far
    eval_every = getattr(getattr(trainer, "config", None), "eval_every", None)
    evaluated = any(k.startswith("eval/") for k in stats)
    names = ", ".join(sorted(k for k in seen if k.startswith(("eval/", "train/"))))
    if key.startswith("eval/") and eval_every == 0:
        raise SweepSettingError(f"hydra.sweeper.prune_on={key} is an evaluation statistic, and trainer.eval_every=0 "
                                "turns evaluation off: set trainer.eval_every (e.g. 1), or hydra.sweeper.pruner=null")
    if (key.startswith("eval/") and evaluated) or (key.startswith("train/") and stats.get("train/n_episodes")):
        raise SweepSettingError(f"hydra.sweeper.prune_on={key} is not a statistic of this run, so the pruner would "
                                f"never hear from a trial; choose one of {names} (progress.csv has every column)")
    if not key.startswith(("eval/", "train/")) and (evaluated or not eval_every) and key not in seen \
            and trainer not in _WARNED:
        _WARNED.add(trainer)
        warnings.warn(CorralWarning(
            f"hydra.sweeper.prune_on={key} is not among this run's statistics so far; the pruner hears nothing "
            f"from this trial until it is (its statistics: {names}, and the columns of progress.csv)"), stacklevel=2)


_SEEN: "weakref.WeakKeyDictionary[Any, set[str]]" = weakref.WeakKeyDictionary()
_WARNED: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _pruned() -> type:
    """The ``TrialPruned`` class (built on first use: Optuna is imported only inside Optuna sweeps)."""
    global _PRUNED
    if _PRUNED is None:
        import optuna

        class TrialPruned(optuna.TrialPruned):
            """``optuna.TrialPruned`` that marks the run's ``summary.json`` with ``status: pruned``."""

            summary_status = "pruned"

        TrialPruned.__module__, TrialPruned.__qualname__ = __name__, "TrialPruned"
        _PRUNED = TrialPruned
    return _PRUNED


_PRUNED: type | None = None


def __getattr__(name: str) -> Any:
    """``corral.plugins.optuna_pruning.TrialPruned`` (so a pruned job's exception unpickles anywhere)."""
    if name == "TrialPruned":
        return _pruned()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LIVE_STUDIES", "STUDY_ENV", "TRIAL_ENV", "current_trial", "make_pruner"]
