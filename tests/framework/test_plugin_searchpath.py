"""A plugin's config search-path entry that names nothing (``corral_config_searchpath`` returning
``pkg://<no such package>`` or ``file://<no such directory>``) is one line naming the plugin, its
distribution and version, the entry and what is wrong: a ``corral: warning:`` once per run (an error
under ``CORRAL_STRICT_PLUGINS``), and ``corral plugins --check`` fails. Before, it was silent: the
plugin's presets were just "not found" later, with no word of the path.

The plugin is the real, pip-installed ``corral-testplugin`` (``tests/data/plugins``), whose hook adds
the entries that ``CORRAL_TESTPLUGIN_SEARCHPATH`` lists to its own (good) one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Callable, ContextManager

import pytest

from corral.framework.config import register_configs, searchpath_entry_problem
from corral.framework.errors import PluginError
from corral.framework.plugins import PluginWarning
from corral.testing.modules import import_path

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "train.py"
SMALL = ["trainer.n_epochs=1", "trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]"]
MISSING_PKG = "pkg://corral_no_such_config_package"


def line_for(entry: str, problem: str) -> str:
    """The message about ``entry`` of corral-testplugin's search path."""
    return (f"plugin testplugin (corral-testplugin 0.1.0): its config search path {entry}{problem}, so the presets "
            "meant to come from there are not available; fix the plugin, or run without it: "
            "CORRAL_DISABLE_PLUGINS=testplugin")


PKG_LINE = line_for(MISSING_PKG, " names no importable package ('corral_no_such_config_package')")


def load_dists() -> ModuleType:
    """``tests/data/plugins/dists.py`` (as the fixtures of ``conftest.py`` load it)."""
    return import_path(REPO / "tests" / "data" / "plugins" / "dists.py", "corral_tests_plugin_dists")


def run(args: list[str], cwd: Path, sites: dict[str, Path], **env: str) -> subprocess.CompletedProcess[str]:
    """``args`` with corral-testplugin installed (and no other test plugin)."""
    return subprocess.run(args, cwd=cwd, env=load_dists().subprocess_env(sites, "corral-testplugin", **env),
                          capture_output=True, text=True, timeout=240)


def corral(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "corral"
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "corral.framework.cli", *args]


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"--- rc={proc.returncode}\n--- stdout:\n{proc.stdout}\n--- stderr:\n{proc.stderr}"


# ------------------------------------------------------------------------------------- the entry check
def test_the_entry_check_says_what_names_nothing(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    assert searchpath_entry_problem("pkg://corral.conf") is None
    assert searchpath_entry_problem(f"file://{tmp_path}") is None
    assert searchpath_entry_problem(str(tmp_path)) is None
    assert searchpath_entry_problem("structured://anything") is None  # another scheme: not checked
    assert searchpath_entry_problem("pkg://no_such_pkg/conf") == "pkg://no_such_pkg/conf names no importable package " \
                                                                "('no_such_pkg.conf')"
    assert searchpath_entry_problem(f"file://{tmp_path}/nowhere") == f"file://{tmp_path}/nowhere: {tmp_path}/nowhere " \
                                                                     "does not exist"
    assert searchpath_entry_problem(f"file://{tmp_path}/a_file") == f"file://{tmp_path}/a_file: {tmp_path}/a_file is " \
                                                                    "not a directory"


# ------------------------------------------------------------------------------------------ in-process
def test_said_once_per_process_naming_the_plugin(
    plugins_visible: Callable[..., ContextManager[None]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nowhere = tmp_path / "nowhere"
    monkeypatch.setenv("CORRAL_TESTPLUGIN_SEARCHPATH", f"{MISSING_PKG},file://{nowhere}")
    with plugins_visible("corral-testplugin"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        register_configs()
        register_configs()  # Hydra's search path is built many times a run; the lines are said once
    said = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
    assert said == [PKG_LINE, line_for(f"file://{nowhere}", f": {nowhere} does not exist")]


def test_strict_plugins_make_it_an_error(
    plugins_visible: Callable[..., ContextManager[None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_TESTPLUGIN_SEARCHPATH", MISSING_PKG)
    monkeypatch.setenv("CORRAL_STRICT_PLUGINS", "1")
    with plugins_visible("corral-testplugin"), pytest.raises(PluginError) as info:
        register_configs()
    assert str(info.value) == f"{PKG_LINE} (CORRAL_STRICT_PLUGINS is set, so the run stops)"


# ---------------------------------------------------------------------------------------- end to end
def test_train_says_it_in_one_line_and_still_trains(tmp_path: Path, plugin_sites: dict[str, Path]) -> None:
    """The plugin's good entry still gives its preset (experiment=testplugin_quick); the run trains."""
    proc = run([sys.executable, str(TRAIN), "experiment=testplugin_quick", *SMALL, f"hydra.run.dir={tmp_path / 'run'}"],
               tmp_path, plugin_sites, CORRAL_TESTPLUGIN_SEARCHPATH=MISSING_PKG)
    assert proc.returncode == 0, output(proc)
    assert [line for line in proc.stderr.splitlines() if "corral_no_such_config_package" in line] == [
        f"corral: warning: {PKG_LINE}"], output(proc)
    assert (tmp_path / "run" / "summary.json").exists(), output(proc)


def test_train_stops_under_strict_plugins(tmp_path: Path, plugin_sites: dict[str, Path]) -> None:
    proc = run([sys.executable, str(TRAIN), *SMALL, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, plugin_sites,
               CORRAL_TESTPLUGIN_SEARCHPATH=MISSING_PKG, CORRAL_STRICT_PLUGINS="1")
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [
        f"corral: error: {PKG_LINE} (CORRAL_STRICT_PLUGINS is set, so the run stops)"], output(proc)
    assert not (tmp_path / "run").exists()


def test_corral_plugins_check_fails_naming_it(tmp_path: Path, plugin_sites: dict[str, Path]) -> None:
    proc = run(corral("plugins", "--check"), tmp_path, plugin_sites)  # the plugin's own entry names a package
    assert proc.returncode == 0, output(proc)
    assert "CONFIG SEARCH PATHS" not in proc.stdout

    proc = run(corral("plugins", "--check"), tmp_path, plugin_sites, CORRAL_TESTPLUGIN_SEARCHPATH=MISSING_PKG)
    assert proc.returncode == 1, output(proc)
    assert f"CONFIG SEARCH PATHS THAT NAME NOTHING\n  {PKG_LINE}\n" in proc.stdout, output(proc)
    assert "corral_no_such_config_package" not in proc.stderr, output(proc)  # listed, not warned as well

    proc = run(corral("plugins", "--json"), tmp_path, plugin_sites, CORRAL_TESTPLUGIN_SEARCHPATH=MISSING_PKG)
    assert proc.returncode == 0, output(proc)  # only --check fails on it
    assert json.loads(proc.stdout)["searchpath_problems"] == [PKG_LINE]
