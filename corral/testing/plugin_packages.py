"""Throwaway plugin packages, installed for real: what ``pip install corral-<x>`` leaves on disk.

:func:`write_plugin_package` writes a distribution into a site directory: its modules and a
``<name>-<version>.dist-info`` with ``METADATA`` and ``entry_points.txt``. That is what an installed
package is to :mod:`importlib.metadata`, so once the site directory is on ``sys.path`` (or
``PYTHONPATH`` for a subprocess) ``entry_points(group="corral")`` finds it and corral loads it,
with no build step (building one wheel per test case would cost seconds each)::

    site = tmp_path / "site"
    write_plugin_package(site, "corral-mine", "1.2.0", {"corral_mine": SOURCE})
    env = plugin_env([site])                 # os.environ with the site first on PYTHONPATH
    subprocess.run([sys.executable, "train.py", "sampler=mine"], env=env, timeout=...)

:func:`plugin_env` also drops the ``CORRAL_*PLUGINS`` switches and ``HYDRA_FULL_ERROR`` of the
calling environment, so a subprocess sees what a user with only these packages installed sees.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Mapping

#: The environment variables that change which plugins load (cleared by :func:`plugin_env`).
PLUGIN_SWITCHES: tuple[str, ...] = ("CORRAL_PLUGINS", "CORRAL_DISABLE_PLUGINS", "CORRAL_STRICT_PLUGINS")


def write_plugin_package(site: str | Path, distribution: str, version: str, modules: Mapping[str, str],
                         entry_points: Mapping[str, str] | None = None) -> Path:
    """Write the distribution ``distribution`` ``version`` into the directory ``site``, as pip installs it.

    ``modules`` maps a dotted module name to its source: ``{"corral_mine": "..."}`` becomes
    ``corral_mine/__init__.py``, ``{"corral_mine.plugin": "..."}`` ``corral_mine/plugin.py`` (with the
    packages above it). ``entry_points`` maps entry-point names of group ``corral`` to their values
    (``"module"`` or ``"module:attribute"``); by default one entry point, named after the distribution
    without its ``corral-`` prefix, naming the first module. Returns the ``*.dist-info`` directory.
    """
    site = Path(site)
    if not modules:
        raise ValueError("write_plugin_package needs at least one module")
    files: list[str] = []
    for dotted, source in modules.items():
        parts = dotted.split(".")
        for depth in range(1, len(parts)):  # the packages above the module
            init = site.joinpath(*parts[:depth], "__init__.py")
            if not init.exists():
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text("")
                files.append(init.relative_to(site).as_posix())
        package = site.joinpath(*parts)
        if package.is_dir() or any(other.startswith(dotted + ".") for other in modules):
            path = package / "__init__.py"
        else:
            path = package.with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        files.append(path.relative_to(site).as_posix())
    if entry_points is None:
        short = re.sub(r"^corral[-_.]", "", distribution) or distribution
        entry_points = {short: next(iter(modules))}
    info = site / f"{re.sub(r'[-_.]+', '_', distribution)}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=False)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
                                   "Requires-Dist: corral\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[corral]\n{lines}")
    names = [*files, *(f"{info.name}/{f}" for f in ("METADATA", "entry_points.txt", "RECORD"))]
    (info / "RECORD").write_text("".join(f"{name},,\n" for name in names))
    return info


def plugin_env(sites: Iterable[str | Path], environ: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``environ`` (default ``os.environ``) for a subprocess with the site directories ``sites`` first on
    ``PYTHONPATH``, none of :data:`PLUGIN_SWITCHES` nor ``HYDRA_FULL_ERROR`` (Hydra's short errors, as
    a user sees them), then ``extra``."""
    env = {k: v for k, v in (os.environ if environ is None else environ).items()
           if k not in PLUGIN_SWITCHES and k != "HYDRA_FULL_ERROR"}
    paths = [str(site) for site in sites]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    else:
        env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


__all__ = ["PLUGIN_SWITCHES", "plugin_env", "write_plugin_package"]
