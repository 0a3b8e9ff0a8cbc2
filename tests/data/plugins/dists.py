"""Install the test plugin distributions for real, offline, and make them visible to corral.

Each source tree next to this file (``corral-testplugin``, ``corral-brokenimport``,
``corral-brokenregister``) is copied to a temporary directory and installed with
``pip install --no-deps --no-build-isolation --no-index --target <dir>``: the result is exactly
what ``pip install`` produces (package + ``*.dist-info`` with ``entry_points.txt``), so
``importlib.metadata.entry_points(group="corral")`` finds it once ``<dir>`` is on the path.

Use :func:`install` once per test session (it caches), then :func:`subprocess_env` for
``python train.py`` / ``corral`` subprocesses, or :func:`visible` for in-process tests.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Mapping

from corral.testing.plugin_packages import PLUGIN_SWITCHES, plugin_env

HERE = Path(__file__).resolve().parent

#: distribution name -> (import package, entry-point name, version)
DISTS: dict[str, tuple[str, str, str]] = {
    "corral-testplugin": ("corral_testplugin", "testplugin", "0.1.0"),
    "corral-brokenimport": ("corral_brokenimport", "brokenimport", "0.2.0"),
    "corral-brokenregister": ("corral_brokenregister", "brokenregister", "0.2.0"),
    "corral-faultyplugin": ("corral_faultyplugin", "faultyplugin", "0.3.0"),
}

#: Environment variables that change which plugins load; cleared for every test.
PLUGIN_ENV_VARS = PLUGIN_SWITCHES

_INSTALLED: dict[str, Path] = {}


def install(root: Path) -> dict[str, Path]:
    """Install every test distribution into its own ``--target`` directory under ``root``.

    Returns distribution name -> site directory (put it on ``sys.path`` / ``PYTHONPATH``).
    Cached for the process: later calls return the first installation.
    """
    if len(_INSTALLED) == len(DISTS):
        return dict(_INSTALLED)
    env = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "PIP_NO_CACHE_DIR": "1",
    }
    for dist in DISTS:
        src = root / "src" / dist
        site = root / "site" / dist
        # Build from a copy: setuptools writes build/ and *.egg-info/ into the source tree.
        shutil.copytree(HERE / dist, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
             "--no-index", "--target", str(site), str(src)],
            env=env, capture_output=True, text=True, timeout=180,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"pip install of {dist} failed:\n{proc.stdout}\n{proc.stderr}")
        if not list(site.glob("*.dist-info/entry_points.txt")):
            raise RuntimeError(f"pip install of {dist} produced no entry_points.txt in {site}")
        _INSTALLED[dist] = site
    return dict(_INSTALLED)


def subprocess_env(sites: Mapping[str, Path], *dists: str, **extra: str) -> dict[str, str]:
    """``os.environ`` with only ``dists`` visible (on ``PYTHONPATH``), no CORRAL_* plugin switches and Hydra's
    short error messages, as a user sees them (:func:`corral.testing.plugin_packages.plugin_env`)."""
    return plugin_env([sites[d] for d in dists], **extra)


@contextlib.contextmanager
def visible(sites: Mapping[str, Path], *dists: str) -> Iterator[None]:
    """Make ``dists`` visible in this process (as if pip-installed), and invisible again after.

    Puts their site directories first on ``sys.path``, invalidates the import and metadata
    caches and resets corral's process-wide plugin manager, on entry and on exit; on exit it
    also forgets the test plugins' modules.
    """
    from corral.framework.plugins import reset_plugin_manager

    saved = list(sys.path)
    sys.path[:0] = [str(sites[d]) for d in dists]
    importlib.invalidate_caches()
    reset_plugin_manager()
    try:
        yield
    finally:
        sys.path[:] = saved
        packages = {pkg for pkg, _, _ in DISTS.values()}
        for name in [m for m in sys.modules if m.split(".")[0] in packages]:
            del sys.modules[name]
        importlib.invalidate_caches()
        reset_plugin_manager()

