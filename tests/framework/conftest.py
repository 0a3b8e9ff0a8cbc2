"""Fixtures for the plugin-system tests: real, pip-installed test plugin distributions."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Callable, ContextManager, Iterator

import pytest

from corral.testing.modules import import_path

DISTS_FILE = Path(__file__).resolve().parents[1] / "data" / "plugins" / "dists.py"


def load_dists() -> ModuleType:
    """``tests/data/plugins/dists.py``, loaded by path (``tests`` is not an importable package)."""
    return import_path(DISTS_FILE, "corral_tests_plugin_dists")


@pytest.fixture(scope="session")
def plugin_sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Distribution name -> directory where it is pip-installed (``--target``), once per session."""
    return load_dists().install(tmp_path_factory.mktemp("corral_plugin_dists"))


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No CORRAL_PLUGINS / CORRAL_DISABLE_PLUGINS / CORRAL_STRICT_PLUGINS unless a test sets them;
    the process-wide plugin manager is reset after each test."""
    for var in load_dists().PLUGIN_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    yield
    from corral.framework.plugins import reset_plugin_manager

    reset_plugin_manager()


@pytest.fixture
def plugins_visible(plugin_sites: dict[str, Path]) -> Callable[..., ContextManager[None]]:
    """``with plugins_visible("corral-testplugin", ...):`` those distributions are installed."""
    dists = load_dists()
    return lambda *names: dists.visible(plugin_sites, *names)
