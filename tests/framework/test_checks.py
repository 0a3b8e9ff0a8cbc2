"""corral.check: declaring what a config field accepts, and the messages when a value does not fit."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional

import pytest

from corral import Check, check
from corral.framework.checks import (
    check_defaults,
    check_minimums,
    check_values,
    composed_ignored,
    describe_field,
    field_problems,
    ignored_values,
    relation_problems,
    unchecked_fields,
    unknown_key_message,
    unresolved_message,
)
from corral.framework.errors import ConfigError


@dataclass
class Example:
    """One field of each kind of declaration."""

    rate: float = field(default=0.1, metadata=check(gt=0, help="step size"))
    fraction: float = field(default=0.5, metadata=check(ge=0, le=1))
    ratio: float = field(default=0.5, metadata=check(gt=0, lt=1))
    count: int = field(default=1, metadata=check(ge=1))
    limit: Optional[int] = field(default=None, metadata=check(ge=1))
    widths: list[int] = field(default_factory=lambda: [8, 8], metadata=check(ge=1))
    mode: str = field(default="a", metadata=check(choices=("a", "b")))
    device: str = field(default="cpu", metadata=check(pattern=r"cpu|cuda(:[0-9]+)?", describe="cpu, cuda or cuda:N"))
    offset: float = field(default=0.0, metadata=check(help="any finite number"))
    flag: bool = True
    name_: str = "free text"


def problems(**values: object) -> list[str]:
    return field_problems(Example, values, "algo")


def test_metadata_keeps_the_help() -> None:
    assert check(gt=0, help="step size")["help"] == "step size"
    assert isinstance(check(gt=0)["check"], Check) and "help" not in check(gt=0)


@pytest.mark.parametrize(("values", "expected"), [
    ({"rate": -1.0}, ["algo.rate must be > 0, got -1.0"]),
    ({"rate": 0.0}, ["algo.rate must be > 0, got 0.0"]),
    ({"fraction": 1.5}, ["algo.fraction must be >= 0 and <= 1, got 1.5"]),
    ({"ratio": 1.0}, ["algo.ratio must be > 0 and < 1, got 1.0"]),
    ({"count": 0}, ["algo.count must be >= 1, got 0"]),
    ({"limit": -5}, ["algo.limit must be >= 1, got -5"]),
    ({"widths": [64, 0, -1]}, ["algo.widths[1] must be >= 1, got 0", "algo.widths[2] must be >= 1, got -1"]),
    ({"mode": "c"}, ["algo.mode must be one of 'a', 'b', got 'c'"]),
    ({"device": "gpu"}, ["algo.device must be cpu, cuda or cuda:N, got 'gpu'"]),
    ({"offset": math.nan}, ["algo.offset must be a finite number, got nan"]),
    ({"rate": math.inf}, ["algo.rate must be a finite number > 0, got inf"]),
])
def test_out_of_range_values_are_named(values: dict, expected: list[str]) -> None:
    assert problems(**values) == expected


@pytest.mark.parametrize("values", [
    {"rate": 1e-8, "fraction": 0.0, "ratio": 0.999, "count": 10**9},
    {"fraction": 1, "limit": None, "widths": [], "mode": "b", "device": "cuda:1", "offset": -1e30},
])
def test_values_inside_their_range_pass(values: dict) -> None:
    assert problems(**values) == []


def test_check_values_raises_one_error_with_every_problem() -> None:
    with pytest.raises(ConfigError, match=r"^algo.rate must be > 0, got -1; algo.count must be >= 1, got 0$"):
        check_values(Example, {"rate": -1, "count": 0}, "algo")


def test_descriptions_for_corral_plugins() -> None:
    described = {f.name: describe_field(f) for f in fields(Example)}
    assert described == {"rate": "> 0", "fraction": ">= 0 and <= 1", "ratio": "> 0 and < 1", "count": ">= 1",
                         "limit": ">= 1 or null", "widths": ">= 1", "mode": "one of 'a', 'b'",
                         "device": "cpu, cuda or cuda:N", "offset": "any finite number", "flag": "", "name_": ""}


def test_defaults_and_undeclared_numeric_fields() -> None:
    assert check_defaults(Example, "algo") == [] and unchecked_fields(Example) == []

    @dataclass
    class Careless:
        lr: float = field(default=0.0, metadata=check(gt=0))
        layers: int = 2
        sizes: list[int] = field(default_factory=list)
        by_hand: float = field(default=1.0, metadata={"check": "> 0"})

    assert unchecked_fields(Careless) == ["layers", "sizes", "by_hand"]
    assert check_defaults(Careless, "algo") == [
        "algo.by_hand: metadata['check'] must come from corral.check(...), got '> 0'",
        "algo.lr must be > 0, got 0.0",
    ]


def test_unknown_key_message_names_fields_close_matches_and_other_options() -> None:
    assert unknown_key_message("algo", "algo=vpg", "vf_iter", ["vf_iters", "vf_lr"]) == (
        "algo.vf_iter is not a setting: algo=vpg has no setting 'vf_iter'; its settings are algo.vf_iters, "
        "algo.vf_lr; did you mean algo.vf_iters? (`corral plugins` lists every option's settings)")
    assert unknown_key_message("worker", "worker=default", "n_envs", [], ["worker=vec"]) == (
        "worker.n_envs is not a setting: worker=default has no setting 'n_envs' (it has no settings); worker=vec "
        "has 'n_envs': choose it (e.g. worker=vec worker.n_envs=...) (`corral plugins` lists every option's settings)")


@dataclass
class Related:
    """Fields bounded by a sibling field."""

    buffer_size: int = field(default=100, metadata=check(ge=1))
    min_buffer_size: int = field(default=10, metadata=check(ge=1, le_field="buffer_size"))
    low: Optional[float] = field(default=-1.0, metadata=check(lt_field="high"))
    high: float = field(default=1.0, metadata=check())


def test_a_field_bounded_by_another_field() -> None:
    assert field_problems(Related, {"buffer_size": 100, "min_buffer_size": 100, "low": None, "high": 0.0}, "algo") == []
    assert field_problems(Related, {"buffer_size": 100, "min_buffer_size": 101, "low": 2.0, "high": 1.0}, "algo") == [
        "algo.min_buffer_size must be <= algo.buffer_size (100), got 101",
        "algo.low must be < algo.high (1.0), got 2.0",
    ]
    described = {f.name: describe_field(f) for f in fields(Related)}
    assert described["min_buffer_size"] == ">= 1 and <= buffer_size" and described["low"] == "< high or null"
    assert check_defaults(Related) == []


def test_a_relation_with_a_field_that_has_its_own_problem_is_not_a_second_message() -> None:
    """``algo.buffer_size=-1`` is one message: that min_buffer_size exceeds -1 follows from it."""
    assert field_problems(Related, {"buffer_size": -1, "min_buffer_size": 100, "low": 0.0, "high": 1.0}, "algo") == [
        "algo.buffer_size must be >= 1, got -1"]
    # Either side: the field that declares the relation, or the one it names.
    assert field_problems(Related, {"buffer_size": 5, "min_buffer_size": 0, "low": 2.0, "high": math.nan}, "algo") == [
        "algo.min_buffer_size must be >= 1 and <= buffer_size, got 0", "algo.high must be a finite number, got nan"]
    # Each field in range, the relation is still checked.
    assert field_problems(Related, {"buffer_size": 5, "min_buffer_size": 6}, "algo") == [
        "algo.min_buffer_size must be <= algo.buffer_size (5), got 6"]
    with pytest.raises(ConfigError, match=r"^algo.buffer_size must be >= 1, got 0$"):
        check_values(Related, {"buffer_size": 0, "min_buffer_size": 10}, "algo")


@dataclass
class Conditional:
    """Fields that only matter under a sibling's value."""

    every: int = field(default=5, metadata=check(ge=0))
    episodes: int = field(default=10, metadata=check(ge=1, applies_if=("every", ">", 0)))
    obs: bool = False
    reward: bool = False
    epsilon: float = field(default=1e-8, metadata=check(gt=0, applies_if=(("obs", "==", True), ("reward", "==", True))))
    resume: Optional[str] = None
    trust: bool = field(default=False, metadata=check(applies_if=("resume", "!=", None)))


def test_a_value_that_would_be_ignored_is_named_with_what_makes_it_apply() -> None:
    assert ignored_values(Conditional, {"every": 0, "episodes": 7}, "trainer") == [
        "trainer.episodes=7 has no effect while trainer.every=0: it applies only with trainer.every > 0; set that, "
        "or leave trainer.episodes at its default (10)"]
    assert ignored_values(Conditional, {"epsilon": 0.1}, "normalize") == [
        "normalize.epsilon=0.1 has no effect while normalize.obs=false and normalize.reward=false: it applies only "
        "with normalize.obs=true or normalize.reward=true; set that, or leave normalize.epsilon at its default (1e-08)"]
    assert ignored_values(Conditional, {"trust": True, "resume": None}, "trainer") == [
        "trainer.trust=true has no effect while trainer.resume=null: it applies only with trainer.resume set; set "
        "that, or leave trainer.trust at its default (false)"]


@pytest.mark.parametrize("values", [
    {"every": 0, "episodes": 10},  # at its default: nothing is ignored
    {"every": 0},  # not given
    {"every": 1, "episodes": 7},  # applies
    {"episodes": 7},  # the sibling at its default (5) applies
    {"reward": True, "epsilon": 0.1},  # any one condition is enough
    {"resume": "runs/a", "trust": True},
])
def test_a_value_that_applies_or_stays_at_its_default_is_not_named(values: dict) -> None:
    assert ignored_values(Conditional, values, "x") == []


def test_applies_if_is_described_and_checked_when_declared() -> None:
    described = {f.name: describe_field(f) for f in fields(Conditional)}
    assert described["episodes"] == ">= 1; only with every > 0"
    assert described["epsilon"] == "> 0; only with obs=true or reward=true"
    assert described["trust"] == "only with resume set"
    assert ignored_values(Conditional, {"every": 0, "episodes": 7}, "t", given={"every"}) == []  # not the user's
    assert check_defaults(Conditional) == []
    with pytest.raises(ValueError, match="applies_if conditions are"):
        check(applies_if=("every", ">=", 0))

    @dataclass
    class Typo:
        every: int = 1
        episodes: int = field(default=10, metadata=check(ge=1, applies_if=("evry", ">", 0)))

    assert check_defaults(Typo, "trainer") == ["trainer.episodes: applies_if names 'evry', which is not a field of Typo"]


def test_corral_options_name_values_they_would_ignore() -> None:
    """The built-in options that only matter under another setting say so (a sample of them); out-of-range
    checks do not see these."""
    from corral.framework.trainer import TrainerConfig
    from corral.plugins.algos.sac import SACConfig
    from corral.plugins.samplers.multiprocessing import MultiprocessingSamplerConfig
    from corral.rl.normalization import NormalizeConfig

    assert ignored_values(TrainerConfig, {"eval_every": 0, "video_every": 2}, "trainer") != []
    assert ignored_values(SACConfig, {"gradient_steps": 4, "utd_ratio": 2.0}, "algo") != []
    assert ignored_values(SACConfig, {"auto_entropy": False, "target_entropy": -2.0}, "algo") != []
    assert ignored_values(MultiprocessingSamplerConfig, {"max_restarts": 1}, "sampler") != []
    assert ignored_values(MultiprocessingSamplerConfig, {"on_worker_failure": "restart", "max_restarts": 1}, "s") == []
    assert ignored_values(NormalizeConfig, {"reward": True, "clip": 5.0}, "normalize") != []
    assert field_problems(NormalizeConfig, {"reward": True, "clip": 5.0}, "normalize") == []


def test_configs_built_in_python_check_their_own_values() -> None:
    """``@checked``: library use gets the command line's one-line errors for out-of-range values."""
    import gymnasium as gym

    from corral import PPO, MLPPolicy, TrainerConfig
    from corral.framework.env import EnvSpec
    from corral.plugins.algos.sac import SACConfig
    from corral.plugins.algos.trpo import TRPOConfig
    from corral.rl.normalization import NormalizeConfig

    spec = EnvSpec.from_env(gym.make("CartPole-v1"))
    with pytest.raises(ConfigError, match=r"^algo.learning_rate must be > 0, got -1$"):
        PPO(spec, MLPPolicy(spec), None, learning_rate=-1)
    with pytest.raises(ConfigError, match=r"^trainer.batch_size must be >= 1, got 0$"):
        TrainerConfig(batch_size=0)
    with pytest.raises(ConfigError, match=r"^normalize.clip must be > 0, got -1.0$"):
        NormalizeConfig(obs=True, clip=-1.0)
    with pytest.raises(ConfigError, match=r"^algo.backtrack_ratio must be > 0 and < 1, got 1.5$"):
        TRPOConfig(backtrack_ratio=1.5)
    # Not applies_if: a config made from a composed node cannot tell a user's value from a preset's.
    assert SACConfig(gradient_steps=3, utd_ratio=2.0).utd_ratio == 2.0


@dataclass
class Window:
    """Two fields with a relation its own ``__post_init__`` checks."""

    low: int = 0
    high: Optional[int] = 10

    def __post_init__(self) -> None:
        if self.high is not None and self.high < self.low:
            raise ConfigError(f"window.high ({self.high}) must be at least window.low ({self.low})")
        if self.high is not None and self.high > 10**6:
            raise RuntimeError("not a ConfigError")


def test_relation_problems_are_what_the_config_classs_own_post_init_says() -> None:
    assert relation_problems(Window, {"low": 1, "high": 5}) == []
    assert relation_problems(Window, {"low": 6, "high": 5, "name": "w"}) == [
        "window.high (5) must be at least window.low (6)"]  # keys that are not fields (the option's name) are dropped
    assert relation_problems(Window, {"high": 10**7}) == []  # anything else: left to whoever builds it


def test_check_minimums_names_the_setting_its_least_value_and_null() -> None:
    limits = {"timeout_min": 1, "cpus_per_task": 1, "gpus_per_node": 0}
    check_minimums({"timeout_min": 5, "cpus_per_task": None, "gpus_per_node": 0}, "hydra.launcher", limits,
                   nullable=("cpus_per_task",))
    check_minimums({}, "hydra.launcher", limits)  # a setting the node does not have is not checked
    for node, says in (({"timeout_min": 0}, "hydra.launcher.timeout_min must be a whole number >= 1, got 0"),
                       ({"timeout_min": True}, "hydra.launcher.timeout_min must be a whole number >= 1, got True"),
                       ({"timeout_min": None}, "hydra.launcher.timeout_min must be a whole number >= 1, got None"),
                       ({"cpus_per_task": 0}, "hydra.launcher.cpus_per_task must be a whole number >= 1 or null, got 0")):
        with pytest.raises(ConfigError) as info:
            check_minimums(node, "hydra.launcher", limits, nullable=("cpus_per_task",))
        assert str(info.value) == says


@dataclass
class MetaConfig:
    """A meta-RL algorithm's settings: two that only the trainer's evaluation reads (another group's
    setting in their ``applies_if``)."""

    meta_eval_trials: int = field(default=2, metadata=check(ge=1, applies_if=("trainer.eval_every", ">", 0)))
    meta_eval_deterministic: bool = field(default=False, metadata=check(applies_if=("trainer.eval_every", ">", 0)))
    learning_rate: float = 0.1


def test_applies_if_on_another_groups_setting_is_read_from_the_run_config() -> None:
    """A setting that only another group's setting makes matter (``algo.meta_eval_*``: the trainer's
    evaluation runs ``meta_evaluate``) names that setting when it does not hold; a trainer without it
    (another trainer plugin) holds no value, so the condition does not hold there either."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    registry = SimpleNamespace(entries={("algo", "meta"): SimpleNamespace(factory=lambda config: None,
                                                                          config=MetaConfig)})

    def cfg(trainer: dict, **values: object) -> object:
        return OmegaConf.create({"trainer": {"name": "default", **trainer},
                                 "algo": {"name": "meta", "meta_eval_trials": 2, "meta_eval_deterministic": False,
                                          "learning_rate": 0.1, **values}})

    given = {"algo.meta_eval_trials", "algo.meta_eval_deterministic", "algo.learning_rate"}
    changed = {"meta_eval_trials": 5, "meta_eval_deterministic": True, "learning_rate": 0.5}
    assert composed_ignored(cfg({"eval_every": 0}, **changed), registry, ("algo",), given) == [
        "algo.meta_eval_trials=5 has no effect while trainer.eval_every=0: it applies only with trainer.eval_every > 0; "
        "set that, or leave algo.meta_eval_trials at its default (2)",
        "algo.meta_eval_deterministic=true has no effect while trainer.eval_every=0: it applies only with "
        "trainer.eval_every > 0; set that, or leave algo.meta_eval_deterministic at its default (false)"]
    assert composed_ignored(cfg({"eval_every": 5}, **changed), registry, ("algo",), given) == []  # it evaluates
    assert composed_ignored(cfg({"eval_every": 0}, **changed), registry, ("algo",), set()) == []  # a preset's values
    assert composed_ignored(cfg({"eval_every": 0}), registry, ("algo",), given) == []  # the defaults
    # a trainer without eval_every (another trainer plugin): the condition does not hold (it was "holds")
    assert composed_ignored(cfg({}, **changed), registry, ("algo",), given)[0] == (
        "algo.meta_eval_trials=5 has no effect while trainer=default, which has no setting eval_every: it applies "
        "only with trainer.eval_every > 0; set that, or leave algo.meta_eval_trials at its default (2)")
    assert composed_ignored(cfg({"eval_every": "${nope}"}, **changed), registry, ("algo",), given) == []  # named elsewhere
    assert ignored_values(MetaConfig, changed, "algo") == []  # without the run's config: counted as holding
    assert check_defaults(MetaConfig) == []  # a dotted applies_if names another group's setting, not a field
    assert describe_field(fields(MetaConfig)[0]) == ">= 1; only with trainer.eval_every > 0"


def test_an_interpolation_that_does_not_resolve_names_the_setting() -> None:
    """The setting as written and the key its interpolation names (the message named the group: ``algo:
    Interpolation key 'nope' not found``); OmegaConf's reason for another interpolation that fails."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    cfg = OmegaConf.create({"algo": {"learning_rate": "${nope}", "eps": "${oc.env:CORRAL_TEST_NOPE}"}})
    with pytest.raises(OmegaConfBaseException) as missing:
        OmegaConf.select(cfg, "algo.learning_rate")
    assert unresolved_message(cfg, "algo.learning_rate", missing.value) == (
        "algo.learning_rate=${nope}: the interpolation names nope, which the config does not have; give "
        "algo.learning_rate a value, or interpolate a setting the config has (`python train.py --cfg job` lists them)")
    with pytest.raises(OmegaConfBaseException) as unset:
        OmegaConf.select(cfg, "algo.eps")
    assert unresolved_message(cfg, "algo.eps", unset.value) == (
        "algo.eps=${oc.env:CORRAL_TEST_NOPE}: its interpolation does not resolve (KeyError raised while resolving "
        "interpolation: \"Environment variable 'CORRAL_TEST_NOPE' not found\"); give algo.eps a value")
