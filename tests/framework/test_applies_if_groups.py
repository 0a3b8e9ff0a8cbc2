"""``applies_if`` conditions on another group's setting (``("worker.context_reward", "==", "sparse_reward")``,
``("worker.name", "not in", ("rl2", "pearl"))``), read from the whole composed run: the declarations of
``env.goal_radius`` and ``env.task_seed`` (hand-written validate hooks before, which fired inside
``train.py``'s jobs only), said in the pre-run check, in a sweep's job and in library use, for values
that were really given; a condition that names no setting is the option's mistake, said at composition."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from corral import hookimpl
from corral.framework.checks import OptionsWith, check, composed_ignored, condition_problems, describe_field
from corral.framework.compose import build, validate
from corral.framework.entry import prepare
from corral.framework.errors import ConfigError, CorralWarning
from corral.framework.plugins import get_registry
from corral.framework.precheck import precheck
from corral.framework.registry import KINDS
from corral.plugins.envs.point_nav import PointNavEnvConfig
from corral.plugins.workers.vec import VecWorker, VecWorkerConfig
from corral.testing import compose_config, inline_plugin

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"

DENSE_RADIUS = (
    "env.goal_radius=0.5 has no effect while env.sparse=false and worker=default, which has no setting context_reward: "
    "the dense reward is minus the distance to the goal; it applies only with env.sparse=true or "
    "worker.context_reward=sparse_reward or worker.context_reward=success; set that, or leave env.goal_radius at "
    "its default (0.2)")
TRIAL_TASK_SEED = (
    "env.task_seed=3 has no effect while worker=rl2: a trial-running worker runs the algorithm's scheduled tasks, or a "
    "new task each trial, never the run's one task (algo.task_seed seeds the meta-RL task split); it applies only "
    "with worker other than pearl and rl2 (the workers that run trials); set that, or leave env.task_seed at its "
    "default (0)")


def ignored(*overrides: str, given: set[str] | None = None) -> list[str]:
    """What the run ``train.py <overrides>`` composes would ignore among ``given`` (default: the keys
    the overrides set)."""
    cfg = compose_config(list(overrides))
    keys = {o.split("=", 1)[0] for o in overrides} if given is None else given
    return composed_ignored(cfg, get_registry(), KINDS, keys)


# ---------------------------------------------------------------------- the two declarations
def test_goal_radius_names_the_reward_and_the_worker_setting_that_would_use_it() -> None:
    assert ignored("env=point_nav", "env.goal_radius=0.5") == [DENSE_RADIUS]
    assert ignored("env=point_nav", "env.goal_radius=0.5", "env.sparse=true") == []  # the sparse reward reads it
    for reads in ("sparse_reward", "success"):  # PEARL's encoder reads an info key that depends on it
        assert ignored("experiment=pearl_pointnav", "env.goal_radius=0.5", f"worker.context_reward={reads}") == []
    assert ignored("experiment=pearl_pointnav", "env.goal_radius=0.5", "worker.context_reward=null") == [
        DENSE_RADIUS.replace("worker=default, which has no setting context_reward", "worker.context_reward=null")]
    assert ignored("env=point_nav", "env.goal_radius=0.2") == []  # its default: nothing to undo
    assert ignored("env=point_nav", "env.goal_radius=0.5", given={"env"}) == []  # not given: a preset's, say


def test_task_seed_names_the_trial_worker() -> None:
    assert ignored("experiment=rl2_bandits", "env.task_seed=3") == [TRIAL_TASK_SEED]
    assert ignored("experiment=pearl_pointnav", "env.task_seed=3") == [TRIAL_TASK_SEED.replace("worker=rl2", "worker=pearl")]
    for worker in ("default", "vec"):  # a plain algorithm runs the run's one task: env.task_seed picks it
        assert ignored("env=point_nav", f"worker={worker}", "env.task_seed=3") == []


def test_corral_plugins_says_the_conditions_in_words() -> None:
    """``corral plugins`` and the generated option pages show ``accepts`` (:func:`describe_field`)."""
    registry = get_registry()
    fields = {f["name"]: f["accepts"] for f in registry.get("env", "point_nav").config_fields(registry)}
    assert fields["goal_radius"] == (
        "> 0; only with sparse=true or worker.context_reward=sparse_reward or worker.context_reward=success")
    assert fields["task_seed"] == ">= 0; only with worker other than pearl and rl2 (the workers that run trials)"


def test_a_shipped_preset_holds_no_value_its_own_choices_ignore() -> None:
    """Library use names every value away from its default (there is no command line to tell a preset's
    from the user's): that is only right while no preset holds such a value."""
    presets = sorted(p.stem for p in (ROOT / "corral" / "conf" / "experiment").glob("*.yaml"))
    assert len(presets) >= 10
    for preset in presets:
        assert composed_ignored(compose_config([f"experiment={preset}"]), get_registry(), KINDS, None) == [], preset


class TrialVecWorker(VecWorker):
    """A plugin's own trial-running worker: it says so with the trait, as RL2's and PEARL's classes do."""

    sets_tasks = True


class TrialWorkerPlugin:
    """Registers ``worker=my_trials``, a trial-running worker that corral's own code does not name."""

    @hookimpl
    def corral_register(self, register: Any) -> None:
        """Register the option."""
        register("worker", "my_trials", TrialVecWorker, config=VecWorkerConfig, help="a plugin's trial worker")


def test_task_seed_names_a_plugins_trial_worker_as_it_names_the_built_in_ones() -> None:
    """``env.task_seed``'s condition is the trait ``sets_tasks``, not a list of names: given with a
    plugin's trial worker it is the same one line (it was silent: the condition listed rl2 and pearl),
    and the line and ``corral plugins`` list the plugin's worker among those it does not apply to."""
    with inline_plugin(TrialWorkerPlugin(), name="my_trials"):
        assert ignored("env=point_nav", "worker=my_trials", "env.task_seed=3") == [
            TRIAL_TASK_SEED.replace("worker=rl2", "worker=my_trials").replace("pearl and rl2", "my_trials and pearl and rl2")]
        fields = {f["name"]: f["accepts"] for f in get_registry().get("env", "point_nav").config_fields(get_registry())}
        assert fields["task_seed"] == (
            ">= 0; only with worker other than my_trials and pearl and rl2 (the workers that run trials)")
        assert ignored("env=point_nav", "worker=vec", "env.task_seed=3") == []
    assert ignored("env=point_nav", "worker=vec", "env.task_seed=3") == []
    task_seed = next(f for f in dataclasses.fields(PointNavEnvConfig) if f.name == "task_seed")
    assert describe_field(task_seed) == ">= 0; only with worker other than the workers that run trials"  # no registry
    with pytest.raises(ValueError, match="OptionsWith"):
        check(applies_if=("worker.n_envs", "not in", OptionsWith("sets_tasks", "trial workers")))
    with pytest.raises(ValueError, match="OptionsWith"):
        check(applies_if=("worker.name", "==", OptionsWith("sets_tasks", "trial workers")))


# ---------------------------------------------------------------------- where they are said
def test_the_pre_run_check_says_each_once_and_nothing_for_a_presets_values(capsys: pytest.CaptureFixture[str]) -> None:
    precheck(prepare(["env=point_nav", "env.goal_radius=0.5"]))
    assert capsys.readouterr().err == f"corral: warning: {DENSE_RADIUS}\n"
    precheck(prepare(["experiment=rl2_bandits", "env.task_seed=3"]))
    assert capsys.readouterr().err == f"corral: warning: {TRIAL_TASK_SEED}\n"
    precheck(prepare(["experiment=pearl_pointnav", "worker.context_reward=null"]))  # the preset's radius: not named
    assert capsys.readouterr().err == ""


def test_library_use_warns_while_building(tmp_path: Path) -> None:
    """``corral.build(cfg)`` of a config made in Python: a :class:`CorralWarning` per ignored value."""
    small = ["trainer.n_epochs=1", "trainer.batch_size=40", "logger=[csv]"]
    with pytest.warns(CorralWarning) as caught:
        run = build(compose_config(["env=point_nav", "env.goal_radius=0.5", *small]), log_dir=tmp_path / "a")
    run.close()
    assert [str(w.message) for w in caught if issubclass(w.category, CorralWarning)] == [DENSE_RADIUS]
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        run = build(compose_config(["env=point_nav", "env.goal_radius=0.5", "env.sparse=true", *small]),
                    log_dir=tmp_path / "b")
        run.close()
        run = build(compose_config(["env=point_nav", "env.goal_radius=0.5", *small]), log_dir=tmp_path / "c",
                    given=())  # a caller that named them already
        run.close()
    assert [str(w.message) for w in quiet if issubclass(w.category, CorralWarning)] == []


def test_a_sweeps_job_says_it_for_its_own_value(tmp_path: Path) -> None:
    """A sweep's job names the ignored values of its own overrides (a value of the sweep that applies is
    not named); the hand-written hook said it from inside the job, with no pre-run line."""
    done = subprocess.run(
        [sys.executable, str(TRAIN), "-m", "env=point_nav", "env.goal_radius=0.5,0.2", "trainer.n_epochs=1",
         "trainer.batch_size=40", "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]",
         f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "goal_radius" in line]
    assert len(said) == 1 and said[0].endswith(f"corral: warning: {DENSE_RADIUS}"), done.stderr[-3000:]


def users_own_main() -> str:
    """The Python block of docs/getting-started.md's "Your own Hydra app" section."""
    section = (ROOT / "docs" / "getting-started.md").read_text().split("## Your own Hydra app", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, blocks
    return blocks[0]


def test_a_users_own_hydra_main_is_warned_for_its_command_line(tmp_path: Path) -> None:
    """``corral.build(cfg)`` inside a user's own ``@hydra.main`` (the docs' script, as written; there is
    no corral pre-run check) names the ignored values of the job's command line, once each, and trains;
    ``entry.run`` in its place also writes ``summary.json``."""
    script = tmp_path / "my_train.py"
    script.write_text(users_own_main())
    small = ["trainer.n_epochs=1", "trainer.batch_size=40", "trainer.eval_every=0", "logger=[csv]",
             "trainer.progress=false"]

    def run(*overrides: str, out: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, str(script), "env=point_nav", *overrides, *small,
                               f"hydra.run.dir={tmp_path / out}"], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        assert (tmp_path / out / "progress.csv").is_file(), done.stderr[-3000:]
        return done

    done = run("env.goal_radius=0.5", out="ignored")
    assert done.stderr.count("CorralWarning: ") == 1, done.stderr[-3000:]
    assert f"CorralWarning: {DENSE_RADIUS}\n" in done.stderr, done.stderr[-3000:]
    done = run("env.goal_radius=0.5", "env.sparse=true", out="applies")  # the sparse reward reads it
    assert "CorralWarning" not in done.stderr, done.stderr[-3000:]
    with_run = users_own_main().replace("from corral import build\n", "from corral.framework.entry import run\n")
    old = """    run = build(cfg, log_dir=HydraConfig.get().runtime.output_dir)
    try:
        print(run.train())
    finally:
        run.close()
"""
    assert old in with_run, with_run  # the one change made here: say if the page changed it
    script.write_text(with_run.replace(old, "    print(run(cfg, log_dir=HydraConfig.get().runtime.output_dir))\n"))
    done = run("env.goal_radius=0.5", out="entry_run")
    assert done.stderr.count("CorralWarning: ") == 1, done.stderr[-3000:]
    assert json.loads((tmp_path / "entry_run" / "summary.json").read_text())["status"] == "completed"


# ---------------------------------------------------------------------- conditions that name nothing
@dataclass
class Declared:
    """Conditions of every kind this module's tests need."""

    mode: str = "a"
    on_worker: float = field(default=1.0, metadata=check(applies_if=("worker.context_reward", "==", "success")))
    not_trials: int = field(default=0, metadata=check(ge=0, applies_if=("worker.name", "not in", ("rl2", "pearl"))))


def test_a_condition_is_checked_when_declared_and_against_the_registry() -> None:
    for bad in ("/worker/context_reward", "worker.", ".x", "worker context"):
        with pytest.raises(ValueError, match="names a sibling field"):
            check(applies_if=(bad, "==", 1))
    with pytest.raises(ValueError, match="'not in' takes a tuple"):
        check(applies_if=("worker.name", "not in", "rl2"))
    registry = get_registry()
    assert condition_problems(Declared, "env", registry) == []
    described = {f.name: describe_field(f) for f in dataclasses.fields(Declared)}
    assert described["not_trials"] == ">= 0; only with worker other than rl2 and pearl"

    @dataclass
    class Typos:
        every: int = 1
        a: int = field(default=0, metadata=check(ge=0, applies_if=("worker.context_rewrd", "==", "success")))
        b: int = field(default=0, metadata=check(ge=0, applies_if=("wrker.n_envs", ">", 1)))
        c: int = field(default=0, metadata=check(ge=0, applies_if=("evry", ">", 0)))

    assert condition_problems(Typos, "env", registry) == [
        "env.a: applies_if names 'worker.context_rewrd', which no worker option has; did you mean "
        "worker.context_reward?",
        f"env.b: applies_if names 'wrker.n_envs', but there is no config group 'wrker' (the groups: "
        f"{', '.join(sorted({r.kind for r in registry}))})",
        "env.c: applies_if names 'evry', which is not a field of Typos"]
    assert condition_problems(Typos, "env") == [  # without a registry: the siblings only
        "env.c: applies_if names 'evry', which is not a field of Typos"]


@dataclass
class TypoEnvConfig:
    """An environment option whose condition names a worker setting that does not exist."""

    radius: float = field(default=0.2, metadata=check(gt=0, applies_if=("worker.context_rewrd", "==", "success")))


class TypoEnvPlugin:
    """Registers ``env=typo_env``."""

    @hookimpl
    def corral_register(self, register: Any) -> None:
        """Register the option."""
        register("env", "typo_env", lambda config: None, config=TypoEnvConfig, help="a typo in a condition")


def test_a_condition_that_names_no_setting_is_an_error_at_composition() -> None:
    """A typo would make the condition never hold (a warning for every value given): the run is refused
    in one line naming the option and the key, whether or not the setting was given."""
    with inline_plugin(TypoEnvPlugin(), name="typo_env"):
        with pytest.raises(ConfigError) as info:
            validate(compose_config(["env=typo_env"]))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("env=typo_env (inline") and (
        "declares env.radius: applies_if names 'worker.context_rewrd', which no worker option has; did you mean "
        "worker.context_reward?; its config's check(applies_if=...) must name a setting (a mistake of the plugin's: "
        "report it to its author)") in message, message
