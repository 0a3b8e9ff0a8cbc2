"""corral's pytest plugin (``corral.testing.plugin``): registered through ``pytest11``, its fixtures
compose, build and register inline plugins, and clean up after themselves."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hydra.core.global_hydra import GlobalHydra

from corral import LocalSampler, hookimpl
from corral.framework.errors import PluginError
from corral.framework.plugins import get_registry

pytest_plugins = ["pytester"]

TINY = ["trainer.n_epochs=1", "trainer.batch_size=100", "trainer.eval_every=0", "logger=[csv]"]


def test_the_plugin_is_loaded_through_its_entry_point(pytestconfig: pytest.Config) -> None:
    plugin = pytestconfig.pluginmanager.get_plugin("corral")
    assert plugin is not None and plugin.__name__ == "corral.testing.plugin"


def test_compose_gives_the_train_py_config(corral_compose) -> None:
    cfg = corral_compose("algo=vpg", ["worker=vec", "worker.n_envs=3"], "seed=4")
    assert (cfg.algo.name, cfg.worker.name, cfg.worker.n_envs, cfg.seed) == ("vpg", "vec", 3, 4)
    assert cfg.sampler.name == "local" and "hydra" not in cfg
    assert not GlobalHydra.instance().is_initialized()
    preset = corral_compose("experiment=ppo_cartpole")
    assert preset.trainer.batch_size == 2048


def test_build_makes_a_run_in_a_temporary_directory(corral_build, tmp_path) -> None:
    run = corral_build(*TINY)
    stats = run.train()
    assert stats["env_steps"] >= 100
    assert run.trainer.log_dir.parent == tmp_path
    assert (run.trainer.log_dir / "progress.csv").exists()


@dataclass
class InlineSamplerConfig:
    """Settings of ``sampler=inline_local``."""

    n_workers: int = field(default=1, metadata={"help": "workers"})
    label: str = field(default="x", metadata={"help": "a setting only this sampler has"})


class InlineSampler(LocalSampler):
    """A local sampler with one extra setting."""

    def __init__(self, agents: Any, envs: Any, *, label: str = "x", **kwargs: Any) -> None:
        self.label = label
        super().__init__(agents, envs, **kwargs)


class InlinePlugin:
    """A plugin object, as a notebook or a test would write one."""

    @hookimpl
    def corral_register(self, register: Any) -> None:
        register("sampler", "inline_local", InlineSampler, config=InlineSamplerConfig, help="inline test sampler")


class BrokenInlinePlugin:
    """Registers under a kind that does not exist."""

    @hookimpl
    def corral_register(self, register: Any) -> None:
        register("samplerz", "nope", InlineSampler)


def test_inline_plugin_components_compose_and_build(corral_inline_plugin, corral_build) -> None:
    manager = corral_inline_plugin(InlinePlugin(), name="inline-test")
    reg = manager.registry.get("sampler", "inline_local")
    assert (reg.source.distribution, reg.source.plugin) == ("inline", "inline-test")
    run = corral_build("sampler=inline_local", "sampler.label=hello", *TINY)
    assert isinstance(run.sampler, InlineSampler) and run.sampler.label == "hello"
    run.train()


def test_a_failing_inline_plugin_raises_with_its_error(corral_inline_plugin) -> None:
    n_failed = len(get_registry().failed)
    with pytest.raises(PluginError, match="inline plugin 'broken' failed to register: PluginError: .*unknown kind 'samplerz'"):
        corral_inline_plugin(BrokenInlinePlugin(), name="broken")
    assert len(get_registry().failed) == n_failed


def test_fixtures_clean_up_after_the_test(pytester: pytest.Pytester) -> None:
    """Runs are closed and inline plugins (and their Hydra options) are gone once a test ends."""
    pytester.makepyfile(
        test_inner="""
        import pytest
        from hydra.errors import MissingConfigException
        from corral import hookimpl, LocalSampler
        from corral.framework.plugins import get_registry

        TINY = ["trainer.n_epochs=1", "trainer.batch_size=50", "trainer.eval_every=0", "logger=[csv]"]
        RUNS = []

        class Plugin:
            @hookimpl
            def corral_register(self, register):
                register("sampler", "inner_local", LocalSampler)

        def test_use(corral_inline_plugin, corral_build):
            corral_inline_plugin(Plugin(), name="inner")
            RUNS.append(corral_build("sampler=inner_local", *TINY))
            RUNS[0].train()

        def test_after(corral_compose):
            with pytest.raises(RuntimeError, match="shut down"):
                RUNS[0].sampler.obtain_samples(1, 10, None)
            assert "inner_local" not in get_registry().names("sampler")
            with pytest.raises(MissingConfigException):
                corral_compose("sampler=inner_local")
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)
