"""corral's pytest plugin: fixtures for testing corral plugins and configurations.

It is registered through the ``pytest11`` entry point, so installing corral makes these fixtures
available in every test suite, with no ``conftest.py`` and no import:

``corral_compose``
    ``corral_compose("algo=vpg", "worker=vec")`` -> the composed :class:`~omegaconf.DictConfig`,
    exactly what ``python train.py algo=vpg worker=vec`` would run (plugin options and presets
    included).
``corral_build``
    ``corral_build("trainer.n_epochs=1", ...)`` -> a built :class:`~corral.framework.compose.Run`
    whose run directory is under ``tmp_path``; every run built is closed (workers stopped, loggers
    closed) after the test.
``corral_inline_plugin``
    ``corral_inline_plugin(obj)`` registers a plugin object (a module, a class or an instance with
    ``@corral.hookimpl`` functions) for the duration of the test, so its components can be
    composed and built; they are unregistered, and their Hydra config nodes removed, afterwards.

The same operations are plain functions and context managers (:func:`compose_config`,
:func:`build_run`, :func:`inline_plugin`) for use outside pytest. Nothing heavy is imported when
pytest loads this module; corral, Hydra and torch are imported on first use.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from omegaconf import DictConfig

    from corral.framework.compose import Run
    from corral.framework.plugins import PluginManager


def _flatten(overrides: Iterable[str | Sequence[str]]) -> list[str]:
    """``("a=1", ["b=2", "c=3"])`` -> ``["a=1", "b=2", "c=3"]``."""
    out: list[str] = []
    for item in overrides:
        if isinstance(item, str):
            out.append(item)
        else:
            out.extend(str(x) for x in item)
    return out


def compose_config(overrides: Sequence[str] = (), config_name: str | None = None) -> "DictConfig":
    """The config ``python train.py <overrides>`` would run, composed in this process.

    Loads the plugins and stores their configs (``corral.framework.entry.prepare``), then composes
    with Hydra's compose API from corral's config module. Hydra's global state is cleared
    afterwards, so calls do not leak into each other (or into a later ``@hydra.main``).
    """
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from corral.framework.config import CONFIG_MODULE, CONFIG_NAME
    from corral.framework.entry import prepare

    prepare([])
    # A leftover initialisation (a test that failed half-way) would make initialize_config_module raise.
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            return compose(config_name=config_name or CONFIG_NAME, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def build_run(cfg: "DictConfig | Sequence[str]", log_dir: str | Path | None = None) -> "Run":
    """Build every part of a run (nothing samples yet) from a config or from overrides.

    The caller closes it: ``run.close()`` stops the sampler's workers and closes the loggers.
    """
    from omegaconf import DictConfig

    from corral.framework.compose import build

    if not isinstance(cfg, DictConfig):
        cfg = compose_config(list(cfg))
    return build(cfg, log_dir=log_dir)


@contextlib.contextmanager
def inline_plugin(plugin: Any, name: str | None = None, *, strict: bool = True) -> Iterator["PluginManager"]:
    """Register ``plugin`` with the process-wide plugin manager while the block runs.

    ``name`` identifies it (default: its ``__name__`` or class name); its components report
    distribution ``inline``. With ``strict`` (the default) a plugin that fails to register raises
    :class:`~corral.framework.errors.PluginError` with the plugin's own error and traceback,
    instead of corral's usual warning-and-skip. On exit the plugin and everything it registered
    are removed, and the Hydra config nodes follow (``register_configs``).
    """
    from corral.framework.config import register_configs
    from corral.framework.errors import PluginError
    from corral.framework.plugins import PluginWarning, get_plugin_manager

    manager = get_plugin_manager()
    name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    n_failed = len(manager.registry.failed)
    with warnings.catch_warnings():
        if strict:
            warnings.simplefilter("ignore", PluginWarning)
        manager.register_object(plugin, name)
    failures = manager.registry.failed[n_failed:]
    try:
        if strict and failures:
            failure = failures[0]
            raise PluginError(f"inline plugin {name!r} failed to register: {failure.error}\n\n{failure.traceback}")
        register_configs(manager)
        yield manager
    finally:
        del manager.registry.failed[n_failed:]
        manager.unregister(name)
        # The process-wide manager may have been replaced during the block; clean up the current one.
        current = get_plugin_manager()
        if current is not manager:
            current.unregister(name)
        register_configs(current)


# -------------------------------------------------------------------------------------------- fixtures
@pytest.fixture
def corral_compose() -> Iterator[Callable[..., "DictConfig"]]:
    """Compose a corral config from Hydra overrides: ``corral_compose("algo=vpg", "seed=3")``.

    Overrides may also be given as one list. Plugin options, presets (``experiment=...``) and
    inline plugins registered with ``corral_inline_plugin`` are all visible.
    """

    def compose(*overrides: str | Sequence[str], config_name: str | None = None) -> "DictConfig":
        return compose_config(_flatten(overrides), config_name=config_name)

    yield compose
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()


@pytest.fixture
def corral_build(tmp_path: Path, corral_compose: Callable[..., "DictConfig"]) -> Iterator[Callable[..., "Run"]]:
    """Build a :class:`~corral.framework.compose.Run` from overrides, in a temporary run directory.

    ``run = corral_build("trainer.n_epochs=1", "trainer.batch_size=200")`` composes and builds;
    ``run.train()`` trains; ``run.trainer.log_dir`` is under ``tmp_path``. Pass ``log_dir=`` to
    choose the directory. Every run is closed after the test, even when it failed.
    """
    runs: list[Run] = []

    def build(*overrides: str | Sequence[str], log_dir: str | Path | None = None) -> "Run":
        cfg = corral_compose(*overrides)
        directory = Path(log_dir) if log_dir is not None else tmp_path / f"run{len(runs)}"
        run = build_run(cfg, log_dir=directory)
        runs.append(run)
        return run

    try:
        yield build
    finally:
        errors = []
        for run in reversed(runs):
            try:
                run.close()
            except Exception as exc:  # noqa: BLE001 - close every run, then report
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture
def corral_inline_plugin() -> Iterator[Callable[..., "PluginManager"]]:
    """Register plugin objects for one test: ``corral_inline_plugin(MyPlugin(), name="mine")``.

    Returns the plugin manager. A plugin that fails to register raises ``PluginError`` (pass
    ``strict=False`` to get corral's normal warning-and-skip). After the test the plugins are
    unregistered and their config nodes removed from Hydra's ConfigStore.
    """
    stack = contextlib.ExitStack()

    def register(plugin: Any, name: str | None = None, *, strict: bool = True) -> "PluginManager":
        return stack.enter_context(inline_plugin(plugin, name, strict=strict))

    with stack:
        yield register


__all__ = [
    "build_run",
    "compose_config",
    "corral_build",
    "corral_compose",
    "corral_inline_plugin",
    "inline_plugin",
]
