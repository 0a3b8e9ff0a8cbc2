"""Hydra's joblib launcher with its settings checked before the sweep starts (``hydra/launcher=joblib``;
settings in corral/conf/hydra/launcher/joblib.yaml).

hydra-joblib-launcher hands its settings to ``joblib.Parallel`` once the jobs are launched, and
always with ``backend=loky``: ``n_jobs=0`` was joblib's traceback, and ``backend=threading`` or
``prefer=threads`` ran the jobs in loky processes without a word. :meth:`CorralJoblibLauncher.check_config`
refuses such a setting in one line before any job (``corral.framework.precheck.check_sweep_plugins``
calls it); the launch itself is Hydra's.

Kept import-light: Hydra imports every module under ``hydra_plugins`` when it scans for plugins.
"""

from __future__ import annotations

from typing import Any, Sequence

from corral.framework.checks import check_minimums
from corral.framework.errors import ConfigError

try:
    from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher

    INSTALLED = True
except ImportError:  # hydra-joblib-launcher not installed: the preset says what to install
    INSTALLED = False

    class JoblibLauncher:  # type: ignore[no-redef]
        """Stand-in that explains what is missing."""

        def __init__(self, **params: Any) -> None:
            raise ImportError("hydra/launcher=joblib needs hydra-joblib-launcher: pip install 'corral[sweep]' "
                              "(or pip install hydra-joblib-launcher)")

#: The backend hydra-joblib-launcher always runs the jobs with (it sets it over the preset's).
BACKEND = "loky"


class CorralJoblibLauncher(JoblibLauncher):
    """``hydra/launcher=joblib``: Hydra's joblib launcher; :meth:`check_config` before the sweep."""

    @classmethod
    def check_config(cls, cfg: Any, overrides: Sequence[str] = ()) -> None:
        """Raise a one-line :class:`ConfigError` for a setting joblib would refuse once the jobs are
        launched, or one the launcher would ignore (``backend``, ``prefer``, ``require``)."""
        if not INSTALLED:
            raise ConfigError("hydra/launcher=joblib needs hydra-joblib-launcher: pip install 'corral[sweep]'")
        n_jobs = cfg.get("n_jobs")
        if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0:
            raise ConfigError(f"hydra.launcher.n_jobs must be a whole number other than 0 (the jobs run at once; -1: "
                              f"one per CPU core), got {n_jobs!r}")
        fixed = {"backend": ((None, BACKEND), f"the launcher always runs the jobs in {BACKEND} worker processes, so "
                                              "it would not change how the sweep runs; leave it out"),
                 "prefer": (("processes",), f"joblib ignores prefer when the backend is given (the launcher gives "
                                            f"{BACKEND}), so it would not change how the sweep runs; leave it out"),
                 "require": ((None,), f"the launcher's {BACKEND} worker processes share no memory; leave it out")}
        for key, (allowed, why) in fixed.items():
            if key in cfg and cfg.get(key) not in allowed:
                raise ConfigError(f"hydra.launcher.{key}={cfg.get(key)}: {why}")
        check_minimums(cfg, "hydra.launcher", {"verbose": 0})
        timeout = cfg.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ConfigError(f"hydra.launcher.timeout must be > 0 seconds or null (no limit), got {timeout!r}")
        batch = str(cfg.get("batch_size"))  # a string in the launcher's schema: "auto" or a number
        if batch != "auto" and not (batch.isdigit() and int(batch) >= 1):
            raise ConfigError(f"hydra.launcher.batch_size must be a whole number >= 1 or auto, got {batch!r}")
