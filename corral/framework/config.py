"""The registry -> Hydra ConfigStore bridge and the primary config schema.

Each registration becomes one ConfigStore node: group = kind, option = name. The node is the
plugin's config dataclass plus a ``name`` field holding the registered name, which is how
``compose.build`` finds the component again (no dotted import paths in configs). Loggers are
multi-select (``logger=[console,csv]``); each sits under ``logger.<name>``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import MISSING, DictConfig, OmegaConf

from corral.framework.checks import check
from corral.framework.errors import PluginError
from corral.framework.plugins import (
    PluginManager,
    PluginWarning,
    call_hook,
    call_hook_each,
    get_plugin_manager,
    strict_plugins,
)
from corral.framework.registry import Registration, node_class

#: Hydra's config module holding config.yaml, experiment/ presets and hydra/ presets.
CONFIG_MODULE = "corral.conf"
CONFIG_NAME = "config"


@dataclass
class CorralConfig:
    """Schema of the primary config (the groups are filled by their selected options)."""

    trainer: Any = MISSING
    env: Any = MISSING
    algo: Any = MISSING
    policy: Any = MISSING
    sampler: Any = MISSING
    worker: Any = MISSING
    logger: Any = field(default_factory=dict)
    normalize: Any = None  # running normalisation (normalize.obs=true ...); off by default
    experiment: Any = None
    seed: int = field(default=1, metadata=check(ge=0, le=2**63 - 1, help="root of every random stream of the run"))


#: (kind, name) -> the config class stored for it, to skip unchanged nodes and drop stale ones.
_STORED: dict[tuple[str, str], type | None] = {}


def register_configs(manager: PluginManager | None = None) -> None:
    """Store every registration (and the primary schema) in Hydra's ConfigStore. Idempotent.

    Also registers :class:`CorralSearchPathPlugin` (the plugins' YAML presets), and says which of
    their search-path entries name nothing (:func:`report_searchpath_problems`). Nodes this
    function stored earlier for components that are no longer registered (a plugin
    was unregistered or the plugin manager was reset without it) are removed again.
    """
    manager = manager or get_plugin_manager()
    register_searchpath_plugin()
    report_searchpath_problems(manager)
    cs = ConfigStore.instance()
    cs.store(name="corral_schema", node=CorralConfig)
    current = set()
    for reg in manager.registry:
        key = (reg.kind, reg.name)
        current.add(key)
        if key in _STORED and _STORED[key] is reg.config and _group_has(cs, reg.kind, reg.name):
            continue
        package = f"logger.{reg.name}" if reg.kind == "logger" else None
        cs.store(group=reg.kind, name=reg.name, node=open_node(reg), package=package)
        _STORED[key] = reg.config
    for kind, name in [k for k in _STORED if k not in current]:
        del _STORED[(kind, name)]
        group = cs.repo.get(kind)
        if isinstance(group, dict):
            group.pop(f"{name}.yaml", None)


def open_node(reg: Registration) -> DictConfig:
    """The config node stored for ``reg``: typed like its dataclass, but open to unknown keys.

    Hydra would reject ``algo.vf_iter=5`` with advice (``use +algo.vf_iter=5``) that leads to a run
    which records the key and trains without it. The node is open instead, so both forms compose
    and :func:`corral.framework.compose.validate` rejects the key with a message naming the option's
    fields (and the options that do have it). Values of known fields are still type-checked by Hydra.
    """
    node = OmegaConf.structured(node_class(reg))
    OmegaConf.set_struct(node, False)
    return node


def _group_has(cs: ConfigStore, group: str, name: str) -> bool:
    try:
        return f"{name}.yaml" in cs.repo[group]
    except KeyError:
        return False


def searchpath(manager: PluginManager | None = None) -> list[str]:
    """Config search-path entries contributed by plugins (``corral_config_searchpath``)."""
    manager = manager or get_plugin_manager()
    paths: list[str] = []
    for result in call_hook(manager.hook.corral_config_searchpath):
        for p in [result] if isinstance(result, str) else result or []:
            if p not in paths:
                paths.append(p)
    return paths


def searchpath_entry_problem(entry: str) -> str | None:
    """``"<entry> <what is wrong>"`` for a config search-path entry that names nothing: a ``pkg://``
    package that cannot be found, a ``file://`` (or plain) directory that does not exist; None for
    one that names something (or of another scheme). The check of the user's ``hydra.searchpath``
    (:func:`corral.framework.precheck.check_searchpath`) and of the plugins' entries
    (:func:`searchpath_problems`): Hydra only warns about such an entry, or says nothing."""
    if entry.startswith("pkg://"):
        package = entry[len("pkg://"):].strip("/").replace("/", ".")
        try:
            found = bool(package) and importlib.util.find_spec(package) is not None
        except (ImportError, ValueError):
            found = False
        return None if found else f"{entry} names no importable package ({package!r})"
    if entry.startswith("file://") or "://" not in entry:
        where = Path(entry[len("file://"):] if entry.startswith("file://") else entry)
        if not where.is_dir():
            return f"{entry}: {where.absolute()} {'is not a directory' if where.exists() else 'does not exist'}"
    return None


def searchpath_problems(manager: PluginManager | None = None) -> list[str]:
    """One line for each entry of a plugin's ``corral_config_searchpath`` that names nothing
    (:func:`searchpath_entry_problem`), naming the plugin, its distribution and version: the presets
    meant to come from there would otherwise be "not found" with no word of the path."""
    manager = manager or get_plugin_manager()
    problems = []
    for name, result in call_hook_each(manager.hook.corral_config_searchpath):
        for entry in [result] if isinstance(result, str) else result:
            if (problem := searchpath_entry_problem(str(entry))) is None:
                continue
            source = manager.sources.get(name)
            if source is not None and source.distribution == "corral":
                problems.append(f"corral's own plugin {name}: its config search path {problem}: a bug in corral; "
                                "please report it")
                continue
            who = f"{name} ({source.distribution} {source.version})" if source is not None else name
            problems.append(f"plugin {who}: its config search path {problem}, so the presets meant to come from "
                            f"there are not available; fix the plugin, or run without it: CORRAL_DISABLE_PLUGINS={name}")
    return problems


def report_searchpath_problems(manager: PluginManager | None = None) -> list[str]:
    """:func:`searchpath_problems`, each said once per process as a :class:`PluginWarning` (a
    ``corral: warning:`` line from ``train.py``), not at each of Hydra's search-path builds; with
    ``CORRAL_STRICT_PLUGINS`` set, the first raises :class:`PluginError` instead. Returns them all."""
    manager = manager or get_plugin_manager()
    problems = searchpath_problems(manager)
    for problem in problems:
        if problem in manager.searchpath_reported:
            continue
        if strict_plugins():
            raise PluginError(f"{problem} (CORRAL_STRICT_PLUGINS is set, so the run stops)")
        manager.searchpath_reported.add(problem)
        warnings.warn(problem, PluginWarning, stacklevel=2)
    return problems


class CorralSearchPathPlugin(SearchPathPlugin):
    """Adds the config directories that plugins return from ``corral_config_searchpath`` to Hydra's
    search path, so their presets appear in ``--help``, in "available options" errors and in runs.

    (A ``hydra.searchpath=[...]`` override appended to the command line would clash with the
    user's own ``hydra.searchpath`` and with ``--cfg``/``--info`` flags, and ``--help`` ignores it.)
    """

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        """Append every plugin path to ``search_path``."""
        for path in searchpath():
            search_path.append(provider="corral-plugin", path=path)


def register_searchpath_plugin() -> None:
    """Make Hydra call :class:`CorralSearchPathPlugin` whenever it builds a search path. Idempotent."""
    Plugins.instance().register(CorralSearchPathPlugin)


def _instantiate_config(reg: Registration, node: DictConfig) -> Any:
    data = OmegaConf.to_container(node, resolve=True)
    assert isinstance(data, dict)
    data.pop("name", None)
    if reg.config is None:
        return None
    names = {f.name for f in dataclasses.fields(reg.config)}
    return reg.config(**{k: v for k, v in data.items() if k in names})


def config_of(reg: Registration, node: DictConfig | dict | None) -> Any:
    """Instance of ``reg``'s config dataclass from a composed node (or a plain dict)."""
    if node is None:
        return reg.config() if reg.config is not None else None
    if isinstance(node, dict):
        node = OmegaConf.create(node)
    return _instantiate_config(reg, node)


__all__ = [
    "CONFIG_MODULE",
    "CONFIG_NAME",
    "CorralConfig",
    "config_of",
    "node_class",
    "open_node",
    "register_configs",
    "searchpath",
    "searchpath_entry_problem",
    "searchpath_problems",
    "report_searchpath_problems",
    "CorralSearchPathPlugin",
    "register_searchpath_plugin",
]
