"""The plugin manager, exercised the way third-party authors use it: with pip-installed distributions.

The test distributions live in ``tests/data/plugins`` and are installed for real (see ``conftest.py``).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, ContextManager

import numpy as np
import pytest

from corral import hookimpl
from corral.framework.errors import PluginError
from corral.framework.plugins import (
    BUILTIN_PLUGINS,
    KINDS,
    PluginManager,
    PluginWarning,
    Registration,
    Registry,
    Source,
    get_plugin_manager,
)

Visible = Callable[..., ContextManager[None]]

BUILTIN_COMPONENTS = {
    ("trainer", "default"),
    ("sampler", "local"),
    ("worker", "default"),
    ("worker", "vec"),
    ("worker", "fragment"),
    ("policy", "mlp"),
    ("algo", "ppo"),
    ("algo", "vpg"),
    ("env", "gym"),
    ("env", "cartpole"),
    ("env", "acrobot"),
    ("env", "pendulum"),
    ("env", "mountaincar_continuous"),
    ("env", "cpu_heavy"),
    ("logger", "console"),
    ("logger", "csv"),
    ("logger", "tensorboard"),
}


def load() -> tuple[PluginManager, list[str]]:
    """A freshly loaded plugin manager and the PluginWarning messages its loading emitted."""
    manager = PluginManager()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.load()
    return manager, [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]


TEST_DISTS = {"corral-testplugin", "corral-brokenimport", "corral-brokenregister"}


def third_party(manager: PluginManager) -> set[tuple[str, str]]:
    """(kind, name) of every component registered by the test distributions."""
    return {(r.kind, r.name) for r in manager.registry if r.source.distribution in TEST_DISTS}


def naming(messages: list[str], text: str) -> list[str]:
    """The messages that mention ``text``."""
    return [m for m in messages if text in m]


# ---------------------------------------------------------------------------------------------- builtins
def test_builtins_register_from_corral() -> None:
    manager, messages = load()
    assert messages == []
    assert manager.registry.failed == []
    keys = {(r.kind, r.name) for r in manager.registry}
    assert BUILTIN_COMPONENTS <= keys
    for module in BUILTIN_PLUGINS:
        assert module in manager.sources, f"built-in plugin {module} was not registered"
        source = manager.sources[module]
        assert (source.distribution, source.version) == ("corral", metadata.version("corral"))
    for kind, name in BUILTIN_COMPONENTS:
        reg = manager.registry.get(kind, name)
        assert reg.source.distribution == "corral"
        assert reg.help, f"{kind} {name} has no help text"
        assert reg.config is None or dataclasses.is_dataclass(reg.config)


def test_unknown_name_lists_the_available_ones() -> None:
    manager, _ = load()
    with pytest.raises(PluginError, match=r"no sampler named 'nope' is registered; available: .*local"):
        manager.registry.get("sampler", "nope")


# --------------------------------------------------------------------------------- third-party plugin
def test_installed_distribution_is_an_entry_point(plugins_visible: Visible) -> None:
    """The fixture is real: importlib.metadata sees the distribution exactly as after ``pip install``."""
    with plugins_visible("corral-testplugin"):
        dist = metadata.distribution("corral-testplugin")
        assert dist.version == "0.1.0"
        eps = [ep for ep in metadata.entry_points(group="corral") if ep.name == "testplugin"]
        assert len(eps) == 1
        assert eps[0].value == "corral_testplugin.plugin"
        assert eps[0].dist is not None and eps[0].dist.name == "corral-testplugin"
        assert "corral" in (dist.requires or [])
    assert not [ep for ep in metadata.entry_points(group="corral") if ep.name == "testplugin"]


def test_test_plugin_components_registered_with_their_distribution(plugins_visible: Visible) -> None:
    with plugins_visible("corral-testplugin"):
        manager, messages = load()
    assert messages == []
    assert {("sampler", "testlocal"), ("worker", "testworker")} <= third_party(manager)
    for kind, name in (("sampler", "testlocal"), ("worker", "testworker")):
        reg = manager.registry.get(kind, name)
        assert reg.source == Source("testplugin", "corral-testplugin", "0.1.0")
        assert reg.factory.__module__ == "corral_testplugin.plugin"
    sampler = manager.registry.get("sampler", "testlocal")
    assert [f["name"] for f in sampler.config_fields()] == ["n_workers", "calls_file"]
    assert sampler.help == "sampler=local that counts its calls"
    worker = manager.registry.get("worker", "testworker")
    assert worker.config_fields() == [
        {"name": "noise_std", "path": "worker.noise_std", "type": "float", "default": 0.0,
         "help": "std of Gaussian noise added to every observation", "accepts": ""}
    ]
    # its other hooks are live too
    assert manager.hook.corral_config_searchpath() == [["pkg://corral_testplugin.conf"]]
    # and the built-ins are all still there
    assert BUILTIN_COMPONENTS <= {(r.kind, r.name) for r in manager.registry}


def test_test_plugin_components_really_run(plugins_visible: Visible) -> None:
    """Compose and build a run with the plugin's sampler and worker; they sample, count and add noise."""
    import hydra

    from corral.framework.compose import build
    from corral.framework.entry import prepare

    def sample(noise_std: float) -> dict[str, Any]:
        with hydra.initialize_config_module(config_module="corral.conf", version_base="1.3"):
            cfg = hydra.compose(config_name="config", overrides=prepare([]) + [
                "sampler=testlocal", "worker=testworker", f"worker.noise_std={noise_std}", "logger=[]",
            ])
        run = build(cfg)
        try:
            worker = run.sampler._workers[0]  # type: ignore[attr-defined]
            batch = run.algo.sample(0, 64)
            exact = run.sampler.obtain_exact_episodes(2, run.policy.get_param_values())
            return {"sampler": run.sampler, "worker": worker, "n_noised": worker.envs[0].n_noised,
                    "batch": batch, "exact": exact}
        finally:
            run.close()

    with plugins_visible("corral-testplugin"):
        noisy = sample(0.5)
        clean = sample(0.0)
    assert type(noisy["sampler"]).__name__ == "CountingLocalSampler"
    assert noisy["sampler"].calls == {"obtain_samples": 1, "obtain_exact_episodes": 1}
    assert len(noisy["batch"]) >= 64 and noisy["exact"].n_episodes == 2
    assert type(noisy["worker"]).__name__ == "NoisyWorker" and noisy["worker"].noise_std == 0.5
    assert noisy["n_noised"] >= len(noisy["batch"]) + len(noisy["exact"])
    # same seed, so the same first reset: only the observation noise differs
    first_noisy, first_clean = noisy["batch"].observations[0], clean["batch"].observations[0]
    assert not np.allclose(first_noisy, first_clean)
    assert np.abs(first_noisy - first_clean).max() < 5.0


# ------------------------------------------------------------------------------------ broken plugins
def test_broken_import_warns_once_and_the_rest_loads(plugins_visible: Visible) -> None:
    with plugins_visible("corral-testplugin", "corral-brokenimport"):
        manager, messages = load()
    assert len(messages) == 1, messages
    (message,) = messages
    assert "corral-brokenimport 0.2.0" in message
    assert "ImportError: corral_brokenimport needs the package 'definitely_not_installed_xyz'" in message
    assert "CORRAL_DISABLE_PLUGINS=brokenimport" in message
    (failed,) = manager.registry.failed
    assert failed.source == Source("brokenimport", "corral-brokenimport", "0.2.0")
    assert failed.error.startswith("ImportError:")
    assert "definitely_not_installed_xyz" in failed.traceback
    assert third_party(manager) == {("sampler", "testlocal"), ("worker", "testworker")}
    assert "brokenimport" not in manager.sources


def test_broken_register_warns_once_and_its_partial_registrations_are_removed(plugins_visible: Visible) -> None:
    with plugins_visible("corral-testplugin", "corral-brokenregister"):
        manager, messages = load()
    assert len(messages) == 1, messages
    (message,) = messages
    assert "corral-brokenregister 0.2.0" in message
    assert "RuntimeError: corral_brokenregister exploded while registering" in message
    (failed,) = manager.registry.failed
    assert failed.source.distribution == "corral-brokenregister"
    # it registered sampler=brokenpartial before raising: that registration is gone ...
    assert "brokenpartial" not in manager.registry.names("sampler")
    # ... and so are its other hooks (its validation hook would reject every run)
    assert manager.pm.get_plugin("brokenregister") is None
    modules = {impl.plugin_name for impl in manager.hook.corral_validate_config.get_hookimpls()}
    assert "brokenregister" not in modules
    assert third_party(manager) == {("sampler", "testlocal"), ("worker", "testworker")}


def test_both_broken_plugins_warn_once_each(plugins_visible: Visible) -> None:
    with plugins_visible("corral-testplugin", "corral-brokenimport", "corral-brokenregister"):
        manager, messages = load()
    assert len(messages) == 2
    assert len(naming(messages, "corral-brokenimport")) == 1
    assert len(naming(messages, "corral-brokenregister")) == 1
    assert {f.source.distribution for f in manager.registry.failed} == {"corral-brokenimport", "corral-brokenregister"}
    assert third_party(manager) == {("sampler", "testlocal"), ("worker", "testworker")}


def test_process_wide_manager_warns_once(plugins_visible: Visible) -> None:
    with plugins_visible("corral-brokenimport"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = get_plugin_manager()
            assert get_plugin_manager() is first
            get_plugin_manager().registry.get("sampler", "local")
    assert len([w for w in caught if issubclass(w.category, PluginWarning)]) == 1


@pytest.mark.parametrize(
    ("dist", "error"),
    [
        ("corral-brokenimport", "ImportError: corral_brokenimport needs"),
        ("corral-brokenregister", "RuntimeError: corral_brokenregister exploded"),
    ],
)
def test_strict_mode_raises(plugins_visible: Visible, monkeypatch: pytest.MonkeyPatch, dist: str, error: str) -> None:
    monkeypatch.setenv("CORRAL_STRICT_PLUGINS", "1")
    with plugins_visible("corral-testplugin", dist):
        with pytest.raises(PluginError, match=f"{dist} 0.2.0") as info:
            load()
        assert error in str(info.value) and "\n" not in str(info.value)
        assert "CORRAL_STRICT_PLUGINS" in str(info.value)
        assert info.value.__cause__ is not None
        # the process-wide manager does not stay half-loaded after a strict failure
        with pytest.raises(PluginError):
            get_plugin_manager()
        monkeypatch.setenv("CORRAL_STRICT_PLUGINS", "0")
        with pytest.warns(PluginWarning, match=dist) as warned:
            assert get_plugin_manager().registry.get("sampler", "testlocal")
        assert all("\n" not in str(w.message) for w in warned), [str(w.message) for w in warned]


@pytest.mark.parametrize("value", ["brokenimport", "corral-brokenimport", "corral_brokenimport", "Corral-BrokenImport"])
def test_disable_by_entry_point_or_distribution_name(
    plugins_visible: Visible, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CORRAL_DISABLE_PLUGINS", value)
    with plugins_visible("corral-testplugin", "corral-brokenimport"):
        manager, messages = load()
    assert messages == []
    assert manager.registry.failed == []
    assert third_party(manager) == {("sampler", "testlocal"), ("worker", "testworker")}


def test_disable_the_test_plugin(plugins_visible: Visible, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_DISABLE_PLUGINS", "testplugin")
    with plugins_visible("corral-testplugin"):
        manager, messages = load()
    assert messages == [] and third_party(manager) == set()
    assert BUILTIN_COMPONENTS <= {(r.kind, r.name) for r in manager.registry}


@pytest.mark.parametrize("value", ["testplugin", "corral-testplugin"])
def test_only_these_plugins(plugins_visible: Visible, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CORRAL_PLUGINS", value)
    with plugins_visible("corral-testplugin", "corral-brokenimport", "corral-brokenregister"):
        manager, messages = load()
    assert messages == []
    assert third_party(manager) == {("sampler", "testlocal"), ("worker", "testworker")}
    assert BUILTIN_COMPONENTS <= {(r.kind, r.name) for r in manager.registry}  # built-ins always load


@pytest.mark.parametrize("var", ["CORRAL_PLUGINS", "CORRAL_DISABLE_PLUGINS"])
def test_a_name_no_installed_plugin_has_is_one_warning(plugins_visible: Visible, monkeypatch: pytest.MonkeyPatch,
                                                       var: str) -> None:
    """A typo in CORRAL_PLUGINS (the plugin meant is then not loaded) or CORRAL_DISABLE_PLUGINS (it is
    then loaded) is named, with what is installed; the names that match still apply."""
    monkeypatch.setenv(var, "corral-testplugin, corral-tesplugin, other")
    with plugins_visible("corral-testplugin"):
        manager, messages = load()
    expected = (f"{var} names corral-tesplugin, other, but no installed corral plugin has that name (an entry point's "
                "or its distribution's; installed: corral-testplugin); check the spelling")
    assert messages == [expected] and manager.unknown_names == [expected]
    loaded = third_party(manager) == {("sampler", "testlocal"), ("worker", "testworker")}
    assert loaded if var == "CORRAL_PLUGINS" else not loaded


def test_only_a_broken_plugin(plugins_visible: Visible, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_PLUGINS", "corral-brokenimport")
    with plugins_visible("corral-testplugin", "corral-brokenimport"):
        manager, messages = load()
    assert len(messages) == 1 and "corral-brokenimport" in messages[0]
    assert third_party(manager) == set()
    assert BUILTIN_COMPONENTS <= {(r.kind, r.name) for r in manager.registry}


# ------------------------------------------------------------------------------ registration errors
class Plugin:
    """An inline plugin registering whatever it is given (the argument tuples of ``register``)."""

    def __init__(self, *registrations: tuple[Any, ...], fail: BaseException | None = None) -> None:
        self.registrations = registrations
        self.fail = fail
        self.validated: list[Any] = []

    @hookimpl
    def corral_register(self, register: Callable[..., None]) -> None:
        for args in self.registrations:
            register(*args[:3], **(args[3] if len(args) > 3 else {}))
        if self.fail is not None:
            raise self.fail

    @hookimpl
    def corral_validate_config(self, cfg: Any) -> None:
        self.validated.append(cfg)


@dataclass
class InlineConfig:
    """A config dataclass."""

    size: int = 3


class InlineSampler:
    """An inline sampler (never run)."""


def register_inline(plugin: Any, source: Source | str | None = None) -> tuple[PluginManager, list[str]]:
    manager, _ = load()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.register_object(plugin, source)
    return manager, [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]


def test_register_object_registers_an_inline_plugin() -> None:
    plugin = Plugin(("sampler", "inline", InlineSampler, {"config": InlineConfig}))
    manager, messages = register_inline(plugin, Source("mine", "my-notebook", "1.0"))
    assert messages == []
    reg = manager.registry.get("sampler", "inline")
    assert reg.factory is InlineSampler and reg.config is InlineConfig
    assert reg.help == "An inline sampler (never run)."  # first docstring line when no help= is given
    assert reg.source == Source("mine", "my-notebook", "1.0")
    assert manager.pm.get_plugin("mine") is plugin
    impls = [i for i in manager.hook.corral_validate_config.get_hookimpls() if i.plugin is plugin]
    assert len(impls) == 1
    # unregistering removes the plugin and its components
    manager.unregister("mine")
    assert "inline" not in manager.registry.names("sampler")
    assert manager.pm.get_plugin("mine") is None


def test_register_object_default_source() -> None:
    manager, _ = register_inline(Plugin(("worker", "inline", InlineSampler)))
    reg = manager.registry.get("worker", "inline")
    assert reg.source == Source("Plugin", "inline", "-")
    assert reg.config is None
    manager, _ = register_inline(Plugin(("worker", "inline2", InlineSampler)), "named")
    assert manager.registry.get("worker", "inline2").source.plugin == "named"


def test_name_clash_drops_only_the_clashing_option(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = Plugin(("sampler", "mine", InlineSampler), ("sampler", "local", InlineSampler),
                    ("worker", "mine", InlineSampler))
    manager, messages = register_inline(plugin, Source("dup", "corral-dup", "9.9"))
    (message,) = messages
    assert message == (
        "corral-dup 9.9 (plugin 'dup') registers sampler 'local', which corral 0.1.0 (plugin "
        "'corral.plugins.samplers.local') already registers; sampler=local stays corral's and this plugin's other "
        "options still load. Plugin author: rename the option (e.g. register('sampler', 'dup_local', ...))"
    )
    assert message.count("rename") == 1 and "CORRAL_DISABLE_PLUGINS" not in message
    # the original stays, the plugin's other options are there, and the clash is recorded (not a failure)
    assert manager.registry.get("sampler", "local").source.distribution == "corral"
    assert manager.registry.get("sampler", "mine").source.distribution == "corral-dup"
    assert manager.registry.get("worker", "mine").source.distribution == "corral-dup"
    assert manager.pm.get_plugin("dup") is not None and not manager.registry.failed
    (clash,) = manager.registry.clashes
    assert (clash.kind, clash.name, clash.kept.plugin, clash.skipped.plugin) == (
        "sampler", "local", "corral.plugins.samplers.local", "dup")

    monkeypatch.setenv("CORRAL_STRICT_PLUGINS", "1")
    manager, _ = load()
    with pytest.raises(PluginError, match="duplicate registration of sampler 'local'") as info:
        manager.register_object(plugin, Source("dup", "corral-dup", "9.9"))
    assert "corral 0.1.0" in str(info.value) and "corral-dup 9.9" in str(info.value)
    assert isinstance(info.value.__cause__, PluginError)


def test_duplicate_between_two_third_party_distributions(plugins_visible: Visible, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_STRICT_PLUGINS", "1")
    with plugins_visible("corral-testplugin"):
        manager, _ = load()
    with pytest.raises(PluginError) as info:
        manager.register_object(Plugin(("worker", "testworker", InlineSampler)), Source("other", "corral-other", "2.0"))
    text = str(info.value)
    assert "duplicate registration of worker 'testworker'" in text
    assert "corral-testplugin 0.1.0 (plugin 'testplugin')" in text and "corral-other 2.0 (plugin 'other')" in text


def test_registry_add_duplicate_is_a_plugin_error() -> None:
    registry = Registry()
    registry.add(Registration("sampler", "x", InlineSampler, None, "", Source("a", "dist-a", "1")))
    with pytest.raises(PluginError, match=r"by dist-a 1 \(plugin 'a'\) and by dist-b 2 \(plugin 'b'\)$"):
        registry.add(Registration("sampler", "x", InlineSampler, None, "", Source("b", "dist-b", "2")))


class UndecoratedPlugin:
    """A plugin whose author forgot ``@hookimpl``."""

    def corral_register(self, register: Any) -> None:
        register("algo", "forgotten", InlineSampler)


class NoHooksPlugin:
    """A plugin object with no hook at all."""

    def register(self, register: Any) -> None:
        register("algo", "nohooks", InlineSampler)


def test_corral_register_without_hookimpl_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    manager, messages = register_inline(UndecoratedPlugin(), Source("undecorated", "corral-undecorated", "1.0"))
    (message,) = messages
    assert message.startswith("corral plugin from corral-undecorated 1.0 (plugin 'undecorated') failed to load")
    assert ("corral_register is not decorated with @corral.hookimpl, so corral never calls it and the plugin "
            "registers nothing; add `from corral import hookimpl` and put `@hookimpl` above each hook function") in message
    (failed,) = manager.registry.failed
    assert failed.source.plugin == "undecorated"
    assert "forgotten" not in manager.registry.names("algo")
    monkeypatch.setenv("CORRAL_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="not decorated with @corral.hookimpl"):
        load()[0].register_object(UndecoratedPlugin(), "undecorated")


def test_plugin_without_any_hook_is_named() -> None:
    manager, messages = register_inline(NoHooksPlugin(), "nohooks")
    (message,) = messages
    assert "implements no corral hook, so it registers nothing" in message
    assert manager.registry.failed[0].source.plugin == "nohooks"


def test_unknown_kind_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    manager, messages = register_inline(Plugin(("widget", "w", InlineSampler)), "widgets")
    (message,) = messages
    assert "registered 'w' under unknown kind 'widget'; kinds are " + ", ".join(KINDS) in message
    assert manager.pm.get_plugin("widgets") is None
    monkeypatch.setenv("CORRAL_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="unknown kind 'widget'"):
        load()[0].register_object(Plugin(("widget", "w", InlineSampler)), "widgets")


@dataclass
class ConfigWithName:
    """Uses the reserved field ``name``."""

    name: str = "x"


@dataclass
class UnsupportedConfig:
    """A field type OmegaConf cannot store."""

    fn: Callable[[int], int] = abs


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"size": 3}, "must be a dataclass class"),
        (InlineConfig(), "must be a dataclass class"),
        (InlineSampler, "must be a dataclass class"),
        (ConfigWithName, "has a field called 'name'"),
        (UnsupportedConfig, "UnsupportedConfig of sampler 'bad' is not a valid Hydra structured config"),
    ],
)
def test_invalid_config_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, config: Any, match: str) -> None:
    plugin = Plugin(("sampler", "good", InlineSampler, {"config": InlineConfig}), ("sampler", "bad", InlineSampler, {"config": config}))
    manager, messages = register_inline(plugin, Source("cfg", "corral-cfg", "1.0"))
    (message,) = messages
    assert match in message and "corral-cfg 1.0" in message
    # isolated: the plugin's earlier registration is dropped, everything else is intact
    assert "good" not in manager.registry.names("sampler")
    assert BUILTIN_COMPONENTS <= {(r.kind, r.name) for r in manager.registry}
    monkeypatch.setenv("CORRAL_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match=match):
        load()[0].register_object(plugin, Source("cfg", "corral-cfg", "1.0"))


def test_inline_plugin_failing_halfway_is_rolled_back() -> None:
    plugin = Plugin(("sampler", "half", InlineSampler), fail=ValueError("half-way"))
    manager, messages = register_inline(plugin, "half")
    (message,) = messages
    assert "ValueError: half-way" in message
    assert "half" not in manager.registry.names("sampler")
    assert manager.pm.get_plugin("half") is None


class TypoPlugin:
    """An inline plugin whose hook name has a typo."""

    @hookimpl
    def corral_regster(self, register: Any) -> None:
        register("sampler", "typo", InlineSampler)


def test_misspelt_hook_is_an_error_not_silence() -> None:
    manager, messages = register_inline(TypoPlugin(), "typo")
    (message,) = messages
    assert "unknown hook(s) corral_regster; corral's hooks are corral_config_searchpath, corral_epoch_end" in message
    assert manager.pm.get_plugin("typo") is None


@pytest.mark.parametrize("value", ["0", "false", "No", "off", ""])
def test_strict_mode_off_values(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CORRAL_STRICT_PLUGINS", value)
    _, messages = register_inline(Plugin(fail=ValueError("x")), "failing")
    assert len(messages) == 1


# ---------------------------------------------------------------- mistakes of installed plugins, end to end
def fake_distribution(site: Any, dist: str, entry_point: str, module: str, source: str) -> None:
    """An installed distribution as pip leaves it: the package plus ``*.dist-info`` with its entry point."""
    package = site / module
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[corral]\n{entry_point} = {module}\n")


NOHOOK = '''
def corral_register(register):  # the author forgot @hookimpl
    register("algo", "forgotten", object)
'''

CLASH = '''
from corral import hookimpl
from corral.plugins.algos.vpg import VPGConfig, build_vpg


@hookimpl
def corral_register(register):
    register("algo", "ppo", build_vpg, config=VPGConfig)       # clashes with corral's ppo
    register("algo", "clash_vpg", build_vpg, config=VPGConfig)  # fine
'''


BADDEFAULT = '''
from dataclasses import dataclass, field
from corral import check, hookimpl
from corral.plugins.algos.vpg import build_vpg


@dataclass
class Config:
    discount: float = field(default=1.5, metadata=check(ge=0, le=1, help="a default outside its own range"))


@hookimpl
def corral_register(register):
    register("algo", "baddefault", build_vpg, config=Config)
'''


def test_installed_plugin_mistakes_are_named_and_fail_check(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    site = tmp_path / "site"
    fake_distribution(site, "corral-nohook", "nohook", "corral_nohook", NOHOOK)
    fake_distribution(site, "corral-clash", "clash", "corral_clash", CLASH)
    fake_distribution(site, "corral-baddefault", "baddefault", "corral_baddefault", BADDEFAULT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    for var in ("CORRAL_PLUGINS", "CORRAL_DISABLE_PLUGINS", "CORRAL_STRICT_PLUGINS"):
        env.pop(var, None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)

    check = run("-m", "corral.framework.cli", "plugins", "--check")
    assert check.returncode == 1, check.stdout + check.stderr
    failed = check.stdout.split("FAILED PLUGINS", 1)[1]
    assert "nohook (corral-nohook 1.0): PluginError: corral_register is not decorated with @corral.hookimpl" in failed
    assert "NAME CLASHES" in check.stdout and "Plugin author: rename the option" in check.stdout
    assert "clash_vpg" in check.stdout.split("FAILED PLUGINS", 1)[0]  # the clash cost only the clashing option
    assert ("CONFIG DEFAULTS OUTSIDE THEIR DECLARED RANGES\n  algo=baddefault (corral-baddefault 1.0 (plugin "
            "'baddefault')): algo.discount must be >= 0 and <= 1, got 1.5") in check.stdout

    train = Path(__file__).resolve().parents[2] / "train.py"
    proc = run(str(train), "algo=clash_vpg", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    assert "name: clash_vpg" in proc.stdout
    warnings_ = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(warnings_) == 2 and all(line.startswith("corral: warning: ") for line in warnings_), proc.stderr
    assert any("corral-clash 1.0 (plugin 'clash') registers algo 'ppo'" in line for line in warnings_)
    assert any("corral-nohook 1.0 (plugin 'nohook') failed to load" in line for line in warnings_)
    assert "PluginWarning" not in proc.stderr and "Traceback" not in proc.stderr
