"""The settings schema of a Hydra launcher preset that corral extends with settings of its own.

Hydra merges a launcher preset (``corral/conf/hydra/launcher/joblib.yaml``) with the structured config of the
same name in its ConfigStore, which the launcher's own package (hydra-joblib-launcher,
hydra-submitit-launcher) stores each time Hydra's plugin scan executes its module; a key that package's
dataclass lacks, such as corral's ``cancel_grace_s``, is refused ("Key 'cancel_grace_s' not in
'JobLibLauncherConf'"). :func:`extended` makes that dataclass with corral's fields, and
:func:`storing_plugin` a ``SearchPathPlugin`` that stores it over the package's: Hydra calls every
``SearchPathPlugin`` once the scan is over and before it composes a config, which is the moment to do it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from hydra.plugins.search_path_plugin import SearchPathPlugin


def extended(base: type, name: str, module: str, fields: Sequence[tuple[str, type, Any]]) -> type:
    """The dataclass ``name`` of module ``module``: ``base`` with ``fields`` (name, type, default) added or
    given new defaults. Made with ``make_dataclass``, which reads no annotation from ``module``: Hydra's plugin
    scan executes a plugin's module before it is in ``sys.modules``, where ``@dataclass`` could not."""
    return dataclasses.make_dataclass(name, [(key, kind, dataclasses.field(default=default))
                                             for key, kind, default in fields],
                                      bases=(base,), namespace={"__module__": module})


def storing_plugin(name: str, module: str, option: str, node: type | None) -> type[SearchPathPlugin]:
    """A ``SearchPathPlugin`` class ``module.name`` (assign it to ``name`` in ``module``, a module under
    ``hydra_plugins``, for Hydra's scan to find it) that stores ``node`` as ``hydra/launcher/<option>``'s
    schema (nothing when ``node`` is None: the launcher's package is not installed). It leaves the search
    path as it is."""

    def manipulate_search_path(self: SearchPathPlugin, search_path: Any) -> None:
        if node is not None:
            from hydra.core.config_store import ConfigStore

            ConfigStore.instance().store(group="hydra/launcher", name=option, node=node, provider="corral")

    manipulate_search_path.__doc__ = f"Store hydra/launcher/{option}'s schema; the search path is left as it is."
    return type(name, (SearchPathPlugin,), {
        "__module__": module, "__qualname__": name, "manipulate_search_path": manipulate_search_path,
        "__doc__": f"Stores corral's schema of hydra/launcher={option} once Hydra has scanned its plugins "
                   "(corral.launchers.settings_schema)."})


__all__ = ["extended", "storing_plugin"]
