"""End to end: ``python train.py ...`` and ``corral ...`` in subprocesses, as a user runs them.

Third-party plugins are real distributions from ``tests/data/plugins``, pip-installed into a
temporary directory and made visible through ``PYTHONPATH`` (see ``tests/data/plugins/dists.py``).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Sequence

import pytest
import yaml

from corral.testing.modules import import_path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "train.py"
TIMEOUT = 180
#: A tiny run: one epoch of 200 steps, no evaluation, CSV only.
SMALL = ["trainer.n_epochs=1", "trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]"]


def _dists() -> ModuleType:
    return import_path(REPO / "tests" / "data" / "plugins" / "dists.py", "corral_tests_plugin_dists")


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The test plugin distributions, pip-installed (``--target``) into a temporary directory each."""
    return _dists().install(tmp_path_factory.mktemp("corral_plugin_dists"))


def corral_command() -> list[str]:
    """The ``corral`` console script of this environment."""
    script = Path(sys.executable).parent / "corral"
    return [str(script)] if script.exists() else [sys.executable, "-m", "corral.framework.cli"]


def run(args: Sequence[str], cwd: Path, sites: dict[str, Path], *visible: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a command with only the ``visible`` test plugins installed; never hangs."""
    return subprocess.run(
        list(args), cwd=cwd, env=_dists().subprocess_env(sites, *visible, **env),
        capture_output=True, text=True, timeout=TIMEOUT,
    )


def train(tmp_path: Path, sites: dict[str, Path], *overrides: str, visible: Sequence[str] = (), **env: str
          ) -> subprocess.CompletedProcess[str]:
    """``python train.py <overrides>`` with its run directory in ``tmp_path/run``."""
    return run([sys.executable, str(TRAIN), *overrides, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, sites,
               *visible, **env)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"--- rc={proc.returncode}\n--- stdout:\n{proc.stdout}\n--- stderr:\n{proc.stderr}"


def help_groups(text: str) -> dict[str, list[str]]:
    """The ``group: a, b`` lines of Hydra's ``--help``."""
    section = text.split("== Configuration groups ==", 1)[1].split("== Config ==", 1)[0]
    groups = {}
    for line in section.splitlines():
        if ": " in line and not line.startswith(" "):
            group, options = line.split(": ", 1)
            groups[group.strip()] = [o.strip() for o in options.split(",")]
    return groups


# ---------------------------------------------------------------------------------------- bad input
UNKNOWN_SAMPLER = ("sampler has no option 'nonexistent'; choose one of action_server, alternating, local, "
                   "multiprocessing, ray (a plugin package adds its own; `corral plugins` lists what is installed)")


def test_hydra_flags_may_come_among_the_overrides(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``seed=1 --cfg job trainer.n_epochs=7``: Hydra's parser stopped at the flag (``unrecognized
    arguments: trainer.n_epochs=7``); ``--info`` before an override took it for its value."""
    proc = run([sys.executable, str(TRAIN), "seed=4", "--cfg", "job", "trainer.n_epochs=7"], tmp_path, sites)
    assert proc.returncode == 0, output(proc)
    assert "\nseed: 4\n" in proc.stdout and "\n  n_epochs: 7\n" in proc.stdout, output(proc)
    proc = run([sys.executable, str(TRAIN), "--info", "seed=4"], tmp_path, sites)
    assert proc.returncode == 0 and "Installed Hydra Plugins" in proc.stdout, output(proc)


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["sampler=nonexistent"], f"corral: error: sampler=nonexistent: {UNKNOWN_SAMPLER}"),
        (["logger=[console,nonexistent]"],
         "corral: error: logger=[console,nonexistent]: logger has no option 'nonexistent'; choose one of console, "
         "csv, mlflow, tensorboard, wandb (a plugin package adds its own; `corral plugins` lists what is installed)"),
        (["hydra/launcher=nonexistent"],
         "corral: error: hydra/launcher=nonexistent: hydra/launcher has no option 'nonexistent'; choose one of "
         "basic, joblib, ray, submitit_local, submitit_slurm (Hydra plugin packages add more)"),
        # a number, a boolean or null for a group: Hydra's own ValueError traceback before
        (["sampler=1"], f"corral: error: sampler=1: {UNKNOWN_SAMPLER.replace('nonexistent', '1')}"),
        (["sampler=null"], f"corral: error: sampler=null: {UNKNOWN_SAMPLER.replace('nonexistent', 'null')}"),
        # a plugin's name is not a setting: sampler.name= built the multiprocessing sampler from local's settings
        (["sampler.name=multiprocessing"],
         "corral: error: sampler.name=multiprocessing: a plugin's name comes with its option (sampler.name is "
         "'local') and is not a setting; choose the option with sampler=multiprocessing"),
    ],
)
def test_unknown_option_is_one_line_listing_the_available_ones(
    tmp_path: Path, sites: dict[str, Path], overrides: list[str], line: str
) -> None:
    proc = train(tmp_path, sites, *overrides)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [line], output(proc)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("multirun", [False, True])
@pytest.mark.parametrize("where", ["file", "proc"])
def test_a_run_directory_that_cannot_be_created_is_one_line(tmp_path: Path, sites: dict[str, Path], multirun: bool,
                                                            where: str) -> None:
    """Under a file, or where the file system takes no new directory (``/proc``): one line naming the
    setting, before anything starts, for a run (``hydra.run.dir``) and a sweep (``hydra.sweep.dir``)."""
    (tmp_path / "a_file").write_text("")
    parent = tmp_path / "a_file" if where == "file" else Path("/proc")
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    args = ["-m", "seed=1,2"] if multirun else []
    proc = run([sys.executable, str(TRAIN), *args, *SMALL, f"{key}={parent / 'run'}"], tmp_path, sites)
    reason = f"{parent} is a file, not a directory" if where == "file" else "/proc takes no new directory ("
    assert proc.returncode == 2, output(proc)
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"corral: error: {key}={parent / 'run'}: cannot create the "
                           f"{'sweep' if multirun else 'run'}'s directory {parent / 'run'}: {reason}"), output(proc)
    assert line.endswith(f"; give a directory you can write to, e.g. {key}=outputs/<name>"), output(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # nothing made, nothing left


@pytest.mark.parametrize("multirun", [False, True])
def test_an_empty_run_directory_is_one_line_not_the_current_directory(tmp_path: Path, sites: dict[str, Path],
                                                                     multirun: bool) -> None:
    """``hydra.run.dir=`` made the current directory the run's: progress.csv, snapshots/ and tb/
    were written straight into it."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    args = ["-m", "seed=1,2"] if multirun else []
    proc = run([sys.executable, str(TRAIN), *args, *SMALL, f"{key}="], tmp_path, sites)
    assert proc.returncode == 2, output(proc)
    default = "multirun/<date>/<time>" if multirun else "outputs/<date>/<time>"
    assert proc.stderr.strip().splitlines() == [
        f"corral: error: {key} is empty, which would make the current directory the "
        f"{'sweep' if multirun else 'run'}'s directory; give a directory, or leave {key} out for {default}"
    ], output(proc)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("multirun", "override", "line"), [
    (False, "hydra.run.dir=~/runs/x", "corral: error: hydra.run.dir=~/runs/x: Hydra's override syntax does not take "
                                      "'~' there (character 15); quote the value (key='...') or see "
                                      "https://hydra.cc/docs/1.2/advanced/override_grammar/basic"),
    (True, "env.id=a~b", "corral: error: env.id=a~b: Hydra's override syntax does not take '~' there (character 9); "
                         "quote the value (key='...') or see https://hydra.cc/docs/1.2/advanced/override_grammar/basic"),
    # OmegaConf's words were "hydra.job.chdir=abc: Value 'abc' is not a valid bool (type str)"
    (False, "hydra.job.chdir=abc", "corral: error: hydra.job.chdir must be true or false, got abc; give "
                                   "hydra.job.chdir=true or hydra.job.chdir=false"),
    (False, "trainer.progress=maybe", "corral: error: trainer.progress must be true or false, got maybe; give "
                                      "trainer.progress=true or trainer.progress=false"),
    (True, "hydra.sweeper.max_batch_size=abc",
     "corral: error: hydra.sweeper.max_batch_size=abc: hydra.sweeper.max_batch_size takes a whole number, not 'abc'"),
    # OmegaConf's words were "Value '2.0' of type 'float' could not be converted to Integer"
    (False, "trainer.torch_threads=2e0", "corral: error: trainer.torch_threads=2e0: trainer.torch_threads takes a whole "
                                         "number, not 2e0 (read as 2.0); write trainer.torch_threads=2"),
    # these four were Hydra's two or three lines, or (the deletion) a run with the default in silence
    (False, "+trainer.n_epochs=3", "corral: error: Could not append to config. An item is already at "
                                   "'trainer.n_epochs'; set it with 'trainer.n_epochs=3' (no '+'), or add or override "
                                   "it with '++trainer.n_epochs=3'"),
    (False, "trainer.n_epochs", "corral: error: trainer.n_epochs: Hydra cannot read this override (missing EQUAL at "
                                "'<EOF>'); an override is key=value (see "
                                "https://hydra.cc/docs/1.2/advanced/override_grammar/basic)"),
    (False, "trainer.n_epochs=[1", "corral: error: trainer.n_epochs=[1: no viable alternative at input '[1' "
                                   "(https://hydra.cc/docs/1.2/advanced/override_grammar/basic)"),
    (False, "~trainer.n_epochs", "corral: error: ~trainer.n_epochs: a deleted setting is filled back with its default, "
                                 "so this changes nothing; give trainer.n_epochs a value instead (trainer.n_epochs=..., "
                                 "or trainer.n_epochs=null where it accepts null)"),
    # a true/false setting read a number or a word as true or false in silence (normalize.obs=2 normalised)
    (False, "normalize.obs=2", "corral: error: normalize.obs must be true or false, got 2 (OmegaConf would read it "
                               "as true without a word); give normalize.obs=true or normalize.obs=false"),
    (True, "trainer.progress=true,off", "corral: error: trainer.progress must be true or false, got off (OmegaConf "
                                        "would read it as false without a word); give trainer.progress=true or "
                                        "trainer.progress=false (a value of the sweep trainer.progress=true,off)"),
    # these six were Hydra's two to six lines ("Could not override 'nope'. To append to your config use +nope=1 ...")
    (False, "nope=1", "corral: error: nope is not a setting: the top-level settings are seed and the groups trainer, "
                      "algo, env, policy, sampler, worker, logger, normalize, experiment"),
    (True, "nope=1", "corral: error: nope is not a setting: the top-level settings are seed and the groups trainer, "
                     "algo, env, policy, sampler, worker, logger, normalize, experiment"),
    (False, "hydra.launcher.n_jobs=4", "corral: error: hydra.launcher.n_jobs=4: Hydra's config has no "
                                       "hydra.launcher.n_jobs (Key 'n_jobs' not in 'BasicLauncherConf'); `python "
                                       "train.py --cfg hydra` shows its settings (a launcher's or sweeper's come with "
                                       "choosing it, e.g. hydra/launcher=joblib)"),
    (True, "hydra.nope=1", "corral: error: hydra.nope=1: Hydra's config has no hydra.nope (Key 'nope' not in "
                           "'HydraConf'); `python train.py --cfg hydra` shows its settings (a launcher's or sweeper's "
                           "come with choosing it, e.g. hydra/launcher=joblib)"),
    (False, "+hydra.job.nope=1", "corral: error: +hydra.job.nope=1: Hydra's config has no hydra.job.nope (Key 'nope' "
                                 "not in 'JobConf'), and nothing would read a key added to it; `python train.py --cfg "
                                 "hydra` shows its settings"),
    (True, "+hydra.nope=1", "corral: error: +hydra.nope=1: Hydra's config has no hydra.nope (Key 'nope' not in "
                            "'HydraConf'), and nothing would read a key added to it; `python train.py --cfg hydra` "
                            "shows its settings"),
    (False, "logger.wandb.project=x", "corral: error: logger.wandb.project=x: logger wandb is not among the run's "
                                      "loggers (csv); add it: logger=[csv,wandb] logger.wandb.project=x"),
    (True, "logger.wandb.project=x,y", "corral: error: logger.wandb.project=x: logger wandb is not among the run's "
                                       "loggers (csv); add it: logger=[csv,wandb] logger.wandb.project=x (the sweep's "
                                       "job seed=1 logger.wandb.project=x; no job has started)"),
    # two presets composed in silence, the second's settings winning
    (False, "experiment=[ppo_cartpole,trpo_cartpole]",
     "corral: error: experiment=[ppo_cartpole,trpo_cartpole]: experiment takes one preset, and of a list each preset's "
     "settings would replace the ones before it in silence (trpo_cartpole's win); give one preset (e.g. "
     "experiment=ppo_cartpole), or put the settings you want from ppo_cartpole and trpo_cartpole into one preset file "
     "of your own (conf/experiment/<name>.yaml, added with hydra.searchpath=[file://$PWD/conf])"),
    # OmegaConf's words: "Invalid value assigned: int is not a ListConfig, list or tuple."
    (False, "policy.hidden_sizes=64", "corral: error: policy.hidden_sizes=64: policy.hidden_sizes takes a list, not 64; "
                                      "write it in brackets, e.g. policy.hidden_sizes=[64]"),
    (True, "policy.hidden_sizes=[64],64", "corral: error: policy.hidden_sizes=64: policy.hidden_sizes takes a list, not "
                                          "64; write it in brackets, e.g. policy.hidden_sizes=[64] (a value of the "
                                          "sweep policy.hidden_sizes=[64],64)"),
    # OmegaConf's words: "field 'policy.hidden_sizes' is not Optional"
    (False, "policy.hidden_sizes=null", "corral: error: policy.hidden_sizes=null: policy.hidden_sizes cannot be null; "
                                        "give it a value, or leave it out for its default"),
    # Hydra kept logger=[csv] and dropped the addition without a word
    (False, "+logger=[tensorboard]", "corral: error: +logger=[tensorboard]: logger=[csv] chooses the run's logger "
                                     "options, and Hydra drops an option added beside it; give them in one list: "
                                     "logger=[csv,tensorboard]"),
    (True, "+logger=tensorboard", "corral: error: +logger=tensorboard: logger=[csv] chooses the run's logger options, "
                                  "and Hydra drops an option added beside it; give them in one list: "
                                  "logger=[csv,tensorboard]"),
    # named the group: "algo: Interpolation key 'nope' not found"
    (False, "algo.learning_rate=${nope}", "corral: error: algo.learning_rate=${nope}: the interpolation names nope, "
                                          "which the config does not have; give algo.learning_rate a value, or "
                                          "interpolate a setting the config has (`python train.py --cfg job` lists "
                                          "them)"),
    # Hydra's internal config names, and its advice for a defaults list
    (False, "=1", "corral: error: =1: an override is key=value, and this one has no key before '='; name the setting, "
                  "e.g. seed=1 (`python train.py --help` lists the settings and options)"),
    (False, "+experiment=ppo_cartpole", "corral: error: +experiment=ppo_cartpole: experiment is a config group the run "
                                        "already has, so an option of it is chosen, not added; write "
                                        "experiment=ppo_cartpole, without the +"),
], ids=["unreadable-run-dir", "unreadable-sweep-value", "hydra-type", "bool-as-other-word", "hydra-type-sweep",
        "float-for-int",
        "plus-on-a-setting", "no-value", "unclosed-list", "deleted-setting", "bool-as-number", "bool-as-word-sweep",
        "unknown-key", "unknown-key-sweep", "hydra-key", "hydra-key-sweep", "added-hydra-key",
        "added-hydra-key-sweep", "unused-logger", "unused-logger-sweep", "preset-list", "scalar-for-list",
        "scalar-for-list-sweep", "null-for-a-value", "addition-dropped", "addition-dropped-sweep", "missing-interpolation", "no-key", "plus-on-a-group"])
def test_an_override_hydra_cannot_read_or_type_is_one_line_before_anything(
    tmp_path: Path, sites: dict[str, Path], multirun: bool, override: str, line: str
) -> None:
    """Hydra's own settings and a sweep's values are checked too (they reached Hydra's format and its
    HYDRA_FULL_ERROR hint): the character Hydra cannot read, or the type, in one line."""
    args = ["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"] if multirun else []
    proc = run([sys.executable, str(TRAIN), *args, *SMALL, override], tmp_path, sites)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [line], output(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("multirun", [False, True])
def test_a_key_given_twice_is_one_warning_line_naming_the_value_used(tmp_path: Path, sites: dict[str, Path],
                                                                     multirun: bool) -> None:
    """Hydra keeps the last of two values for one key and drops the first without a word (``seed=1
    seed=2`` trained seed 2 only, ``sampler=ray sampler=local`` ran locally). A layered command line
    (``$COMMON seed=2``) is a fair use, so it is a warning, not an error."""
    if multirun:
        args = ["-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", "seed=1", "seed=3"]
        line = ("corral: warning: seed is given twice (seed=1, then seed=3); the sweep uses the last, seed=3 (to run "
                "each: seed=1,3)")
    else:
        args = [f"hydra.run.dir={tmp_path / 'run'}", "seed=1", "seed=2", "seed=3"]
        line = ("corral: warning: seed is given 3 times (seed=1, then seed=2, then seed=3); the run uses the last, "
                "seed=3 (to run each: train.py -m seed=1,2,3)")
    proc = run([sys.executable, str(TRAIN), *args, *SMALL], tmp_path, sites)
    assert proc.returncode == 0, output(proc)
    assert proc.stderr.splitlines()[0] == line, output(proc)
    assert proc.stderr.count("corral: warning:") == 1, output(proc)
    run_dir = tmp_path / ("sweep/0" if multirun else "run")
    assert "seed: 3" in (run_dir / ".hydra" / "config.yaml").read_text().splitlines()
    assert not (tmp_path / "sweep" / "1").exists()


def test_a_preset_with_a_component_swapped_is_one_line_naming_the_preset(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``experiment=sac_halfcheetah algo=ppo worker=default``: the preset's settings for SAC and the
    fragment worker were one line each, each reading as if the command line had set it."""
    proc = train(tmp_path, sites, *SMALL, "experiment=sac_halfcheetah", "algo=ppo", "worker=default")
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [
        "corral: error: experiment=sac_halfcheetah sets algo.min_buffer_size for its algo=sac; worker.n_envs, "
        "worker.timesteps_per_call for its worker=fragment, which algo=ppo worker=default does not have: the preset is "
        "made for algo=sac worker=fragment; leave out algo=ppo worker=default, drop those settings "
        "(~algo.min_buffer_size ~worker.n_envs ~worker.timesteps_per_call), or use a preset made for it (`corral "
        "plugins` lists each option's settings)"], output(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_presets_setting_for_another_option_can_be_dropped(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``~worker.backend`` after ``worker=vec`` drops the preset's setting for its vector worker, which
    worker=vec does not have (it was refused as a deletion that changes nothing); deleting a setting
    the chosen option has is still refused."""
    proc = train(tmp_path, sites, *SMALL, "experiment=ppo_cartpole_vector", "worker=vec", "~worker.backend")
    assert proc.returncode == 0, output(proc)
    worker = yaml.safe_load((tmp_path / "run" / ".hydra" / "config.yaml").read_text())["worker"]
    assert worker["name"] == "vec" and "backend" not in worker and worker["n_envs"] > 1  # the preset's n_envs stays
    kept = run([sys.executable, str(TRAIN), *SMALL, "worker=vec", "~worker.n_envs", f"hydra.run.dir={tmp_path / 'kept'}"],
               tmp_path, sites)
    assert kept.returncode == 2, output(kept)
    assert kept.stderr.strip().splitlines() == [
        "corral: error: ~worker.n_envs: a deleted setting is filled back with its default, so this changes nothing; "
        "give worker.n_envs a value instead (worker.n_envs=..., or worker.n_envs=null where it accepts null)"]


@pytest.mark.parametrize("multirun", [False, True])
def test_adding_a_logger_the_run_has_is_one_warning_line(tmp_path: Path, sites: dict[str, Path], multirun: bool) -> None:
    """``+logger=[csv]`` appends csv to the default loggers, where it already is: Hydra accepts it and
    the run logs as it would without it."""
    args = ["-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", "seed=1,2"] if multirun else [f"hydra.run.dir={tmp_path / 'run'}"]
    small = [o for o in SMALL if not o.startswith("logger=")]
    proc = run([sys.executable, str(TRAIN), *args, *small, "+logger=[csv]"], tmp_path, sites)
    assert proc.returncode == 0, output(proc)
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [
        "corral: warning: +logger=[csv] changes nothing: the run's logger list (console, csv, tensorboard) already "
        "has csv; to have only csv, write logger=[csv], without the +"], output(proc)


def test_a_sweeps_setting_in_a_single_run_is_one_warning_line_each(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``hydra/launcher=joblib hydra.launcher.n_jobs=2`` without ``-m`` ran one job as if they were not
    there: a launcher, a sweeper and a sweep directory are read by a multirun only."""
    proc = train(tmp_path, sites, *SMALL, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                 f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode == 0, output(proc)
    tail = ("has no effect without -m: Hydra's launcher, sweeper and sweep directory are a multirun's; add -m to run "
            "a sweep")
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [
        f"corral: warning: hydra/launcher=joblib {tail}", f"corral: warning: hydra.launcher.n_jobs=2 {tail}",
        f"corral: warning: hydra.sweep.dir={tmp_path / 'sweep'} {tail}"], output(proc)
    assert (tmp_path / "run" / "summary.json").is_file() and not (tmp_path / "sweep").exists()


def test_a_single_runs_directory_in_a_sweep_is_one_warning_line(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``-m seed=1,2 hydra.run.dir=x`` put the jobs under ``multirun/<date>/<time>`` without a word: a
    sweep's jobs go under ``hydra.sweep.dir``."""
    proc = run([sys.executable, str(TRAIN), "-m", "seed=1", *SMALL, "hydra.run.dir=mine"], tmp_path, sites)
    assert proc.returncode == 0, output(proc)
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [
        "corral: warning: hydra.run.dir=mine has no effect with -m: a sweep's jobs go under hydra.sweep.dir, one "
        "directory each; give hydra.sweep.dir=mine instead"], output(proc)
    assert not (tmp_path / "mine").exists() and len(list((tmp_path / "multirun").glob("*/*/0/summary.json"))) == 1


def test_a_key_given_twice_beside_a_mistake_is_still_one_error_line(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = train(tmp_path, sites, "hydra.job.name=a", "hydra.job.name=b", *SMALL, "trainer.n_epochs=0")
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == ["corral: error: trainer.n_epochs must be >= 1, got 0"], output(proc)


@pytest.mark.parametrize("flag", [["--cfg", "job"], ["--help"]])
def test_an_unknown_option_with_a_hydra_flag_is_one_line(tmp_path: Path, sites: dict[str, Path],
                                                         flag: list[str]) -> None:
    proc = run([sys.executable, str(TRAIN), *flag, "sampler=nonexistent"], tmp_path, sites)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [f"corral: error: sampler=nonexistent: {UNKNOWN_SAMPLER}"], output(proc)
    assert proc.stdout == "", output(proc)


@pytest.mark.parametrize("flag", [["--cfg", "job"], ["--help"], ["--info", "config"]])
def test_a_value_of_the_wrong_type_with_a_hydra_flag_is_one_line(tmp_path: Path, sites: dict[str, Path],
                                                                 flag: list[str]) -> None:
    """Hydra printed its multi-line composition error (and its HYDRA_FULL_ERROR hint) for these; the
    line is the one a run gets, also for a resume's override."""
    (tmp_path / "old").mkdir()
    for given in (["trainer.n_epochs=abc"], [f"trainer.resume={tmp_path / 'old'}", "trainer.n_epochs=abc"]):
        proc = run([sys.executable, str(TRAIN), *flag, *given], tmp_path, sites)
        assert proc.returncode == 2, output(proc)
        assert proc.stderr.strip().splitlines() == [
            "corral: error: trainer.n_epochs=abc: trainer.n_epochs takes a whole number, not 'abc'"], output(proc)
        assert proc.stdout == "", output(proc)


FLAGS = "`train.py --help` lists its flags, and a setting is key=value"


@pytest.mark.parametrize(("args", "line"), [
    (["--nope", "seed=2"], f"unrecognized arguments: --nope; {FLAGS}"),
    (["--cfg"], f"argument --cfg/-c: expected one argument; {FLAGS}"),
    (["--cfg", "jobs"], f"argument --cfg/-c: invalid choice: 'jobs' (choose from 'job', 'hydra', 'all'); {FLAGS}"),
    (["-m", "seed=1,2", "--cfg", "job"], "-m and --cfg cannot be given together: each says what train.py does (run, "
                                        "sweep, show the config, show information); give one of them"),
    (["--info", "nope"], "nope: Hydra cannot read this override (missing EQUAL at '<EOF>'); an override is key=value "
                         "(see https://hydra.cc/docs/1.2/advanced/override_grammar/basic)"),
], ids=["unknown-flag", "no-value", "wrong-value", "two-modes", "info-with-a-word"])
def test_a_flag_mistake_is_one_line(tmp_path: Path, sites: dict[str, Path], args: list[str], line: str) -> None:
    """Hydra printed its usage block (seven lines) for a flag it does not know, and a traceback for
    ``-m --cfg job`` and for ``--info nope`` (``nope`` is an override to it)."""
    proc = run([sys.executable, str(TRAIN), *args], tmp_path, sites)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [f"corral: error: {line}"], output(proc)
    assert proc.stdout == "" and not any(tmp_path.glob("*/")), output(proc)


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (["hydra/launcher=submitit_slurm", "seed=1,2"],
         "corral: error: hydra/launcher=submitit_slurm submits each job to SLURM, and this machine has no `srun` on "
         "PATH: run the sweep on a SLURM login node, or rehearse it here with hydra/launcher=submitit_local"),
        (["experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=0"],
         "corral: error: hydra.sweeper.n_trials must be an integer >= 1, got 0"),
        (["hydra/sweeper=optuna", "hydra.sweeper.n_jobs=-2", "seed=1,2"],
         "corral: error: hydra.sweeper.n_jobs must be an integer >= 1, got -2"),
        # the sampler and pruner are built before any job (Hydra's four lines once the sweep had started)
        (["experiment=ppo_cartpole_optuna", "hydra.sweeper.sampler.seed=abc"],
         "corral: error: hydra.sweeper.sampler: optuna.samplers.TPESampler cannot be built from its settings "
         "(TypeError: Cannot cast scalar from dtype('<U3') to dtype('int64') according to the rule 'safe'); check "
         "hydra.sweeper.sampler.*"),
        (["experiment=ppo_cartpole_optuna", "hydra.sweeper.pruner={_target_:optuna.pruners.MedianPruner,n_startup_trials:-1}"],
         "corral: error: hydra.sweeper.pruner: optuna.pruners.MedianPruner cannot be built from its settings "
         "(ValueError: Number of startup trials cannot be negative, but got n_startup_trials=-1.); check "
         "hydra.sweeper.pruner.*"),
        (["hydra/launcher=ray", "hydra.launcher.max_concurrent_jobs=0", "seed=1,2"],
         "corral: error: hydra.launcher.max_concurrent_jobs must be >= 1 or null, got 0"),
        # Optuna's search space and settings: each was a traceback from Optuna or Hydra, or a failed trial each
        (["experiment=ppo_cartpole_optuna", "algo.learning_rate=interval(0.1,0.01)"],
         "corral: error: algo.learning_rate=interval(0.1,0.01): the interval's low end 0.1 is above its high end 0.01"),
        (["experiment=ppo_cartpole_optuna", "algo.learning_rate=tag(log,interval(0,0.1))"],
         "corral: error: algo.learning_rate=tag(log,interval(0,0.1)): `low > 0` must hold for `log=True`, but got "
         "(low=0.0, high=0.1)."),
        (["experiment=ppo_cartpole_optuna", "algo.clip_range=interval(-1,0.3)"],
         "corral: error: algo.clip_range must be > 0, got -1.0 (an end of the search space of algo.clip_range)"),
        (["experiment=ppo_cartpole_optuna", "algo.nope=choice(1,2)"],
         "corral: error: algo.nope is not a setting: algo=ppo has no setting 'nope'; its settings are algo.discount, "
         "algo.gae_lambda, algo.learning_rate, algo.n_epochs, algo.minibatch_size, algo.clip_range, algo.vf_coef, "
         "algo.ent_coef, algo.max_grad_norm, algo.normalize_advantages, algo.target_kl, algo.vf_hidden_sizes, "
         "algo.anneal_lr (`corral plugins` lists every option's settings) (an end of the search space of algo.nope)"),
        (["experiment=ppo_cartpole_optuna", "hydra.sweeper.direction=up"],
         "corral: error: hydra.sweeper.direction must be maximize or minimize (train.py's objective is the final "
         "evaluation return: maximize), got 'up'"),
        # the objective is the final evaluation return: with evaluation off it was the training return, in silence
        (["experiment=ppo_cartpole_optuna"],  # SMALL sets trainer.eval_every=0
         "corral: error: trainer.eval_every=0: the Optuna objective is each trial's final evaluation return, and with "
         "evaluation off a trial has none (it would be ranked by its training return); set trainer.eval_every > 0 (an "
         "evaluation also runs after the last epoch)"),
        (["hydra/sweeper=optuna", "seed=1"],
         "corral: error: hydra.sweeper=optuna has nothing to search: give hydra.sweeper.params or a search space on "
         "the command line, e.g. algo.learning_rate='tag(log, interval(1e-4, 1e-2))'"),
        (["experiment=ppo_cartpole_optuna", "hydra.sweeper.params.algo.learning_rate=interval(0.1,1)"],
         "corral: error: hydra.sweeper.params.algo.learning_rate=interval(0.1,1): Hydra reads this as a sweep over "
         "its own settings; give the search space as algo.learning_rate='interval(0.1,1)' (or quote it: "
         "'hydra.sweeper.params.algo.learning_rate=\"interval(0.1,1)\"')"),
        (["hydra.job.chdir=true,false", "seed=1"],
         "corral: error: hydra.job.chdir=true,false: Hydra cannot sweep over its own settings (hydra.*); give one value"),
    ],
)
def test_a_sweep_its_launcher_or_sweeper_cannot_run_is_one_line_before_any_job(
    tmp_path: Path, sites: dict[str, Path], overrides: list[str], line: str
) -> None:
    if "hydra/launcher=submitit_slurm" in overrides and shutil.which("srun"):
        pytest.skip("this machine has SLURM's srun")  # only the SLURM case needs a machine without it
    proc = train(tmp_path, sites, "-m", *overrides, *SMALL)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [line], output(proc)
    assert not (tmp_path / "multirun").exists()  # no sweep directory, no job


@pytest.mark.parametrize(("overrides", "line"), [
    (["env.max_episode_length=50,nope"],
     "corral: error: env.max_episode_length=nope: env.max_episode_length takes a whole number, not 'nope' "
     "(a value of the sweep env.max_episode_length=50,nope)"),
    (["seed=1,2", "algo.n_epochs=range(1,3)", "trainer.torch_threads=1,x"],
     "corral: error: trainer.torch_threads=x: trainer.torch_threads takes a whole number, not 'x' "
     "(a value of the sweep trainer.torch_threads=1,x)"),
])
def test_a_sweep_value_of_the_wrong_type_is_one_line_before_any_job(
    tmp_path: Path, sites: dict[str, Path], overrides: list[str], line: str
) -> None:
    proc = train(tmp_path, sites, "-m", *overrides, *SMALL)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [line], output(proc)
    assert not (tmp_path / "multirun").exists()


def test_a_setting_without_default_must_be_given(tmp_path: Path, sites: dict[str, Path]) -> None:
    # env=gym has no env.id: say which setting, not what gymnasium makes of OmegaConf's '???'
    proc = train(tmp_path, sites, "env=gym", *SMALL)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [
        "corral: error: env.id must be set: env=gym has no default for it (gymnasium environment id, "
        "e.g. CartPole-v1); add env.id=<value>"], output(proc)
    assert not (tmp_path / "run").exists()


def test_a_setting_a_worker_cannot_run_is_one_line(tmp_path: Path, sites: dict[str, Path]) -> None:
    # A sampler's daemon worker processes cannot start worker.backend=async's environment processes: one
    # line before anything starts (no run directory), not a worker's failure once the run is under way.
    from corral.framework.vector_env import async_in_daemon_message

    proc = train(tmp_path, sites, "sampler=multiprocessing", "worker=vector", "worker.backend=async",
                 "worker.n_envs=2", *SMALL)
    assert proc.returncode == 2, output(proc)
    errors = [x for x in proc.stderr.splitlines() if x.strip()]
    assert errors == [f"corral: error: {async_in_daemon_message('sampler=multiprocessing')}"], output(proc)
    assert not (tmp_path / "run").exists()


def test_more_async_environments_than_the_memory_holds_is_one_line_before_any_process(
        tmp_path: Path, sites: dict[str, Path]) -> None:
    # worker.backend=async starts one process per environment: thousands of them met the kernel's OOM
    # killer, which ends the run without a line.
    from corral.framework.memory import available_memory_mib
    from corral.framework.vector_env import ASYNC_ENV_PROCESS_MIB

    available = available_memory_mib()
    if available is None:
        pytest.skip("/proc/meminfo does not say how much memory is available")
    n_envs = int(available // ASYNC_ENV_PROCESS_MIB) + 1000
    proc = train(tmp_path, sites, "worker=vector", "worker.backend=async", f"worker.n_envs={n_envs}", *SMALL)
    assert proc.returncode == 2, output(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"corral: error: worker.n_envs={n_envs}: {n_envs} environment processes (worker.backend=async) need at "
        "least "), output(proc)
    assert lines[0].endswith("give fewer, or worker.backend=sync (or native), which step them in the worker's "
                             "process"), output(proc)
    assert not (tmp_path / "run").exists()


def test_a_backend_that_cannot_make_the_environment_is_one_line_before_the_run_directory(
        tmp_path: Path, sites: dict[str, Path]) -> None:
    # Found by the worker inside the run before ("local sampler: worker 0 could not apply the environment
    # update: ..."), which left a run directory with a failed summary.
    proc = train(tmp_path, sites, "worker=vector", "env=bandits", *SMALL)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.splitlines() == [
        "corral: error: worker.backend=native makes its environments from a gymnasium id, but env=bandits is not one "
        "(it makes its environments itself); use worker.backend=sync (or async) for it"], output(proc)
    assert not (tmp_path / "run").exists()


def test_a_sweep_naming_an_unknown_option_stops_before_any_job(tmp_path: Path, sites: dict[str, Path]) -> None:
    sweep = tmp_path / "sweep"
    proc = run([sys.executable, str(TRAIN), "-m", "seed=1,2", "sampler=local,nonexistent", *SMALL,
                f"hydra.sweep.dir={sweep}"], tmp_path, sites)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [
        f"corral: error: sampler=local,nonexistent: {UNKNOWN_SAMPLER}"], output(proc)
    assert not sweep.exists()  # no job ran, not even the valid ones before it


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # worker=default has no n_envs: say so, and which workers have it
        (["worker.n_envs=abc"], "corral: error: worker.n_envs is not a setting: worker=default has no setting 'n_envs'"),
        (["worker=vec", "worker.n_envs=abc"],
         "corral: error: worker.n_envs=abc: worker.n_envs takes a whole number, not 'abc'\n"),
        (["worker=vec", "worker.n_envs=0"], "corral: error: worker.n_envs must be >= 1, got 0\n"),
    ],
)
def test_bad_value_is_rejected_before_training(
    tmp_path: Path, sites: dict[str, Path], overrides: list[str], message: str
) -> None:
    proc = train(tmp_path, sites, *overrides, *SMALL)
    assert proc.returncode == 2, output(proc)
    assert message in proc.stderr, output(proc)
    assert not (tmp_path / "run").exists()  # checked before Hydra creates the run directory
    assert "worker.n_envs" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "progress.csv").exists()


def test_a_run_or_sweep_directory_that_holds_runs_is_not_overwritten(tmp_path: Path, sites: dict[str, Path]) -> None:
    """Running again into a directory that holds a run (a fixed hydra.run.dir in a script) or an
    earlier sweep's jobs is refused in one line, not overwritten; trainer.resume still continues it."""
    proc = train(tmp_path, sites, *SMALL)
    assert proc.returncode == 0, output(proc)
    rows = (tmp_path / "run" / "progress.csv").read_text()
    again = train(tmp_path, sites, *SMALL)
    assert again.returncode == 2, output(again)
    run_dir = tmp_path / "run"
    assert again.stderr.splitlines() == [
        f"corral: error: hydra.run.dir={run_dir}: {run_dir} already holds a run, and a new run there would overwrite "
        f"its progress.csv and snapshots; continue it with trainer.resume={run_dir}, or give another directory"]
    assert (tmp_path / "run" / "progress.csv").read_text() == rows  # untouched
    sweep = tmp_path / "sweep"
    first = run([sys.executable, str(TRAIN), "-m", "seed=1", *SMALL, f"hydra.sweep.dir={sweep}"], tmp_path, sites)
    assert first.returncode == 0, output(first)
    second = run([sys.executable, str(TRAIN), "-m", "seed=2,3", *SMALL, f"hydra.sweep.dir={sweep}"], tmp_path, sites)
    assert second.returncode == 2, output(second)
    assert second.stderr.splitlines() == [
        f"corral: error: hydra.sweep.dir={sweep}: {sweep} already holds the jobs of an earlier sweep (0), and this "
        "sweep's jobs would overwrite them; give another directory (the default, multirun/<date>/<time>, is new each "
        "time)"], output(second)
    assert json.loads((sweep / "0" / "summary.json").read_text())["overrides"][0] == "seed=1"
    # A branch (trainer.resume=<run> with a hydra.run.dir of its own) into a directory that holds another
    # run: accepted before, and the branch mixed its copied history with that run's rows and snapshots.
    other = tmp_path / "other"
    proc = run([sys.executable, str(TRAIN), *SMALL, f"hydra.run.dir={other}"], tmp_path, sites)
    assert proc.returncode == 0, output(proc)
    other_rows = (other / "progress.csv").read_text()
    branch = run([sys.executable, str(TRAIN), f"trainer.resume={run_dir}", "trainer.n_epochs=2",
                  f"hydra.run.dir={other}"], tmp_path, sites)
    assert branch.returncode == 2, output(branch)
    assert branch.stderr.splitlines() == [
        f"corral: error: hydra.run.dir={other}: {other} already holds a run, and a branch of {run_dir} there would mix "
        "the two runs' progress.csv and snapshots; give the branch a new directory, or continue that run itself with "
        f"trainer.resume={other}"], output(branch)
    assert (other / "progress.csv").read_text() == other_rows and sorted(os.listdir(other / "snapshots")) == [
        "epoch_000001.pt", "latest"]
    for where in (tmp_path / "new", run_dir):  # a new directory, and the run's own (in place), still resume
        proc = run([sys.executable, str(TRAIN), f"trainer.resume={run_dir}", "trainer.n_epochs=2",
                    f"hydra.run.dir={where}"], tmp_path, sites)
        assert proc.returncode == 0 and "(n_epochs=2 reached) after 2 epochs" in proc.stderr, output(proc)


def test_a_resumes_bad_override_is_one_line_before_the_run_is_touched(tmp_path: Path, sites: dict[str, Path]) -> None:
    """A resume's overrides get the one-line errors of a new run, before anything is written into the run
    resumed (they reached Hydra's multi-line report, or were checked only once the run's ``.hydra/resume-<time>/``
    was written), for a run and for every job of a sweep of resumes."""
    proc = train(tmp_path, sites, *SMALL)
    assert proc.returncode == 0, output(proc)
    run_dir = tmp_path / "run"
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    resume = [sys.executable, str(TRAIN), f"trainer.resume={run_dir}"]
    for bad, line in [
        ("trainer.n_epochs=abc", "trainer.n_epochs=abc: trainer.n_epochs takes a whole number, not 'abc'"),
        ("logger=[nope]", "logger=[nope]: logger has no option 'nope'; choose one of console, csv, mlflow, "
                          "tensorboard, wandb (a plugin package adds its own; `corral plugins` lists what is installed)"),
        ("trainer.batch_size=-5", "trainer.batch_size must be >= 1, got -5"),
        ("algo.learning_rate=0.1", "trainer.resume continues a run with the config it was started with, and these "
                                   "overrides would change it: algo.learning_rate=0.1 (the run has "
                                   "algo.learning_rate=0.0003). A resume may change trainer.*, the loggers, the "
                                   "sampler (with the same sampler.n_workers) and normalize.update (freeze or thaw "
                                   "the statistics); drop the others, or start a new run without trainer.resume"),
    ]:
        proc = run([*resume, bad], tmp_path, sites)
        assert proc.returncode == 2, output(proc)
        assert proc.stderr.splitlines() == [f"corral: error: {line}"], output(proc)
        assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before, bad  # no .hydra/resume-<time>/
    sweep = tmp_path / "sweep"
    proc = run([*resume, "-m", "trainer.n_epochs=2,3", "trainer.batch_size=200,-5", f"hydra.sweep.dir={sweep}"],
               tmp_path, sites)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.splitlines() == ["corral: error: trainer.batch_size must be >= 1, got -5 (the sweep's job "
                                        "trainer.n_epochs=2 trainer.batch_size=-5; no job has started)"], output(proc)
    assert not sweep.exists()
    proc = run([*resume, "trainer.n_epochs=2"], tmp_path, sites)  # and a good one resumes
    assert proc.returncode == 0 and "(n_epochs=2 reached) after 2 epochs" in proc.stderr, output(proc)


def test_either_limit_may_be_null_but_not_both(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``trainer.n_epochs=null`` trains until ``trainer.max_env_steps`` (SB3's total_timesteps); both
    null is one line before the run directory exists, not a run that never stops."""
    rest = ["trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]"]
    proc = train(tmp_path, sites, "trainer.n_epochs=null", "trainer.max_env_steps=null", *rest)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip() == ("corral: error: trainer.n_epochs and trainer.max_env_steps are both null, so the "
                                   "run would never stop; set one of them (e.g. trainer.max_env_steps=100000)"), output(proc)
    assert not (tmp_path / "run").exists()
    proc = train(tmp_path, sites, "trainer.n_epochs=null", "trainer.max_env_steps=500", *rest)
    assert proc.returncode == 0, output(proc)
    assert "(max_env_steps=500 reached)" in proc.stderr, output(proc)
    rows = (tmp_path / "run" / "progress.csv").read_text().splitlines()[1:]
    assert len(rows) == 3  # 200-step epochs until the one that reaches 500


@pytest.mark.parametrize("worker", [["worker=fragment", "worker.n_envs=4", "worker.timesteps_per_call=50"],
                                    ["worker=vector", "worker.n_envs=4", "worker.timesteps_per_call=50"]],
                         ids=["fragment", "vector"])
def test_ppo_trains_from_fragments(tmp_path: Path, sites: dict[str, Path], worker: list[str]) -> None:
    """PPO learns from fragments cut at the end of each rollout (as SB3's n_steps): every epoch gets
    at least batch_size steps in one rollout per worker, and episodes spanning rollouts are counted once."""
    proc = train(tmp_path, sites, "algo=ppo", *worker, "trainer.n_epochs=3", "trainer.batch_size=200",
                 "trainer.eval_every=0", "logger=[csv]")
    assert proc.returncode == 0, output(proc)
    with open(tmp_path / "run" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    steps = [int(float(r["env_steps"])) for r in rows]
    assert all(200 <= b - a < 200 + 4 for a, b in zip([0, *steps], steps)), steps  # one rollout each, no second
    assert all(float(r["ppo/explained_variance"]) == float(r["ppo/explained_variance"]) for r in rows)


def test_ppo_trains_from_carried_whole_episodes(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``worker=vector worker.carry_episodes=true``: whole episodes, environments kept running across
    rollouts; every epoch gets at least batch_size steps, and local and multiprocessing (2 workers each)
    train on the same episodes."""
    rows = {}
    for sampler in ("local", "multiprocessing"):
        run = tmp_path / sampler
        run.mkdir()
        proc = train(run, sites, "algo=ppo", "worker=vector", "worker.n_envs=4", "worker.carry_episodes=true",
                     f"sampler={sampler}", "sampler.n_workers=2", "trainer.n_epochs=3", "trainer.batch_size=200",
                     "trainer.eval_every=0", "logger=[csv]")
        assert proc.returncode == 0, output(proc)
        with open(run / "run" / "progress.csv") as f:
            rows[sampler] = list(csv.DictReader(f))
    steps = [int(float(r["env_steps"])) for r in rows["local"]]
    assert len(steps) == 3 and all(b - a >= 200 for a, b in zip([0, *steps], steps)), steps
    key = ("env_steps", "train/return_mean", "train/n_episodes", "loss/policy", "loss/value")
    assert [[r[k] for k in key] for r in rows["local"]] == [[r[k] for k in key] for r in rows["multiprocessing"]]


def test_carry_episodes_with_fragments_is_one_line(tmp_path: Path, sites: dict[str, Path]) -> None:
    """Whole carried episodes and fragments together: refused before anything runs, in one line."""
    proc = train(tmp_path, sites, "worker=vector", "worker.carry_episodes=true", "worker.timesteps_per_call=8", *SMALL)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr == ("corral: error: worker.carry_episodes=true returns whole episodes but "
                           "worker.timesteps_per_call=8 returns fragments; set one of them\n"), output(proc)
    assert not (tmp_path / "run" / "progress.csv").exists()


def test_an_option_the_vector_backend_would_ignore_is_one_warning_line(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``worker.num_threads`` is EnvPool's: on the native backend it would be ignored, so the run says so
    in one line before it starts."""
    proc = train(tmp_path, sites, "worker=vector", "worker.num_threads=2", *SMALL)
    assert proc.returncode == 0, output(proc)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("corral: warning:")]
    assert warnings == ["corral: warning: worker.num_threads=2 has no effect while worker.backend=native: it applies "
                        "only with worker.backend=envpool; set that, or leave worker.num_threads at its default (0)"]
    assert proc.stderr.startswith(warnings[0]), output(proc)  # before anything runs


@pytest.mark.parametrize("multirun", [False, True])
def test_a_warning_logged_while_training_is_one_corral_line(tmp_path: Path, sites: dict[str, Path],
                                                            multirun: bool) -> None:
    """A warning corral logs while it trains (here: minibatches larger than the batch) is one ``corral:
    warning:`` line on stderr (after ``[job N] `` in a sweep), not Hydra's ``[time][module][WARNING] -``
    format; the run's corral.log keeps the record with its time and logger name."""
    warning = ("corral: warning: algo.minibatch_size=100000 is larger than the batch of 220 steps this update learns "
               "from, so each gradient step uses the whole batch; lower algo.minibatch_size or raise "
               "trainer.batch_size")
    args = ["-m", "seed=1", f"hydra.sweep.dir={tmp_path / 'sweep'}"] if multirun else [f"hydra.run.dir={tmp_path / 'run'}"]
    proc = run([sys.executable, str(TRAIN), *args, "algo.minibatch_size=100000", *SMALL, "logger=[console,csv]",
                "trainer.progress=false"], tmp_path, sites)
    assert proc.returncode == 0, output(proc)
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "larger than the batch" in line]
    assert said == [f"[job 0] {warning}" if multirun else warning], output(proc)
    assert said[0] in proc.stderr.splitlines()
    log = (tmp_path / ("sweep/0" if multirun else "run") / "corral.log").read_text()
    assert "][corral.rl.on_policy][WARNING] - corral: algo.minibatch_size=100000 is larger" in log, log


def test_a_keyword_the_environment_does_not_take_is_one_line(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = train(tmp_path, sites, "env.kwargs.foo=1", *SMALL)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr == ("corral: error: environment EnvFactory('CartPole-v1', kwargs={'foo': 1}) does not take the "
                           "keyword argument 'foo': CartPoleEnv takes sutton_barto_reward, render_mode (and gymnasium.make: "
                           "max_episode_steps, disable_env_checker); check env.kwargs\n"), output(proc)
    assert not (tmp_path / "run").exists()  # said before the run starts
    # a constructor that takes **kwargs and hands them on (env=cpu_heavy, MuJoCo's): the same, before the run
    # (it failed inside the run, after its directory was made)
    proc = train(tmp_path, sites, "env=cpu_heavy", "+env.kwargs.foo=1", *SMALL)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr == ("corral: error: environment EnvFactory('corral.plugins.envs.cpu_heavy:corral/CPUHeavyCartPole"
                           "-v1', kwargs={'work': 3000, 'foo': 1}) does not take these keyword arguments: CartPoleEnv."
                           "__init__() got an unexpected keyword argument 'foo'; check env.kwargs\n"), output(proc)
    assert not (tmp_path / "run").exists()


def test_an_episode_limit_above_the_environments_own_is_one_warning_line(tmp_path: Path, sites: dict[str, Path]) -> None:
    """CartPole-v1's TimeLimit (500) ends its episodes before ``env.max_episode_length=1000`` would: the
    run says so, and how to lift it, instead of accepting a value that does nothing; with the limit
    lifted through ``env.kwargs.max_episode_steps`` there is nothing to say."""
    proc = train(tmp_path, sites, "env.max_episode_length=1000", *SMALL)
    assert proc.returncode == 0, output(proc)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("corral: warning:")]
    assert warnings == ["corral: warning: env.max_episode_length=1000 is above CartPole-v1's own time limit of 500 "
                        "steps, which ends its episodes first; for longer episodes raise that limit too with "
                        "env.kwargs.max_episode_steps=1000 (gymnasium.make's argument)"], output(proc)
    shutil.rmtree(tmp_path / "run")
    proc = train(tmp_path, sites, "env.max_episode_length=1000", "env.kwargs.max_episode_steps=1000", *SMALL)
    assert proc.returncode == 0, output(proc)
    assert "corral: warning:" not in proc.stderr, output(proc)


def test_a_value_its_option_would_ignore_is_one_warning_line(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``trainer.video_every`` only matters when the run evaluates: with ``trainer.eval_every=0`` the run
    names it in one line before it starts, rather than accept it in silence."""
    proc = train(tmp_path, sites, "trainer.video_every=2", *SMALL)  # SMALL sets trainer.eval_every=0
    assert proc.returncode == 0, output(proc)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("corral: warning:")]
    assert warnings == ["corral: warning: trainer.video_every=2 has no effect while trainer.eval_every=0: it applies "
                        "only with trainer.eval_every > 0; set that, or leave trainer.video_every at its default (0)"]
    assert proc.stderr.startswith(warnings[0]), output(proc)
    assert not (tmp_path / "run" / "videos").exists()



def test_a_meta_evaluation_setting_without_evaluation_is_one_warning_line(tmp_path: Path,
                                                                          sites: dict[str, Path]) -> None:
    """A meta-RL algorithm meta-evaluates only within the trainer's evaluation: with ``trainer.eval_every=0``
    its ``algo.meta_eval_*`` settings changed nothing, in silence."""
    proc = train(tmp_path, sites, "experiment=rl2_bandits", "algo.meta_eval_trials=3", "trainer.max_env_steps=null",
                 "worker.n_envs=2", "algo.minibatch_size=100", *SMALL)
    assert proc.returncode == 0, output(proc)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("corral: warning:")]
    assert warnings == ["corral: warning: algo.meta_eval_trials=3 has no effect while trainer.eval_every=0: it "
                        "applies only with trainer.eval_every > 0; set that, or leave algo.meta_eval_trials at its "
                        "default (2)"], output(proc)

# ------------------------------------------------------------------------------------ with plugins
def test_train_with_the_third_party_sampler_and_worker(tmp_path: Path, sites: dict[str, Path]) -> None:
    calls = tmp_path / "calls.json"
    proc = train(tmp_path, sites, "sampler=testlocal", "worker=testworker", "worker.noise_std=0.1",
                 f"sampler.calls_file={calls}", *SMALL, visible=["corral-testplugin"])
    assert proc.returncode == 0, output(proc)
    assert "corral: warning:" not in proc.stderr and "PluginWarning" not in proc.stderr
    assert (tmp_path / "run" / "progress.csv").stat().st_size > 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["config"]["sampler"] == {"n_workers": 1, "calls_file": str(calls), "name": "testlocal"}
    assert summary["config"]["worker"] == {"noise_std": 0.1, "name": "testworker"}
    assert summary["env_steps"] >= 200
    # the plugin's sampler really did the sampling
    assert json.loads(calls.read_text()) == {"obtain_samples": 1, "obtain_exact_episodes": 0}


def test_broken_plugin_warns_once_and_training_goes_on(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = train(tmp_path, sites, *SMALL, visible=["corral-brokenimport"])
    assert proc.returncode == 0, output(proc)
    # one clean line, no Python warning format and no source line
    assert proc.stderr.count("corral: warning: corral plugin from corral-brokenimport") == 1, output(proc)
    assert "PluginWarning" not in proc.stderr and "self._load_one" not in proc.stderr
    assert proc.stderr.count("corral-brokenimport 0.2.0") == 1
    assert "ImportError: corral_brokenimport needs the package 'definitely_not_installed_xyz'" in proc.stderr
    assert (tmp_path / "run" / "progress.csv").stat().st_size > 0


@pytest.mark.parametrize("hook", ["corral_validate_config", "corral_run_start"])
def test_a_plugin_hook_that_raises_is_one_line_naming_the_plugin(tmp_path: Path, sites: dict[str, Path],
                                                                 hook: str) -> None:
    """A third-party plugin's hook raising its own exception: Python's traceback through corral and
    pluggy (and, once the run had started, Hydra's report), exit 1, with nothing naming the plugin."""
    proc = train(tmp_path, sites, *SMALL, visible=["corral-testplugin"], CORRAL_TESTPLUGIN_RAISE_IN=hook)
    assert proc.returncode == 2, output(proc)
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == (f"corral: error: plugin testplugin (corral-testplugin 0.1.0) raised ValueError: testplugin's "
                         f"{hook} failed on purpose in {hook}; fix the plugin, or run without it: "
                         "CORRAL_DISABLE_PLUGINS=testplugin"), output(proc)
    assert lines[-2] == f"ValueError: testplugin's {hook} failed on purpose", output(proc)
    assert "pluggy" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr, output(proc)
    assert (tmp_path / "run").exists() == (hook == "corral_run_start")  # the check comes before the run


def test_strict_plugins_stop_before_training(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = train(tmp_path, sites, *SMALL, visible=["corral-brokenimport"], CORRAL_STRICT_PLUGINS="1")
    assert proc.returncode == 2, output(proc)
    assert "corral: error: corral plugin from corral-brokenimport 0.2.0" in proc.stderr, output(proc)
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "progress.csv").exists()


def test_help_lists_every_option(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = run([sys.executable, str(TRAIN), "--help"], tmp_path, sites, "corral-testplugin")
    assert proc.returncode == 0, output(proc)
    groups = help_groups(proc.stdout)
    # every registered option of every group: corral's own (as registered here) plus the plugin's
    from corral.framework.plugins import KINDS, PluginManager

    builtins = PluginManager()
    builtins.load()
    for kind in KINDS:
        expected = set(builtins.registry.names(kind))
        expected |= {"sampler": {"testlocal"}, "worker": {"testworker"}}.get(kind, set())
        assert groups[kind] == sorted(expected), (kind, proc.stdout)
    assert {"local", "testlocal"} <= set(groups["sampler"])
    assert {"default", "fragment", "testworker", "vec"} <= set(groups["worker"])
    assert {"ppo", "vpg"} <= set(groups["algo"])
    assert {"ppo_cartpole", "testplugin_quick"} <= set(groups["experiment"])


def test_plugin_preset_with_hydra_flags_and_user_searchpath(tmp_path: Path, sites: dict[str, Path]) -> None:
    """The plugin's presets come through a search-path plugin: no extra override that would clash
    with the user's own ``hydra.searchpath`` or with flags such as ``--cfg job``."""
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "mine.yaml").write_text("# @package _global_\ntrainer:\n  n_epochs: 42\n")
    proc = run([sys.executable, str(TRAIN), "experiment=testplugin_quick", f"hydra.searchpath=[file://{tmp_path / 'mine'}]",
                "--cfg", "job"], tmp_path, sites, "corral-testplugin")
    assert proc.returncode == 0, output(proc)
    assert "name: testworker" in proc.stdout and "noise_std: 0.05" in proc.stdout
    proc = run([sys.executable, str(TRAIN), "experiment=mine", f"hydra.searchpath=[file://{tmp_path / 'mine'}]",
                "--cfg", "job"], tmp_path, sites, "corral-testplugin")
    assert proc.returncode == 0, output(proc)
    assert "n_epochs: 42" in proc.stdout


@pytest.mark.parametrize("multirun", [False, True])
def test_an_experiment_of_the_users_search_path_trains(tmp_path: Path, sites: dict[str, Path], multirun: bool) -> None:
    """``hydra.searchpath`` adds the user's own options: the checks before the run see them too, and a
    name that is in neither search path lists the user's options with corral's."""
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "mine.yaml").write_text("# @package _global_\ntrainer:\n  batch_size: 123\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path / 'mine'}]"
    where = [f"hydra.sweep.dir={tmp_path / 'sweep'}", "-m"] if multirun else [f"hydra.run.dir={tmp_path / 'run'}"]
    proc = run([sys.executable, str(TRAIN), "experiment=mine", searchpath, *where, *SMALL[:1], *SMALL[2:]], tmp_path, sites)
    assert proc.returncode == 0, output(proc)
    summary = json.loads((tmp_path / ("sweep/0" if multirun else "run") / "summary.json").read_text())
    assert summary["config"]["trainer"]["batch_size"] == 123
    proc = run([sys.executable, str(TRAIN), "experiment=other", searchpath, *where, *SMALL], tmp_path, sites)
    assert proc.returncode == 2, output(proc)
    assert "corral: error: experiment=other: experiment has no option 'other'; choose one of dqn_cartpole, mine, " in proc.stderr


def test_a_preset_without_its_package_line_is_one_line_not_ignored(tmp_path: Path, sites: dict[str, Path]) -> None:
    """A preset file without ``# @package _global_``: Hydra put its settings under ``experiment.*``,
    where nothing reads them, and the run trained with the defaults (learning rate 3e-4, not 0.1)."""
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "nopkg.yaml").write_text("algo:\n  learning_rate: 0.1\n")
    proc = train(tmp_path, sites, "experiment=nopkg", f"hydra.searchpath=[file://{tmp_path / 'mine'}]", *SMALL)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [
        "corral: error: the experiment preset's settings landed under experiment.algo, where nothing reads them: its "
        "file needs `# @package _global_` as its first line (as every preset has; docs/plugins.md)"], output(proc)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("multirun", [False, True])
def test_a_preset_that_is_not_valid_yaml_is_one_line_naming_the_file(tmp_path: Path, sites: dict[str, Path],
                                                                     multirun: bool) -> None:
    """PyYAML's 40-frame traceback through Hydra's config loader, exit 1, for a user's preset with a
    syntax error; a sweep over it too."""
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    broken = tmp_path / "mine" / "experiment" / "broken.yaml"
    broken.write_text("# @package _global_\ntrainer:\n  n_epochs: [1\n")
    choice = ["-m", "experiment=broken,ppo_cartpole"] if multirun else ["experiment=broken"]
    proc = train(tmp_path, sites, *choice, f"hydra.searchpath=[file://{tmp_path / 'mine'}]", *SMALL)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [
        f"corral: error: {broken} is not valid YAML (line 4, column 1: expected ',' or ']', but got '<stream end>'); "
        "fix that file"], output(proc)


@pytest.mark.parametrize("entry", ["file://{tmp}/nowhere", "pkg://no_such_package_of_configs.conf"])
def test_a_search_path_entry_that_names_nothing_is_one_line(tmp_path: Path, sites: dict[str, Path], entry: str) -> None:
    """Hydra said "provider=hydra.searchpath in command-line, path=... is not available" in Python's
    two-line warning and went on; the preset meant to come from there was then "not found"."""
    entry = entry.format(tmp=tmp_path)
    proc = train(tmp_path, sites, "experiment=mine", f"hydra.searchpath=[{entry}]", *SMALL)
    assert proc.returncode == 2, output(proc)
    (line,) = proc.stderr.strip().splitlines()
    if entry.startswith("file://"):
        assert line == (f"corral: error: hydra.searchpath: {entry}: {tmp_path / 'nowhere'} does not exist; give the "
                        "directory that holds your config groups (e.g. file://$PWD/conf, with conf/experiment/*.yaml)")
    else:
        assert line == (f"corral: error: hydra.searchpath: {entry} names no importable package "
                        "('no_such_package_of_configs.conf'); give a package that holds config groups, or a directory "
                        "as file:///abs/path")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------ corral plugins
def test_corral_plugins_table(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = run([*corral_command(), "plugins"], tmp_path, sites, "corral-testplugin", "corral-brokenregister")
    assert proc.returncode == 0, output(proc)
    rows = {tuple(line.split()[:4]) for line in proc.stdout.splitlines() if line and not line.startswith(" ")}
    assert ("sampler", "testlocal", "corral-testplugin", "0.1.0") in rows
    assert ("worker", "testworker", "corral-testplugin", "0.1.0") in rows
    assert ("sampler", "local", "corral", "0.1.0") in rows
    assert "worker.noise_std: float = 0.0  # std of Gaussian noise added to every observation" in proc.stdout
    # every field under the path a user types, with its declared range
    assert ("logger.csv.filename: str = 'progress.csv'  [a relative path inside the run directory (not absolute, no "
            "'..')]  # file name inside the run directory") in proc.stdout
    assert "algo.learning_rate: float = 0.0003  [> 0]  # Adam learning rate (policy and value)" in proc.stdout
    assert "FAILED PLUGINS" in proc.stdout
    assert "brokenregister (corral-brokenregister 0.2.0): RuntimeError: corral_brokenregister exploded" in proc.stdout
    assert "brokenpartial" not in proc.stdout


def test_corral_plugins_json(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = run([*corral_command(), "plugins", "--json"], tmp_path, sites,
               "corral-testplugin", "corral-brokenimport", "corral-brokenregister")
    assert proc.returncode == 0, output(proc)
    data = json.loads(proc.stdout)
    components = {(c["kind"], c["name"]): c for c in data["components"]}
    worker = components[("worker", "testworker")]
    assert (worker["distribution"], worker["version"], worker["plugin"]) == ("corral-testplugin", "0.1.0", "testplugin")
    assert worker["config"] == [
        {"name": "noise_std", "path": "worker.noise_std", "type": "float", "default": 0.0,
         "help": "std of Gaussian noise added to every observation", "accepts": ""}
    ]
    csv_fields = {f["path"]: f for f in components[("logger", "csv")]["config"]}
    assert "logger.csv.filename" in csv_fields  # the path a user types
    assert {f["path"]: f["accepts"] for f in components[("algo", "ppo")]["config"]}["algo.learning_rate"] == "> 0"
    assert components[("sampler", "local")]["distribution"] == "corral"
    assert ("sampler", "brokenpartial") not in components
    failed = {f["distribution"]: f for f in data["failed"]}
    assert set(failed) == {"corral-brokenimport", "corral-brokenregister"}
    assert failed["corral-brokenimport"]["version"] == "0.2.0"
    assert failed["corral-brokenimport"]["error"].startswith("ImportError: corral_brokenimport needs")


def test_corral_plugins_check(tmp_path: Path, sites: dict[str, Path]) -> None:
    broken = run([*corral_command(), "plugins", "--check"], tmp_path, sites, "corral-testplugin", "corral-brokenimport")
    assert broken.returncode == 1, output(broken)
    assert "corral-brokenimport" in broken.stdout
    healthy = run([*corral_command(), "plugins", "--check"], tmp_path, sites, "corral-testplugin")
    assert healthy.returncode == 0, output(healthy)
    disabled = run([*corral_command(), "plugins", "--check"], tmp_path, sites, "corral-testplugin",
                   "corral-brokenimport", CORRAL_DISABLE_PLUGINS="corral-brokenimport")
    assert disabled.returncode == 0, output(disabled)


def test_corral_plugins_and_train_py_name_a_plugin_name_nothing_has(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``CORRAL_PLUGINS=corral-tesplugin`` (a typo): the test plugin is not loaded, and both commands
    say which name matched nothing, with what is installed, in one warning line."""
    warning = ("corral: warning: CORRAL_PLUGINS names corral-tesplugin, but no installed corral plugin has that name "
               "(an entry point's or its distribution's; installed: corral-testplugin); check the spelling")
    listed = run([*corral_command(), "plugins"], tmp_path, sites, "corral-testplugin", CORRAL_PLUGINS="corral-tesplugin")
    assert listed.returncode == 0, output(listed)
    assert listed.stderr.splitlines() == [warning], output(listed)
    assert "testlocal" not in listed.stdout
    proc = train(tmp_path, sites, *SMALL, visible=["corral-testplugin"], CORRAL_PLUGINS="corral-tesplugin")
    assert proc.returncode == 0, output(proc)
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [warning], output(proc)


# ------------------------------------------------------------------------------------ corral train
def test_corral_train_works_like_train_py(tmp_path: Path, sites: dict[str, Path]) -> None:
    proc = run([*corral_command(), "train", *SMALL, "seed=1", "seed=2", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path,
               sites)
    assert proc.returncode == 0, output(proc)
    assert (tmp_path / "run" / "progress.csv").stat().st_size > 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs"] == 1 and summary["config"]["algo"]["name"] == "ppo" and summary["config"]["seed"] == 2
    # its advice names the command that was typed
    assert proc.stderr.splitlines()[0] == ("corral: warning: seed is given twice (seed=1, then seed=2); the run uses "
                                           "the last, seed=2 (to run each: corral train -m seed=1,2)"), output(proc)


def test_multirun_sweep(tmp_path: Path, sites: dict[str, Path]) -> None:
    sweep = tmp_path / "sweep"
    # -m among the overrides, as it is often typed (Hydra's own parser stops at it: `unrecognized arguments`)
    proc = run([sys.executable, str(TRAIN), "algo=vpg,ppo", "-m", "seed=1,2", *SMALL, f"hydra.sweep.dir={sweep}"],
               tmp_path, sites)
    assert proc.returncode == 0, output(proc)
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in jobs] == ["0", "1", "2", "3"], output(proc)
    combos = set()
    for job in jobs:
        assert (job / "progress.csv").stat().st_size > 0, job
        summary = json.loads((job / "summary.json").read_text())
        combos.add((summary["config"]["algo"]["name"], summary["config"]["seed"]))
    assert combos == {("vpg", 1), ("vpg", 2), ("ppo", 1), ("ppo", 2)}


RAISING_ENV = ["env.id=corral.testing.faulty_envs:corral/RaisingCartPole-v1"]


def test_an_environment_that_raises_while_it_is_made_is_one_line_naming_env(tmp_path: Path,
                                                                            sites: dict[str, Path]) -> None:
    """``env.kwargs.max_episode_steps=0`` (gymnasium's TimeLimit refuses it) ended in Hydra's "Error
    executing job" report and a traceback through corral's build, exit 1."""
    proc = train(tmp_path, sites, "env.kwargs.max_episode_steps=0", *SMALL)
    assert proc.returncode == 2, output(proc)
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == ("corral: error: env=cartpole: making the environment with env.kwargs {'max_episode_steps': 0} "
                         "raised ValueError: Expect the `max_episode_steps` to be positive, actually: 0; fix the "
                         "environment or its settings; the traceback above shows where it raised"), output(proc)
    assert lines[-2].startswith("ValueError: Expect the `max_episode_steps`"), output(proc)
    assert "Error executing job" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr, output(proc)


def test_an_environment_that_raises_in_evaluation_is_named_as_the_evaluation(tmp_path: Path,
                                                                             sites: dict[str, Path]) -> None:
    """The evaluation's own workers run in the trainer's process: a failure there read as the
    sampler's "worker 0 raised ...", the wrong part under sampler=multiprocessing."""
    proc = train(tmp_path, sites, *RAISING_ENV[:1], "env=gym", "+env.kwargs.fail_at=250", "sampler=multiprocessing",
                 "sampler.n_workers=1", "trainer.batch_size=100", "trainer.n_epochs=1", "trainer.eval_episodes=40",
                 "trainer.progress=false")
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines()[-1] == (
        "corral: error: the evaluation after epoch 0 (trainer.eval_every; its workers run in this process): worker 0 "
        "raised EnvironmentFailure: RaisingCartPole failed on purpose at step 250 while sampling "
        "(obtain_exact_episodes); the traceback above shows where it raised"), output(proc)


def test_an_environment_that_calls_sys_exit_in_a_worker_process_fails_the_run_in_one_line(
        tmp_path: Path, sites: dict[str, Path]) -> None:
    """``sys.exit(0)`` inside an environment's step in a worker process: the sampler says that the
    worker exited. (Under sampler=local a SystemExit ends the process as asked: a signal handler's,
    submitit's requeue on SIGUSR2, must.)"""
    proc = train(tmp_path, sites, "env=gym", "env.id=corral.testing.faulty_envs:corral/ExitingCartPole-v1",
                 "+env.kwargs.fail_at=30", "sampler=multiprocessing", "sampler.n_workers=1", *SMALL)
    assert proc.returncode == 2, output(proc)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("corral: error: worker 0 (pid ") and " exited with code 0 while sampling" in last, \
        output(proc)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("WorkerError: worker 0 ")


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_failed_sweep_job_is_recorded_and_the_other_jobs_still_run(tmp_path: Path, sites: dict[str, Path],
                                                                    launcher: str) -> None:
    """Job 0's environment raises while sampling; job 1 runs all the same; the sweep ends non-zero with
    one line naming the failed job; ``corral results`` says why it failed."""
    sweep = tmp_path / "sweep"
    proc = run([sys.executable, str(TRAIN), "-m", *RAISING_ENV, "+env.kwargs.fail_at=30,1000000",
                f"hydra/launcher={launcher}", *SMALL, f"hydra.sweep.dir={sweep}"], tmp_path, sites)
    why = ("worker 0 raised EnvironmentFailure: RaisingCartPole failed on purpose at step 30 while sampling "
           "(obtain_samples)")
    assert proc.returncode == 1, output(proc)
    assert f"[job 0] corral: error: {why}" in proc.stderr
    job = f"{RAISING_ENV[0].replace(':', chr(92) + ':')} +env.kwargs.fail_at=30 {' '.join(SMALL)}"
    assert (f"corral: job 0 ({job}) failed: {why}; the sweep ran its other jobs "
            f"(`corral results {sweep}` lists each one's status)") in proc.stderr.splitlines(), output(proc)
    assert "HYDRA_FULL_ERROR" not in proc.stderr, output(proc)
    # Hydra's own "Error executing job with overrides: [...]" would say again what corral's line says
    assert "Error executing job" not in proc.stderr, output(proc)
    assert proc.stderr.splitlines()[-1].startswith("corral: job 0 ("), output(proc)
    failed = json.loads((sweep / "0" / "summary.json").read_text())
    assert failed["status"] == "failed" and failed["error"].startswith(f"WorkerError: {why}\n")  # then the traceback
    assert json.loads((sweep / "1" / "summary.json").read_text())["status"] == "completed"
    results = run([*corral_command(), "results", str(sweep)], tmp_path, sites)
    assert results.returncode == 0, output(results)
    assert f"skipped: {sweep / '0'} (failed: WorkerError: {why})" in results.stdout.splitlines() + \
        results.stderr.splitlines(), output(results)


def test_a_sweep_job_whose_choices_do_not_fit_is_refused_before_any_job(tmp_path: Path, sites: dict[str, Path]) -> None:
    """``-m algo=sac,ppo env=pendulum``: SAC cannot train the default policy. Job 0 was started, failed,
    and job 1 ran; now the sweep stops before any job, in one line naming the job, and makes nothing."""
    sweep = tmp_path / "sweep"
    proc = run([sys.executable, str(TRAIN), "-m", "algo=sac,ppo", "env=pendulum", *SMALL, f"hydra.sweep.dir={sweep}"],
               tmp_path, sites)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.strip().splitlines() == [
        "corral: error: algo=sac cannot train policy=mlp; choose policy=tanh_gaussian (a preset sets every part: "
        "experiment=sac_pendulum) (the sweep's job algo=sac; no job has started)"], output(proc)
    assert not sweep.exists()


def test_each_sweep_job_names_a_value_it_would_ignore(tmp_path: Path, sites: dict[str, Path]) -> None:
    """A sweep is not prechecked as one run: each job warns for its own overrides."""
    sweep = tmp_path / "sweep"
    proc = run([sys.executable, str(TRAIN), "-m", "trainer.video_every=0,2", *SMALL, f"hydra.sweep.dir={sweep}"],
               tmp_path, sites)
    assert proc.returncode == 0, output(proc)
    warnings = [line for line in proc.stderr.splitlines() if "corral: warning:" in line]
    assert len(warnings) == 1 and "trainer.video_every=2 has no effect while trainer.eval_every=0" in warnings[0], \
        output(proc)
