"""Broken, conflicting and outdated third-party plugin packages, installed for real, as a user meets them:
``python train.py`` and ``corral plugins`` with the package installed, the broken plugin chosen on the
command line or not, alone or in a sweep.

Each package is a throwaway distribution (its module and a ``*.dist-info`` with its ``corral`` entry
point, :mod:`corral.testing.plugin_packages`) in a site directory of its own under a module-scoped
temporary directory; a test puts the ones it needs on ``PYTHONPATH``. The standard: a plugin that
is not chosen costs one ``corral: warning:`` line naming its distribution, version and what to do,
and the run goes on; a chosen one is one ``corral: error:`` line before anything starts, exit 2.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from corral.testing.plugin_packages import plugin_env, write_plugin_package

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "train.py"
TIMEOUT = 180
VERSION = "0.4.0"
#: One tiny epoch, no evaluation.
TINY = ["trainer.n_epochs=1", "trainer.batch_size=100", "trainer.eval_every=0", "trainer.progress=false",
        "logger=[csv]"]
BUILTIN_SAMPLERS = "action_server, alternating, local, multiprocessing, ray"

SAMPLER = '''
import os
from dataclasses import dataclass, field
from corral import ConfigError, LocalSampler, hookimpl


@dataclass
class Config:
    """Settings."""

    n_workers: int = field(default=1, metadata={{"help": "workers"}})


@hookimpl
def corral_register(register):
    register("sampler", "{name}", LocalSampler, config=Config, help="sampler=local under another name")
'''

#: A validation hook that says it ran (a ConfigError, when the test asks): proof the plugin's hooks are registered.
VALIDATE_RAN = '''

@hookimpl
def corral_validate_config(cfg):
    if os.environ.get("CORRAL_TEST_SAY_VALIDATED"):
        raise ConfigError("{name}'s corral_validate_config ran")
'''

#: name -> (module source, entry points or None for the default one)
PACKAGES: dict[str, tuple[str, dict[str, str] | None]] = {
    # its import fails, in the ways a user's install breaks
    "missingdep": ("import definitely_not_installed_dep_xyz\n" + SAMPLER.format(name="missingdep"), None),
    "syntaxerr": ("def broken(:\n    pass\n", None),
    "raisesimport": ("raise RuntimeError('cannot read ~/.mine.toml')\n", None),
    "exits": ("import sys\nsys.exit(3)  # a plugin that ends the process while imported\n", None),
    "longerror": ("raise RuntimeError('x' * 5000)\n", None),
    "missingattr": (SAMPLER.format(name="missingattr"), {"missingattr": "corral_missingattr:plugin"}),
    # its registration fails after it registered sampler=registerraises
    "registerraises": (SAMPLER.format(name="registerraises") + '    raise KeyError("n_envs")\n', None),
    # mistakes corral used to accept in silence
    "validatefalse": (SAMPLER.format(name="validatefalse") + '''

@hookimpl
def corral_validate_config(cfg):
    return cfg.sampler.name != "validatefalse"  # meant to reject sampler=validatefalse: corral ignored it
''', None),
    "registerreturns": ('''
from corral import LocalSampler, hookimpl


@hookimpl
def corral_register(register):
    return [("sampler", "registerreturns")]  # what it meant to register, returned instead of registered
''', None),
    "notcallable": (SAMPLER.format(name="notcallable").replace("LocalSampler, config", '"corral.LocalSampler", config'),
                    None),
    "badname": (SAMPLER.format(name="my sampler"), None),
    # written for another version of corral's hooks
    "unknownhook": (SAMPLER.format(name="unknownhook") + '''

@hookimpl
def corral_epoch_start(trainer, epoch):
    pass
''', None),
    "extraarg": (SAMPLER.format(name="extraarg") + '''

@hookimpl
def corral_epoch_end(trainer, epoch, stats, logger):
    pass
''', None),
    # two distributions with the same entry-point name; one with two entry points naming one module
    "sameep1": (SAMPLER.format(name="sameep1") + '''

@hookimpl
def corral_validate_config(cfg):
    if os.environ.get("CORRAL_TEST_SAY_VALIDATED"):
        raise RuntimeError("sameep1's corral_validate_config ran")
''', {"sameep": "corral_sameep1"}),
    "sameep2": (SAMPLER.format(name="sameep2"), {"sameep": "corral_sameep2"}),
    "twoeps": (SAMPLER.format(name="twoeps") + VALIDATE_RAN.format(name="twoeps"),
               {"twoeps": "corral_twoeps", "twoeps2": "corral_twoeps"}),
    # a healthy plugin, for sweeps
    "good": (SAMPLER.format(name="good"), None),
}


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Every package of :data:`PACKAGES`, installed into a site directory of its own."""
    root = tmp_path_factory.mktemp("corral_bad_plugin_packages")
    out = {}
    for name, (source, entry_points) in PACKAGES.items():
        write_plugin_package(root / name, f"corral-{name}", VERSION, {f"corral_{name}": source}, entry_points)
        out[name] = root / name
    yield out
    shutil.rmtree(root, ignore_errors=True)


def run(args: list[str], cwd: Path, sites: dict[str, Path], *installed: str, **env: str
        ) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it with only the packages ``installed`` (bounded; no CORRAL_* switches)."""
    return subprocess.run(args, cwd=cwd, env=plugin_env([sites[name] for name in installed], **env),
                          capture_output=True, text=True, timeout=TIMEOUT)


def train(tmp_path: Path, sites: dict[str, Path], *installed: str, args: list[str], **env: str
          ) -> subprocess.CompletedProcess[str]:
    """``python train.py <args>`` with its run directory ``tmp_path/run`` (a sweep's ``tmp_path/sweep``)."""
    where = f"hydra.sweep.dir={tmp_path / 'sweep'}" if "-m" in args else f"hydra.run.dir={tmp_path / 'run'}"
    return run([sys.executable, str(TRAIN), *args, where], tmp_path, sites, *installed, **env)


def plugins(tmp_path: Path, sites: dict[str, Path], *installed: str, args: tuple[str, ...] = ()
            ) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "corral.framework.cli", "plugins", *args], tmp_path, sites, *installed)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"--- rc={proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-3000:]}"


def failed_line(name: str, error: str, dist: str | None = None) -> str:
    """The warning line of the plugin ``name`` (of ``corral-<name>``, or ``dist``) that failed to load with ``error``."""
    return (f"corral: warning: corral plugin from {dist or 'corral-' + name} {VERSION} (plugin {name!r}) failed to "
            f"load and was skipped: {error}. Disable it with CORRAL_DISABLE_PLUGINS={name}")


def stderr_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


def assert_refused(proc: subprocess.CompletedProcess[str], tmp_path: Path, error: str, *warnings: str) -> None:
    """Exit 2 with the ``warnings`` then the one ``error`` line, no traceback, and nothing started."""
    assert proc.returncode == 2, output(proc)
    assert stderr_lines(proc) == [*warnings, f"corral: error: {error}"], output(proc)
    assert "Traceback" not in proc.stderr and proc.stdout == "", output(proc)
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists(), output(proc)


# ------------------------------------------------------------------------ plugins whose import fails
IMPORT_FAILURES = {
    "missingdep": "ModuleNotFoundError: No module named 'definitely_not_installed_dep_xyz'",
    "syntaxerr": "SyntaxError: invalid syntax (corral_syntaxerr.py, line 1)",
    "raisesimport": "RuntimeError: cannot read ~/.mine.toml",
    "exits": "SystemExit: 3",
    "longerror": "RuntimeError: " + "x" * (500 - len("RuntimeError: ") - 3) + "...",
    "missingattr": "AttributeError: module 'corral_missingattr' has no attribute 'plugin'",
}


def test_plugins_whose_import_fails_are_one_warning_each_and_the_run_goes_on(tmp_path: Path,
                                                                             sites: dict[str, Path]) -> None:
    """Not chosen, each broken package costs one line naming it, its version, the error (at most 500
    characters) and how to turn it off. Before: a plugin calling ``sys.exit(3)`` while imported ended
    ``train.py`` (and ``corral plugins``) with exit status 3 and not a word."""
    proc = train(tmp_path, sites, *IMPORT_FAILURES, "good", args=["sampler=good", *TINY])
    assert proc.returncode == 0, output(proc)
    lines = stderr_lines(proc)
    assert lines[:-1] == [failed_line(name, error) for name, error in sorted(IMPORT_FAILURES.items())], output(proc)
    assert lines[-1].startswith("corral: completed (n_epochs=1 reached) after 1 epoch | "), output(proc)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["config"]["sampler"]["name"] == "good"


def test_corral_plugins_lists_each_broken_package(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = plugins(tmp_path, sites, *IMPORT_FAILURES, "registerraises", "good", args=("--check",))
    assert proc.returncode == 1 and proc.stderr == "", output(proc)
    failed = proc.stdout.split("\nFAILED PLUGINS\n", 1)[1].splitlines()
    expected = {**IMPORT_FAILURES, "registerraises": "KeyError: 'n_envs'"}
    assert failed == [f"  {name} (corral-{name} {VERSION}): {error}" for name, error in sorted(expected.items())]
    rows = {tuple(line.split()[:3]) for line in proc.stdout.split("\nFAILED PLUGINS\n", 1)[0].splitlines()}
    assert ("sampler", "good", "corral-good") in rows and ("sampler", "registerraises", "corral-registerraises") not in rows


# ---------------------------------------------------------------------- choosing a plugin that failed
def test_choosing_the_option_of_a_plugin_that_failed_while_registering(tmp_path: Path,
                                                                        sites: dict[str, Path]) -> None:
    """The plugin registered sampler=registerraises, then raised: the line names the plugin and why it
    failed. Before: only "sampler has no option 'registerraises'; choose one of ..."."""
    proc = train(tmp_path, sites, "registerraises", args=["sampler=registerraises", *TINY])
    assert_refused(proc, tmp_path, (
        "sampler=registerraises: sampler has no option 'registerraises': it comes from the plugin registerraises "
        f"(corral-registerraises {VERSION}), which failed to load here (KeyError: 'n_envs'); fix the plugin, or install "
        f"a version that loads (pip install --upgrade corral-registerraises); or choose one of {BUILTIN_SAMPLERS}"),
        failed_line("registerraises", "KeyError: 'n_envs'"))


def test_choosing_an_option_while_a_plugin_failed_to_import(tmp_path: Path, sites: dict[str, Path]) -> None:
    """Which options a plugin whose import failed would have registered is not known: the line names it as
    the likely reason."""
    proc = train(tmp_path, sites, "missingdep", args=["sampler=missingdep", *TINY])
    assert_refused(proc, tmp_path, (
        f"sampler=missingdep: sampler has no option 'missingdep': the installed plugin missingdep (corral-missingdep "
        f"{VERSION}) failed to load here, so its options are missing (`corral plugins` says why); if "
        f"sampler=missingdep is one of them, fix the plugin; or choose one of {BUILTIN_SAMPLERS}"),
        failed_line("missingdep", IMPORT_FAILURES["missingdep"]))


def test_a_sweep_over_a_good_and_a_broken_plugin_starts_no_job(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = train(tmp_path, sites, "registerraises", "good", args=["-m", "sampler=good,registerraises", *TINY])
    assert_refused(proc, tmp_path, (
        "sampler=good,registerraises: sampler has no option 'registerraises': it comes from the plugin registerraises "
        f"(corral-registerraises {VERSION}), which failed to load here (KeyError: 'n_envs'); fix the plugin, or install "
        "a version that loads (pip install --upgrade corral-registerraises); or choose one of action_server, "
        "alternating, good, local, multiprocessing, ray"),
        failed_line("registerraises", "KeyError: 'n_envs'"))


def test_without_a_failed_plugin_the_line_is_unchanged(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = train(tmp_path, sites, "good", args=["sampler=nosuch", *TINY])
    assert_refused(proc, tmp_path, (
        "sampler=nosuch: sampler has no option 'nosuch'; choose one of action_server, alternating, good, local, "
        "multiprocessing, ray (a plugin package adds its own; `corral plugins` lists what is installed)"))


# ------------------------------------------------------------- mistakes that were accepted in silence
def test_a_validation_hook_that_returns_false_stops_the_run(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``return False`` meant to reject the config: before, corral ignored it and the run went on."""
    proc = train(tmp_path, sites, "validatefalse", args=["sampler=validatefalse", *TINY])
    assert_refused(proc, tmp_path, (
        f"plugin validatefalse (corral-validatefalse {VERSION}) returned False in corral_validate_config: corral does "
        "not use what corral_validate_config returns, so the run stopped; to reject the config, raise "
        "corral.ConfigError('<what to change>') instead; to accept it, return nothing; fix the plugin, or run without "
        "it: CORRAL_DISABLE_PLUGINS=validatefalse"))


REGISTRATION_MISTAKES = {
    "registerreturns": "PluginError: corral_register returned [('sampler', 'registerreturns')], which corral does "
                       "not use; call register(kind, "
                       "name, factory, config=..., help=...) for each component instead, and return nothing",
    "notcallable": "PluginError: the factory of sampler 'notcallable' is 'corral.LocalSampler' (type str), which "
                   "cannot be called; register the class or function itself (register(kind, name, MyClass, ...), not "
                   "a string or an instance)",
    "badname": "PluginError: the sampler name 'my sampler' cannot be typed as sampler=<name>; rename the option: a "
               "name is a letter or _, then letters, digits, _ and - (e.g. 'my_sampler')",
    "unknownhook": "PluginError: unknown hook(s) corral_epoch_start; corral's hooks are corral_config_searchpath, "
                   "corral_epoch_end, corral_register, corral_run_end, corral_run_start, corral_run_summary, "
                   "corral_validate_config (a misspelt name, or a plugin written for another version of corral: "
                   "corral 0.1.0 is installed)",
    "extraarg": "PluginError: its corral_epoch_end takes logger, which corral does not pass (it passes trainer, epoch, "
                "stats): a plugin written for another version of corral (corral 0.1.0 is installed); update the "
                "plugin, or remove it from its hook function",
}


def test_registration_mistakes_and_outdated_hooks_are_one_warning_each(tmp_path: Path,
                                                                       sites: dict[str, Path]) -> None:
    """Before: a corral_register that returned its registrations, a factory that is a string and a name
    that cannot be typed loaded in silence (the string failed only once a run had made its directory); an
    argument the hook does not pass was pluggy's PluginValidationError text."""
    proc = train(tmp_path, sites, *REGISTRATION_MISTAKES, args=["--cfg", "job"])
    assert proc.returncode == 0, output(proc)
    version = importlib.metadata.version("corral")
    assert stderr_lines(proc) == [failed_line(name, error.replace("corral 0.1.0", f"corral {version}"))
                                  for name, error in sorted(REGISTRATION_MISTAKES.items())], output(proc)


def test_choosing_a_factory_that_cannot_be_called_is_refused_before_the_run(tmp_path: Path,
                                                                            sites: dict[str, Path]) -> None:
    """Before: the run directory was made, then ``AttributeError: 'str' object has no attribute
    'from_worker_factory'`` while building."""
    proc = train(tmp_path, sites, "notcallable", args=["sampler=notcallable", *TINY])
    error = REGISTRATION_MISTAKES["notcallable"]
    assert_refused(proc, tmp_path, (
        "sampler=notcallable: sampler has no option 'notcallable': it comes from the plugin notcallable "
        f"(corral-notcallable {VERSION}), which failed to load here ({error}); fix the plugin, or install a version "
        f"that loads (pip install --upgrade corral-notcallable); or choose one of {BUILTIN_SAMPLERS}"),
        failed_line("notcallable", error))


# ------------------------------------------------------------------------------- entry-point clashes
def test_two_distributions_with_one_entry_point_name(tmp_path: Path, sites: dict[str, Path]) -> None:
    """The second is skipped with a line naming both, and how to pick it (the shared name would turn both
    off); the first stays whole, hooks and source included. Before: pluggy's ValueError listing every
    loaded plugin (~10,000 characters) and advice that turned off both; the first plugin's source was
    dropped, so a line about its hook named no distribution."""
    proc = train(tmp_path, sites, "sameep1", "sameep2", args=["sampler=sameep1", *TINY], CORRAL_TEST_SAY_VALIDATED="1")
    warning = (f"corral: warning: corral plugin from corral-sameep2 {VERSION} (plugin 'sameep') failed to load and "
               "was skipped: PluginError: its entry point is named 'sameep', as is one of corral-sameep1 0.4.0, which "
               "loaded first, so this one is not loaded. Plugin author: give the entry point a name of its own; to "
               "use this plugin instead, disable the other: CORRAL_DISABLE_PLUGINS=corral-sameep1. Disable it with "
               "CORRAL_DISABLE_PLUGINS=corral-sameep2")
    assert proc.returncode == 2, output(proc)
    assert stderr_lines(proc)[0] == warning, output(proc)
    assert stderr_lines(proc)[-1] == (
        f"corral: error: plugin sameep (corral-sameep1 {VERSION}) raised RuntimeError: sameep1's corral_validate_config "
        "ran in corral_validate_config; fix the plugin, or run without it: CORRAL_DISABLE_PLUGINS=sameep"), output(proc)
    picked = train(tmp_path, sites, "sameep1", "sameep2", args=["sampler=sameep2", "--cfg", "job"],
                   CORRAL_DISABLE_PLUGINS="corral-sameep1")
    assert picked.returncode == 0 and "name: sameep2" in picked.stdout and picked.stderr == "", output(picked)


def test_two_entry_points_naming_one_module_keep_the_plugin_whole(tmp_path: Path, sites: dict[str, Path]) -> None:
    """Before: the second entry point's failure unregistered the module the first had loaded, so its
    validation hook (and every lifecycle hook) stopped running, in silence, while its options stayed."""
    proc = train(tmp_path, sites, "twoeps", args=["sampler=twoeps", *TINY], CORRAL_TEST_SAY_VALIDATED="1")
    assert_refused(proc, tmp_path, "twoeps's corral_validate_config ran", failed_line(
        "twoeps2", "PluginError: it names corral_twoeps, which its entry point 'twoeps' already loaded; the plugin "
        "works as 'twoeps'. Plugin author: keep one entry point per plugin module", "corral-twoeps"))
