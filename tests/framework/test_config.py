"""The registry -> Hydra ConfigStore bridge, checked through Hydra's own compose API."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

import hydra
import pytest
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig, OmegaConf

from corral import hookimpl
from corral.framework.compose import check_values, validate
from corral.framework.config import config_of
from corral.framework.entry import prepare
from corral.framework.errors import ConfigError, CorralError, SnapshotError
from corral.framework.plugins import Source, get_plugin_manager, get_registry

Visible = Callable[..., ContextManager[None]]


def compose(*overrides: str) -> DictConfig:
    """What ``python train.py <overrides>`` composes (plugins loaded and stored first)."""
    args = prepare(list(overrides))
    with hydra.initialize_config_module(config_module="corral.conf", version_base="1.3"):
        return hydra.compose(config_name="config", overrides=args)


def stored(group: str, name: str) -> Any:
    """The ConfigStore node of option ``name`` in ``group`` (None when absent)."""
    return ConfigStore.instance().repo.get(group, {}).get(f"{name}.yaml")


def test_every_registration_is_a_config_store_node() -> None:
    prepare([])
    registry = get_registry()
    assert len(list(registry)) >= 17
    for reg in registry:
        node = stored(reg.kind, reg.name)
        assert node is not None, f"no ConfigStore node for {reg.kind}/{reg.name}"
        content = OmegaConf.to_container(node.node)
        if reg.kind == "logger":
            assert node.package == f"logger.{reg.name}"
        expected = [f.name for f in dataclasses.fields(reg.config)] if reg.config else []
        assert list(content) == expected + ["name"], reg
        assert content["name"] == reg.name
        defaults = {f["name"]: f["default"] for f in reg.config_fields()}
        for key, default in defaults.items():
            if default != "???":
                assert content[key] == default, (reg.kind, reg.name, key)


def test_default_config_composes() -> None:
    cfg = compose()
    for kind, name in [("trainer", "default"), ("env", "cartpole"), ("algo", "ppo"), ("policy", "mlp"),
                       ("sampler", "local"), ("worker", "default")]:
        assert cfg[kind].name == name
    assert sorted(cfg.logger) == ["console", "csv", "tensorboard"]
    assert cfg.logger.csv.name == "csv"
    assert cfg.seed == 1


def test_group_and_field_overrides() -> None:
    cfg = compose("worker=vec", "worker.n_envs=4", "algo=vpg", "algo.discount=0.9", "logger=[csv]", "seed=7")
    assert cfg.worker.name == "vec" and cfg.worker.n_envs == 4 and isinstance(cfg.worker.n_envs, int)
    assert cfg.algo.name == "vpg" and cfg.algo.discount == 0.9
    assert list(cfg.logger) == ["csv"] and cfg.seed == 7
    registry = get_registry()
    worker_cfg = config_of(registry.get("worker", "vec"), cfg.worker)
    assert type(worker_cfg).__name__ == "VecWorkerConfig" and worker_cfg.n_envs == 4
    algo_cfg = config_of(registry.get("algo", "vpg"), cfg.algo)
    assert algo_cfg.discount == 0.9


def test_type_error_at_composition() -> None:
    with pytest.raises(ConfigCompositionException) as info:
        compose("worker=vec", "worker.n_envs=abc")
    text = f"{info.value} {info.value.__cause__}"
    assert "worker.n_envs=abc" in text
    assert "Value 'abc' of type 'str' could not be converted to Integer" in text


@pytest.mark.parametrize("override", ["worker.n_envs=4", "+worker.n_envs=4"])
def test_unknown_field_is_rejected_naming_the_options_that_have_it(override: str) -> None:
    """worker=default has no n_envs: with or without ``+`` the key composes (the node is open) and
    validation names the option, says it has no settings, and points at worker=vec."""
    cfg = compose(override)
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    message = str(info.value)
    assert message.startswith("worker.n_envs is not a setting: worker=default has no setting 'n_envs'")
    assert "(it has no settings)" in message and "e.g. worker=vec worker.n_envs=..." in message


@pytest.mark.parametrize("override", ["algo.not_a_field=5", "+algo.not_a_field=5"])
def test_extra_key_names_the_options_fields(override: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(compose(override))
    fields = ", ".join(f"algo.{f.name}" for f in dataclasses.fields(get_registry().get("algo", "ppo").config))
    assert str(info.value) == (f"algo.not_a_field is not a setting: algo=ppo has no setting 'not_a_field'; its "
                               f"settings are {fields} (`corral plugins` lists every option's settings)")


def test_extra_key_close_to_a_field_is_suggested() -> None:
    with pytest.raises(ConfigError, match=r"did you mean algo.vf_iters\?"):
        validate(compose("algo=vpg", "algo.vf_iter=5"))
    with pytest.raises(ConfigError, match=r"logger.csv.fname is not a setting: .*did you mean logger.csv.filename\?"):
        validate(compose("logger.csv.fname=x.csv"))
    with pytest.raises(ConfigError, match=r"^n_epochs is not a setting: .*did you mean algo.n_epochs or trainer.n_epochs"):
        validate(compose("+n_epochs=3"))


@pytest.mark.parametrize("override", ["logger.csv.filename=../progress.csv", "logger.csv.filename=/tmp/p.csv",
                                      "logger.csv.filename=''", "logger.tensorboard.subdir=/tmp/tb",
                                      "logger.tensorboard.subdir=a/../../tb"])
def test_a_logger_path_outside_the_run_directory_is_refused(override: str) -> None:
    """The csv and TensorBoard loggers write inside the run directory; a path that leaves it (the
    TensorBoard logger wrote to an absolute one in silence) is refused before the run starts."""
    key, value = override.split("=", 1)
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be a relative path inside the run directory "
                                          r"\(not absolute, no '\.\.'\), got "):
        check_values(compose("logger=[csv,tensorboard]", override))
    check_values(compose("logger=[csv,tensorboard]", "logger.csv.filename=sub/p.csv", "logger.tensorboard.subdir=."))


@pytest.mark.parametrize(("make", "key", "value"), [
    ("csv", "logger.csv.filename", "/tmp/p.csv"), ("csv", "logger.csv.filename", "a/../../p.csv"),
    ("tensorboard", "logger.tensorboard.subdir", "../tb"),
])
def test_a_logger_config_built_in_python_is_checked_as_the_command_line(make: str, key: str, value: str) -> None:
    """Library use gets the command line's one line: the loggers' configs check their own paths."""
    from corral.plugins.loggers.csv import CSVLoggerConfig
    from corral.plugins.loggers.tensorboard import TensorBoardLoggerConfig

    config = {"csv": CSVLoggerConfig, "tensorboard": TensorBoardLoggerConfig}[make]
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be a relative path inside the run directory"):
        config(**{key.rsplit(".", 1)[1]: value})


def test_an_experiment_preset_key_for_another_option_is_named() -> None:
    """A preset's worker settings that the user's worker choice does not have are an error, too."""
    with pytest.raises(ConfigError, match=r"worker.timesteps_per_call is not a setting: worker=vec has no setting"):
        validate(compose("experiment=dqn_cartpole", "worker=vec", "algo=ppo", "policy=mlp"))


def test_out_of_range_values_are_all_named() -> None:
    with pytest.raises(ConfigError) as info:
        validate(compose("algo.learning_rate=-1", "algo.discount=1.5", "seed=-2", "policy.hidden_sizes=[64,0]"))
    assert sorted(str(info.value).split("\ncorral: error: ")) == [
        "algo.discount must be >= 0 and <= 1, got 1.5",
        "algo.learning_rate must be > 0, got -1.0",
        "policy.hidden_sizes[1] must be >= 1, got 0",
        "seed must be >= 0 and <= 9223372036854775807, got -2",
    ]


def test_a_seed_beyond_what_torch_takes_is_named() -> None:
    # torch.manual_seed takes a signed 64-bit integer: a larger seed was an OverflowError traceback
    with pytest.raises(ConfigError, match=r"^seed must be >= 0 and <= 9223372036854775807, got 9223372036854775808$"):
        validate(compose("seed=9223372036854775808"))
    validate(compose("seed=9223372036854775807"))


def test_a_value_the_user_set_that_its_option_would_ignore_is_named_a_preset_s_is_not(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``applies_if`` is a warning for the keys a command line set, not for what a preset (or a
    default) holds: ``experiment=dqn_cartpole`` sets ``trainer.eval_episodes=10``, and switching
    evaluation off must not ask the user to undo the preset."""
    from corral.framework.compose import warn_ignored
    from corral.framework.override_keys import given_keys
    from corral.framework.precheck import precheck

    args = ["trainer.eval_every=0", "+algo.utd_ratio=2", "algo.gradient_steps=3", "algo=dqn"]
    assert given_keys(args) == {"trainer.eval_every", "algo.utd_ratio", "algo.gradient_steps", "algo"}
    precheck(prepare(["experiment=dqn_cartpole", "trainer.eval_every=0"]))  # the preset's eval_episodes
    assert capsys.readouterr().err == ""
    precheck(prepare(["experiment=dqn_cartpole", "trainer.eval_every=0", "trainer.eval_episodes=3"]))
    assert capsys.readouterr().err == (
        "corral: warning: trainer.eval_episodes=3 has no effect while trainer.eval_every=0: it applies only with "
        "trainer.eval_every > 0; set that, or leave trainer.eval_episodes at its default (10)\n")
    cfg = compose("experiment=dqn_cartpole", "trainer.eval_every=0", "algo.gradient_steps=3", "algo.utd_ratio=2")
    validate(cfg)  # not an error
    assert warn_ignored(cfg, given={"algo.gradient_steps"}) == []
    assert warn_ignored(cfg, given={"algo.utd_ratio"}) == [
        "corral: warning: algo.utd_ratio=2.0 has no effect while algo.gradient_steps=3: it applies only with "
        "algo.gradient_steps=null; set that, or leave algo.utd_ratio at its default (0.25)"]


def test_unknown_option_lists_the_available_ones() -> None:
    with pytest.raises(MissingConfigException) as info:
        compose("sampler=nonexistent")
    assert "Could not find 'sampler/nonexistent'" in str(info.value)
    assert "local" in info.value.options


def test_experiment_preset_composes() -> None:
    cfg = compose("experiment=ppo_cartpole")
    assert cfg.algo.name == "ppo" and cfg.env.name == "cartpole" and cfg.policy.name == "mlp"
    assert cfg.trainer.max_env_steps == 100000 and cfg.trainer.batch_size == 2048


def test_test_plugin_options_compose(plugins_visible: Visible) -> None:
    with plugins_visible("corral-testplugin"):
        cfg = compose("sampler=testlocal", "worker=testworker", "worker.noise_std=0.1", "sampler.calls_file=/tmp/x")
        assert cfg.sampler.name == "testlocal" and cfg.sampler.calls_file == "/tmp/x"
        assert cfg.worker.name == "testworker" and cfg.worker.noise_std == 0.1
        worker_cfg = config_of(get_registry().get("worker", "testworker"), cfg.worker)
        assert type(worker_cfg).__name__ == "NoisyWorkerConfig" and worker_cfg.noise_std == 0.1
        with pytest.raises(ConfigCompositionException, match="worker.noise_std=loud") as info:
            compose("worker=testworker", "worker.noise_std=loud")
        assert "could not be converted to Float" in str(info.value.__cause__)
        # the plugin's experiment preset, found through its corral_config_searchpath hook
        preset = compose("experiment=testplugin_quick")
        assert preset.sampler.name == "testlocal" and preset.worker.name == "testworker"
        assert preset.worker.noise_std == 0.05 and preset.trainer.n_epochs == 1
    # once the plugin is gone, so are its nodes
    prepare([])
    assert stored("sampler", "testlocal") is None and stored("worker", "testworker") is None
    with pytest.raises(MissingConfigException):
        compose("sampler=testlocal")


@dataclass(frozen=True)
class FrozenConfig:
    """A frozen config dataclass, as many authors write them."""

    size: int = 3
    label: Optional[str] = None
    sizes: list[int] = field(default_factory=lambda: [1, 2])


class FrozenPlugin:
    """An inline plugin whose component has a frozen config."""

    @hookimpl
    def corral_register(self, register: Any) -> None:
        register("policy", "frozen", object, config=FrozenConfig, help="frozen config")


def test_frozen_config_dataclass_accepts_overrides() -> None:
    get_plugin_manager().register_object(FrozenPlugin(), Source("frozen", "inline", "-"))
    cfg = compose("policy=frozen", "policy.size=5", "policy.label=hi", "policy.sizes=[4]")
    assert OmegaConf.to_container(cfg.policy) == {"size": 5, "label": "hi", "sizes": [4], "name": "frozen"}
    value = config_of(get_registry().get("policy", "frozen"), cfg.policy)
    assert value == FrozenConfig(size=5, label="hi", sizes=[4])
    with pytest.raises(ConfigCompositionException) as info:
        compose("policy=frozen", "policy.size=big")
    assert "could not be converted to Integer" in str(info.value.__cause__)


def test_register_configs_is_idempotent() -> None:
    prepare([])
    before = {k: dict(v) for k, v in ConfigStore.instance().repo.items() if isinstance(v, dict)}
    prepare([])
    after = {k: dict(v) for k, v in ConfigStore.instance().repo.items() if isinstance(v, dict)}
    assert before.keys() == after.keys()
    for group in before:
        assert before[group].keys() == after[group].keys()
        for name in before[group]:
            assert before[group][name] is after[group][name]


class DuckPolicy:
    """Has get_actions and the parameter methods, but is not a corral.Policy."""

    def get_actions(self, observations: Any) -> Any:
        return observations[:, :1].astype(int) * 0, {}

    def get_param_values(self) -> dict:
        return {}

    def set_param_values(self, params: dict) -> None:
        pass

    def reset(self, dones: Any = None) -> None:
        pass


class DuckPolicyPlugin:
    @hookimpl
    def corral_register(self, register: Any) -> None:
        register("policy", "duck", lambda config, env_spec: DuckPolicy(), help="a duck-typed agent")


def test_a_duck_typed_agent_is_named_at_build(corral_inline_plugin: Any, tmp_path: Any) -> None:
    """A policy factory returning something that is not a corral.Policy fails before any worker
    starts, saying what is wrong (instead of "worker 0 received parameters before it had an agent")."""
    from corral.framework.compose import build

    corral_inline_plugin(DuckPolicyPlugin(), name="duck")
    cfg = compose("policy=duck", "algo=vpg")
    with pytest.raises(ConfigError) as info:
        build(cfg, log_dir=tmp_path)
    message = str(info.value)
    assert message.startswith("policy=duck (inline - (plugin 'duck')) built a ")
    assert "DuckPolicy, which is not a corral.Policy; its class must subclass corral.Policy" in message


@pytest.mark.parametrize(("args", "message"), [
    (["algo.learning_rate=abc"], "algo.learning_rate=abc: algo.learning_rate takes a number, not 'abc'"),
    (["algo.discount=[1"], "algo.discount=[1: no viable alternative at input '[1'"),
    (["algo.learning_rate=-1", "seed=3"], "algo.learning_rate must be > 0, got -1.0"),
    (["policy.hidden_sizes=64"], "policy.hidden_sizes=64: policy.hidden_sizes takes a list, not 64; write it in "
                                 "brackets, e.g. policy.hidden_sizes=[64]"),
    (["env.kwargs=5"], "env.kwargs=5: env.kwargs takes a mapping, not 5; "),
    # an interpolation to a key the config lacks named the group ("algo: Interpolation key 'nope' not found"),
    # or (a top-level setting) ended in a traceback
    (["algo.learning_rate=${nope}"], "algo.learning_rate=${nope}: the interpolation names nope, which the config "
                                     "does not have; give algo.learning_rate a value, or interpolate a setting"),
    (["env.kwargs.x=${nope.y}"], "env.kwargs.x=${nope.y}: the interpolation names nope.y, which the config does not "
                                 "have; give env.kwargs.x a value"),
    (["seed=${nope}"], "seed=${nope}: the interpolation names nope, which the config does not have; give seed a value"),
    (["algo.learning_rate=${oc.env:CORRAL_TEST_NOPE}"],
     "algo.learning_rate=${oc.env:CORRAL_TEST_NOPE}: its interpolation does not resolve (KeyError raised while "
     "resolving interpolation: \"Environment variable 'CORRAL_TEST_NOPE' not found\"); give algo.learning_rate a value"),
    # a list of presets composed them all in silence, the last one's settings winning
    (["experiment=[ppo_cartpole,trpo_cartpole]"], "experiment=[ppo_cartpole,trpo_cartpole]: experiment takes one "
                                                  "preset, and of a list each preset's settings would replace the "
                                                  "ones before it in silence (trpo_cartpole's win); give one preset"),
    (["-m", "experiment=[ppo_cartpole,trpo_cartpole],ppo_cartpole"],
     "experiment=[ppo_cartpole,trpo_cartpole],ppo_cartpole: experiment takes one preset, and of a list each preset's "
     "settings would replace the ones before it in silence (trpo_cartpole's win) (the sweep's value "
     "[ppo_cartpole,trpo_cartpole]); give one preset"),
    (["--cfg", "job", "+experiment=[ppo_cartpole,trpo_cartpole]"], "+experiment=[ppo_cartpole,trpo_cartpole]: "
                                                                   "experiment takes one preset"),
    # Hydra's internal config names, and its advice for a defaults list
    (["=1"], "=1: an override is key=value, and this one has no key before '='; name the setting, e.g. seed=1"),
    (["+=1"], "+=1: an override is key=value, and this one has no key before '='"),
    (["+experiment=ppo_cartpole"], "+experiment=ppo_cartpole: experiment is a config group the run already has, so "
                                   "an option of it is chosen, not added; write experiment=ppo_cartpole, without the +"),
    (["++experiment=ppo_cartpole"], "++experiment=ppo_cartpole: experiment is a config group, and Hydra cannot "
                                    "force-add a group's option; write experiment=ppo_cartpole, without the ++"),
    (["+hydra/launcher=joblib"], "+hydra/launcher=joblib: hydra/launcher is a config group the run already has, so "
                                 "an option of it is chosen, not added; write hydra/launcher=joblib, without the +"),
])
def test_precheck_gives_hydras_errors_corrals_style(args: list[str], message: str) -> None:
    """train.py's precheck: Hydra's composition errors and corral's range errors alike are one
    ConfigError (printed as ``corral: error: ...``, exit 2) before a run directory exists."""
    from corral.framework.precheck import precheck

    prepare([])
    with pytest.raises(ConfigError) as info:
        precheck(args)
    assert str(info.value).startswith(message)
    assert "HYDRA_FULL_ERROR" not in str(info.value)
    assert "\n" not in str(info.value)


def test_precheck_lists_the_available_options_skips_flags_and_reads_a_resumed_run(tmp_path: Path) -> None:
    from corral.framework.precheck import precheck

    prepare([])
    with pytest.raises(ConfigError) as info:
        precheck(["sampler=nonexistent"])
    assert str(info.value).startswith("sampler=nonexistent: sampler has no option 'nonexistent'; choose one of "
                                      "action_server, alternating, local, multiprocessing, ray (")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=r"^algo=choice\(ppo,nope\): algo has no option 'nope'"):
        precheck(["-m", "seed=1,2", "algo=choice(ppo,nope)"])  # a sweep's values, before any job
    with pytest.raises(ConfigError, match=r"^algo.learning_rate must be > 0, got -1.0 \(the sweep's job seed=1 algo=ppo; "
                                          r"no job has started\)$"):
        precheck(["-m", "seed=1,2", "algo=ppo,vpg", "algo.learning_rate=-1"])  # every job's config, before any job
    precheck(["--cfg", "job", "algo.learning_rate=-1"])  # flags: Hydra's business
    with pytest.raises(SnapshotError, match=r"^no snapshot found in "):  # resume: the run's own config, read first
        precheck([f"trainer.resume={tmp_path}", "algo.learning_rate=-1"])
    with pytest.raises(ConfigError, match=r"^trainer.resume=/nowhere: /nowhere does not exist; "):
        precheck(["trainer.resume=/nowhere"])  # but a source that is not there: before Hydra makes a directory
    precheck(["hydra.run.dir=/tmp/x", "algo=vpg"])


def test_deleting_a_whole_part_is_kept_and_deleting_a_setting_is_refused() -> None:
    """``~logger.csv`` runs without the CSV logger; ``~algo.learning_rate`` would be filled back with
    the default, so it is refused (it ran with the default in silence)."""
    from corral.framework.precheck import precheck

    prepare([])
    precheck(["~logger.csv"])
    precheck(["logger=[console]", "~hydra.job.env_set"])  # Hydra's own: Hydra's business
    with pytest.raises(ConfigError, match=r"^~algo.learning_rate: a deleted setting is filled back with its default"):
        precheck(["~algo.learning_rate"])
    # A list or mapping setting too (it ran with the default list in silence).
    for key in ("policy.hidden_sizes", "env.kwargs"):
        with pytest.raises(ConfigError, match=rf"^~{key}: a deleted setting is filled back with its default"):
            precheck([f"~{key}"])


def test_a_true_false_setting_takes_only_true_or_false() -> None:
    """OmegaConf reads ``2``, ``0``, ``yes`` or ``off`` for a true/false setting as true or false without
    a word; corral refuses them, for a run, ``++`` and each value of a sweep. ``true``/``False`` and an
    interpolation pass."""
    from corral.framework.precheck import precheck

    prepare([])
    for given, read in (("2", "true"), ("0", "false"), ("yes", "true"), ("off", "false")):
        with pytest.raises(ConfigError) as info:
            precheck([f"normalize.obs={given}"])
        assert str(info.value) == (f"normalize.obs must be true or false, got {given} (OmegaConf would read it as "
                                   f"{read} without a word); give normalize.obs=true or normalize.obs=false")
    with pytest.raises(ConfigError, match=r"^trainer.progress must be true or false, got 1 "):
        precheck(["++trainer.progress=1"])
    with pytest.raises(ConfigError, match=r"^algo.normalize_advantages must be true or false, got no .*"
                                          r"\(a value of the sweep algo.normalize_advantages=true,no\)$"):
        precheck(["-m", "algo.normalize_advantages=true,no"])
    precheck(["normalize.obs=true", "normalize.reward=False", "trainer.progress=${normalize.obs}"])
    precheck(["-m", "normalize.obs=true,false"])


def test_every_job_of_a_sweep_is_checked_before_any_starts() -> None:
    """A job whose choices do not fit together was found when the sweep reached it, after the jobs
    before it had run; now the sweep is refused, naming the job. The basic sweeper's jobs are all
    checked up to MAX_JOB_CHECKS; beyond that, the config groups' options with the first value of
    the other sweeps. A sweeper that chooses its own jobs (Optuna) is left to them."""
    from corral.framework.precheck import MAX_JOB_CHECKS, precheck

    prepare([])
    with pytest.raises(ConfigError) as info:
        precheck(["-m", "algo=ppo,sac", "seed=1,2"])
    assert str(info.value).startswith("algo=sac supports continuous actions only, but env=cartpole has discrete actions")
    assert str(info.value).endswith(" (the sweep's job algo=sac seed=1; no job has started)")
    with pytest.raises(ConfigError, match=r"worker=default has no setting 'n_envs'.* \(the sweep's job worker=default; "):
        precheck(["-m", "worker=vec,default", "worker.n_envs=4"])
    with pytest.raises(ConfigError, match=r" \(no job of the sweep has started\)$"):
        precheck(["-m", "algo.clip_range=-1"])  # a sweep of one job
    many = f"seed=range(0,{MAX_JOB_CHECKS + 1})"  # more jobs than are checked one by one: each option still is
    with pytest.raises(ConfigError, match=r"\(the sweep's job seed=0 algo=sac; no job has started\)$"):
        precheck(["-m", many, "algo=ppo,sac"])
    precheck(["-m", many, "algo=ppo,vpg", "worker=default,vec"])
    precheck(["-m", "seed=1,2", "algo=ppo,vpg"])
    precheck(["-m", "experiment=ppo_cartpole_optuna", "hydra.sweeper.n_trials=2"])
    # glob(...) is the group's options it matches (each job failed when the sweep reached it)
    with pytest.raises(ConfigError, match=r"^algo=dqn cannot train policy=mlp.* \(the sweep's job algo=dqn; "):
        precheck(["-m", "algo=glob(*)"])
    precheck(["-m", "algo=glob(*,exclude=[dqn,sac,pearl,rl2_ppo])", "env=cartpole,pendulum"])
    # a sweep of no values ran no job and ended as a success; a range of step 0 was a traceback
    with pytest.raises(ConfigError) as info:
        precheck(["-m", "seed=range(1,0)"])
    assert str(info.value) == ("seed=range(1,0) lists no values, so the sweep would run no job (range(a,b) counts "
                               "from a up to b, leaving b out)")
    with pytest.raises(ConfigError, match=r"^algo=glob\(zz\*\) matches none of algo's options \(dqn, .*\), so the "
                                          r"sweep would run no job$"):
        precheck(["-m", "algo=glob(zz*)"])
    with pytest.raises(ConfigError, match=r"^seed=range\(0,3,0\): range\(\) arg 3 must not be zero$"):
        precheck(["-m", "seed=range(0,3,0)"])
    # an interval: Hydra's basic sweeper stopped on it with a traceback
    with pytest.raises(ConfigError) as info:
        precheck(["-m", "algo.learning_rate=interval(0.1,0.2)"])
    assert str(info.value) == ("algo.learning_rate=interval(0.1,0.2): Hydra's basic sweeper cannot sweep an interval, "
                               "which has no values to list; list them (algo.learning_rate=a,b,c) or use range(...), or "
                               "search the interval with hydra/sweeper=optuna")


def test_a_plugins_name_is_not_a_setting() -> None:
    """``sampler.name=ray`` would build the Ray sampler from the local sampler's settings, and
    ``logger.csv.name=x`` would be ignored: both are one line that says how to choose. A name equal
    to the chosen option's changes nothing and passes."""
    from corral.framework.precheck import precheck

    prepare([])
    with pytest.raises(ConfigError) as info:
        precheck(["algo.name=vpg", "seed=2"])
    assert str(info.value) == ("algo.name=vpg: a plugin's name comes with its option (algo.name is 'ppo') and is not "
                               "a setting; choose the option with algo=vpg")
    with pytest.raises(ConfigError) as info:
        precheck(["logger=[console,csv]", "logger.csv.name=x"])
    assert str(info.value) == ("logger.csv.name=x: a plugin's name comes with its option (logger.csv.name is 'csv') "
                               "and is not a setting; loggers are chosen with logger=[...], e.g. logger=[console,csv]")
    precheck(["sampler=ray", "sampler.name=ray"])


def test_check_choices_reads_every_form_of_group_override() -> None:
    from corral.framework.precheck import _missing_message, check_choices

    options = {"sampler": ["local", "ray"], "logger": ["console", "csv"]}
    seen: list[str] = []

    def options_of(group: str) -> list[str]:
        seen.append(group)
        return options.get(group, [])

    fine = ["sampler=ray", "logger=[console,csv]", "sampler=local,ray", "sampler=choice(local,ray)",
            "logger=[console],[csv]", "seed=1,2,3", "~sampler", "sampler=glob(*)", "algo.lr=interval(0,1)",
            "+sampler=local", "sampler=local,"]
    check_choices(fine, options_of)
    # Not looked up: value overrides, globs, intervals. A number is (``sampler=1`` names no option).
    assert set(seen) == {"sampler", "logger", "seed"}
    for bad, option in [("sampler=nope", "nope"), ("logger=[console,nope]", "nope"), ("sampler=ray,nope", "nope"),
                        ("logger=[csv],[nope]", "nope"), ("+sampler=nope", "nope"), ("sampler=1", "1"),
                        ("sampler=2.5", "2.5"), ("sampler=true", "true"), ("sampler=null", "null"),
                        ("logger=[console,3]", "3")]:
        with pytest.raises(ConfigError) as info:
            check_choices(["seed=1", bad], options_of)
        group = bad.lstrip("+").split("=")[0]
        assert str(info.value) == (f"{bad}: {group} has no option {option!r}; choose one of "
                                   f"{', '.join(options[group])} (a plugin package adds its own; "
                                   "`corral plugins` lists what is installed)")

    # A preset naming an option that is not there: the same line, without an override to name.
    from hydra.errors import MissingConfigException

    exc = MissingConfigException("In 'experiment/x': Could not load 'sampler/nope'.", missing_cfg_file="sampler/nope")
    assert _missing_message(exc, options_of).startswith("sampler has no option 'nope'; choose one of local, ray (")
    other = MissingConfigException("Cannot find primary config 'config'", missing_cfg_file="config")
    assert _missing_message(other, options_of) == "Cannot find primary config 'config'"


def _leaf_keys(node: DictConfig, prefix: str = "") -> list[str]:
    keys = []
    for key in node:
        child = node._get_node(key)
        if OmegaConf.is_dict(child):
            keys += _leaf_keys(child, f"{prefix}{key}.")  # type: ignore[arg-type]
        else:
            keys.append(f"{prefix}{key}")
    return keys


@pytest.mark.parametrize("preset", [[], ["experiment=sac_pendulum"], ["logger=[console,csv,tensorboard,mlflow,wandb]"]])
def test_no_bad_value_of_any_setting_escapes_as_a_traceback(preset: list[str]) -> None:
    """Every setting of a composition given a value of the wrong type, and every group given a number,
    a boolean or null: train.py's precheck either refuses it with a CorralError (train.py prints it as
    one ``corral: error`` paragraph) or accepts it (a setting that takes any string); it never raises
    anything else, which train.py would print as a traceback. (``sampler=1`` raised Hydra's ValueError.)"""
    from corral.framework.precheck import precheck

    prepare([])
    keys = [k for k in _leaf_keys(compose(*preset)) if not k.startswith("hydra")]
    groups = ["trainer", "env", "algo", "policy", "sampler", "worker", "logger", "normalize", "experiment"]
    escaped = []
    for override in [f"{k}={bad}" for k in keys for bad in ("abc", "[abc]")] + \
                    [f"{g}={bad}" for g in groups for bad in ("1", "true", "null")]:
        try:
            precheck([*preset, override])
        except CorralError:
            pass
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            escaped.append(f"{override}: {type(exc).__name__}: {exc}")
    assert len(keys) > 20 and escaped == []


def test_repeated_keys_counts_settings_not_deletions() -> None:
    from corral.framework.precheck import repeated_key_warnings, repeated_keys

    given = ["seed=1", "+algo.extra=1", "~logger.csv", "logger.csv.flush_every=2", "algo.extra=2", "seed=2"]
    assert repeated_keys(given) == {"seed": ["seed=1", "seed=2"], "algo.extra": ["+algo.extra=1", "algo.extra=2"]}
    assert repeated_keys(["seed=1", "algo=ppo", "~logger.csv", "logger.csv.x=1"]) == {}
    assert repeated_key_warnings(["trainer.resume=a", "trainer.resume=b", "hydra.run.dir=c", "hydra.run.dir=d"]) == [
        "trainer.resume is given twice (trainer.resume=a, then trainer.resume=b); the run uses the last, trainer.resume=b",
        "hydra.run.dir is given twice (hydra.run.dir=c, then hydra.run.dir=d); the run uses the last, hydra.run.dir=d"]


def test_a_key_added_to_hydras_fixed_settings_is_an_error_and_one_added_to_a_mapping_is_not() -> None:
    from corral.framework.precheck import precheck

    prepare([])
    for given in (["+hydra.nope=1"], ["+hydra.job.nope=1"], ["++hydra.run.nope=x"], ["-m", "seed=1,2", "+hydra.nope=1"]):
        with pytest.raises(ConfigError, match=r"^\S*hydra\.\S*nope=\S+: Hydra's config has no hydra\.(\w+\.)?nope "):
            precheck(given)
    precheck(["+hydra.job.env_set.CORRAL_X=1", "++hydra.job.chdir=false", "trainer.n_epochs=1"])


def test_hydras_flags_are_checked_wherever_they_stand_among_the_overrides() -> None:
    from corral.framework.precheck import check_flags

    check_flags(["seed=1", "-m", "algo=vpg,ppo"])  # argparse alone stops at a flag between overrides
    check_flags(["seed=1", "--cfg", "job", "algo=vpg"])
    check_flags(["--info", "seed=1"])
    with pytest.raises(ConfigError, match=r"^unrecognized arguments: --nope; `corral train --help` lists its flags"):
        check_flags(["seed=1", "--nope", "algo=vpg"], "corral train")
    with pytest.raises(ConfigError, match=r"^--run and -m cannot be given together"):
        check_flags(["-r", "seed=1", "-m"])


def test_a_single_runs_and_a_sweeps_own_hydra_settings_are_told_apart() -> None:
    from corral.framework.precheck import run_only_warnings, sweep_only_warnings

    given = ["hydra.run.dir=r", "hydra.sweep.dir=s", "hydra/launcher=joblib", "hydra.job.chdir=true", "seed=1"]
    assert run_only_warnings(given) == [
        "hydra.run.dir=r has no effect with -m: a sweep's jobs go under hydra.sweep.dir, one directory each; give "
        "hydra.sweep.dir=r instead"]
    assert [line.split(" ", 1)[0] for line in sweep_only_warnings(given)] == ["hydra.sweep.dir=s", "hydra/launcher=joblib"]


@pytest.mark.parametrize(("override", "reason", "says"), [
    ("trainer.batch_size=1e3", "Value '1000.0' of type 'float' could not be converted to Integer",
     "trainer.batch_size=1e3: trainer.batch_size takes a whole number, not 1e3 (read as 1000.0); write "
     "trainer.batch_size=1000"),
    ("trainer.batch_size=1e30", "Value '1e+30' of type 'float' could not be converted to Integer",
     "trainer.batch_size=1e30: trainer.batch_size takes a whole number, not 1e30 (read as 1e+30)"),
    ("seed=2.5", "Value '2.5' of type 'float' could not be converted to Integer",
     "seed=2.5: seed takes a whole number, not 2.5"),
    ("+algo.lr=[1]", "Value '[1]' of type 'ListConfig' could not be converted to Float",
     "+algo.lr=[1]: algo.lr takes a number, not a list ([1])"),
    ("trainer.progress=maybe", "Value 'maybe' is not a valid bool (type str)",
     "trainer.progress must be true or false, got maybe; give trainer.progress=true or trainer.progress=false"),
    ("+trainer.progress='a b'", "Value 'a b' is not a valid bool (type str)",
     "trainer.progress must be true or false, got 'a b'; give trainer.progress=true or trainer.progress=false"),
    # a list or mapping setting given something else: OmegaConf's words were about its own classes
    ("policy.hidden_sizes=64", "Invalid value assigned: int is not a ListConfig, list or tuple.",
     "policy.hidden_sizes=64: policy.hidden_sizes takes a list, not 64; write it in brackets, e.g. "
     "policy.hidden_sizes=[64]"),
    ("++policy.hidden_sizes=64", "Invalid value assigned: int is not a ListConfig, list or tuple.",
     "++policy.hidden_sizes=64: policy.hidden_sizes takes a list, not 64; write it in brackets, e.g. "
     "policy.hidden_sizes=[64]"),
    ("policy.hidden_sizes={a:1}", "Cannot merge DictConfig with ListConfig",
     "policy.hidden_sizes={a:1}: policy.hidden_sizes takes a list, not a mapping ({a:1}); write it in brackets, e.g. "
     "policy.hidden_sizes=[...]"),
    ("env.kwargs=5", "Cannot assign int to Dict[str, Any]",
     "env.kwargs=5: env.kwargs takes a mapping, not 5; write it in braces, quoted for the shell, e.g. "
     "'env.kwargs={name: value}'"),
    ("env.kwargs=[1]", "Cannot merge DictConfig with ListConfig",
     "env.kwargs=[1]: env.kwargs takes a mapping, not a list ([1]); write it in braces, quoted for the shell, e.g. "
     "'env.kwargs={name: value}'"),
])
def test_type_message_says_what_the_setting_takes(override: str, reason: str, says: str) -> None:
    from corral.framework.precheck import type_message

    assert type_message(override, reason) == says
