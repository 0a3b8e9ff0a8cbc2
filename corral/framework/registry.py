"""The registry of plugin components and the Hydra config node each registration becomes.

This module is the bottom of the plugin machinery: :mod:`corral.framework.plugins` (loading) and
:mod:`corral.framework.config` (the ConfigStore bridge) both import it, and it imports neither.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Iterator

from omegaconf import MISSING

from corral.framework.checks import describe_field
from corral.framework.errors import PluginError

#: The kinds of component a plugin may register (one Hydra config group each).
KINDS: tuple[str, ...] = ("trainer", "algo", "env", "policy", "sampler", "worker", "logger", "normalize")

#: What an option's name may be: what a user types after ``sampler=`` with no quoting, and a key of
#: the config (``logger.<name>.<field>``): a letter or ``_``, then letters, digits, ``_`` and ``-``.
OPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class Source:
    """Where a plugin came from."""

    plugin: str
    distribution: str
    version: str

    def __str__(self) -> str:
        return f"{self.distribution} {self.version} (plugin {self.plugin!r})"


@dataclass(frozen=True)
class Registration:
    """One registered component: kind + name -> factory and config dataclass."""

    kind: str
    name: str
    factory: Any
    config: type | None
    help: str
    source: Source

    @property
    def path(self) -> str:
        """Where this option's settings live on the command line: ``algo``, ``logger.csv``."""
        return f"logger.{self.name}" if self.kind == "logger" else self.kind

    def config_fields(self, registry: Any = None) -> list[dict[str, Any]]:
        """The config dataclass's fields: name, the full ``path`` a user types (``logger.csv.filename``),
        type, default, help and ``accepts`` (the declared range or choices, ``""`` when none; a
        condition on the options with a trait names those of ``registry``, the registry this option is in)."""
        if self.config is None:
            return []
        out = []
        for f in dataclasses.fields(self.config):
            if f.default is not dataclasses.MISSING:
                default: Any = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                default = f.default_factory()  # type: ignore[misc]
            else:
                default = "???"
            typ = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            out.append({"name": f.name, "path": f"{self.path}.{f.name}", "type": typ, "default": default,
                        "help": f.metadata.get("help", ""), "accepts": describe_field(f, registry)})
        return out


@dataclass(frozen=True)
class FailedPlugin:
    """A plugin that could not be loaded or registered, and the options (``(kind, name)``) it asked to
    register before it failed (none when its import failed): they are missing because of it."""

    source: Source
    error: str
    traceback: str
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Clash:
    """An option registered twice: the first registration was kept, the second skipped."""

    kind: str
    name: str
    kept: Source
    skipped: Source

    def message(self) -> str:
        """One line for the plugin's author: what clashed, what was kept, and to rename."""
        return (f"{self.skipped} registers {self.kind} {self.name!r}, which {self.kept} already registers; "
                f"{self.kind}={self.name} stays {self.kept.distribution}'s and this plugin's other options still load. "
                f"Plugin author: rename the option (e.g. register({self.kind!r}, "
                f"{_suggested_name(self.skipped, self.name)!r}, ...))")


class DuplicateRegistration(PluginError):
    """A (kind, name) that is already registered; names both plugins."""

    def __init__(self, kind: str, name: str, kept: Source, skipped: Source) -> None:
        super().__init__(f"duplicate registration of {kind} {name!r}: by {kept} and by {skipped}")
        self.clash = Clash(kind, name, kept, skipped)


@dataclass
class Registry:
    """All registered components, by (kind, name), with the plugins that failed and the clashes."""

    entries: dict[tuple[str, str], Registration] = field(default_factory=dict)
    failed: list[FailedPlugin] = field(default_factory=list)
    clashes: list[Clash] = field(default_factory=list)

    def add(self, reg: Registration) -> None:
        """Add a registration; a duplicate (kind, name) is an error naming both plugins."""
        if reg.kind not in KINDS:
            raise PluginError(
                f"{reg.source} registered {reg.name!r} under unknown kind {reg.kind!r}; kinds are {', '.join(KINDS)}"
            )
        if not isinstance(reg.name, str) or not OPTION_NAME.fullmatch(reg.name):
            raise PluginError(
                f"{reg.source}: the {reg.kind} name {reg.name!r} cannot be typed as {reg.kind}=<name>; "
                f"rename the option: a name is a letter or _, then letters, digits, _ and - (e.g. 'my_{reg.kind}')"
            )
        if not callable(reg.factory):
            raise PluginError(
                f"{reg.source}: the factory of {reg.kind} {reg.name!r} is {reg.factory!r} (type "
                f"{type(reg.factory).__name__}), which cannot be called; register the class or function itself "
                "(register(kind, name, MyClass, ...), not a string or an instance)"
            )
        key = (reg.kind, reg.name)
        if key in self.entries:
            raise DuplicateRegistration(reg.kind, reg.name, self.entries[key].source, reg.source)
        if reg.config is not None:
            if not (isinstance(reg.config, type) and dataclasses.is_dataclass(reg.config)):
                raise PluginError(
                    f"{reg.source}: config for {reg.kind} {reg.name!r} must be a dataclass class "
                    f"(config=MyConfig, not an instance or a dict); got {reg.config!r}"
                )
            if "name" in {f.name for f in dataclasses.fields(reg.config)}:
                raise PluginError(
                    f"{reg.source}: config dataclass of {reg.kind} {reg.name!r} has a field called 'name', "
                    "which corral reserves for the registered option name"
                )
        check_structured(reg)
        self.entries[key] = reg

    def get(self, kind: str, name: str) -> Registration:
        """Look a component up; an unknown name is an error listing the known ones."""
        try:
            return self.entries[(kind, name)]
        except KeyError:
            known = ", ".join(sorted(self.names(kind))) or "none"
            raise PluginError(f"no {kind} named {name!r} is registered; available: {known}") from None

    def names(self, kind: str) -> list[str]:
        """Registered names of one kind."""
        return sorted(n for k, n in self.entries if k == kind)

    def option_sources(self, cfg: Any) -> dict[str, dict[str, str]]:
        """Where each option a run config ``cfg`` chose came from, by its place in the config (``env``,
        ``logger.csv``): ``{"kind", "option", "plugin", "distribution", "version"}``, all strings. A
        snapshot keeps it, so that a run whose plugin is missing later can name the package to install.
        An option not registered here is left out."""
        out = {}
        for path, kind, name in chosen_options(cfg):
            reg = self.entries.get((kind, name))
            if reg is not None:
                out[path] = {"kind": kind, "option": name, "plugin": reg.source.plugin,
                             "distribution": reg.source.distribution, "version": reg.source.version}
        return out

    def __iter__(self) -> Iterator[Registration]:
        return iter(sorted(self.entries.values(), key=lambda r: (r.kind, r.name)))


def chosen_options(cfg: Any) -> list[tuple[str, str, str]]:
    """The options a run config ``cfg`` (a mapping: a DictConfig, or the YAML of one loaded as a dict)
    chose, as ``(place in the config, kind, name)``: ``("env", "env", "cartpole")``,
    ``("logger.csv", "logger", "csv")``; a group without a ``name`` is left out."""
    out = []
    for kind in KINDS:
        node: Any = cfg.get(kind) if hasattr(cfg, "get") else None
        if kind == "logger" and hasattr(node, "keys"):
            out += [(f"logger.{name}", kind, str(name)) for name in node.keys()]
        elif kind != "logger" and hasattr(node, "get") and node.get("name") is not None:
            out.append((kind, kind, str(node.get("name"))))
    return out


def _suggested_name(source: Source, name: str) -> str:
    prefix = source.distribution.lower().removeprefix("corral-").removeprefix("corral_")
    prefix = "".join(c if c.isalnum() else "_" for c in prefix) or "my"
    return f"{prefix}_{name}"


@dataclass
class _EmptyConfig:
    """Config of a component that has no settings."""


def node_class(reg: Registration) -> type:
    """The dataclass stored for ``reg``: its config's fields plus ``name: str = <registered name>``.

    The fields are copied (types resolved in the config's own module, so ``from __future__ import
    annotations`` works) rather than inherited, so a frozen config dataclass still accepts
    command-line overrides; ``config_of`` builds the plugin's own class from the composed node.
    """
    base = reg.config or _EmptyConfig
    hints = typing.get_type_hints(base)
    fields: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(base):
        if f.default is not dataclasses.MISSING:
            spec = field(default=f.default, metadata=f.metadata)
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            spec = field(default_factory=f.default_factory, metadata=f.metadata)  # type: ignore[misc]
        else:
            spec = field(default=MISSING, metadata=f.metadata)
        fields.append((f.name, hints.get(f.name, Any), spec))
    fields.append(("name", str, field(default=reg.name, metadata={"help": f"registered {reg.kind} name"})))
    return dataclasses.make_dataclass(
        f"{base.__name__}__{reg.kind}_{reg.name}".replace("-", "_"),
        fields,
        namespace={"__doc__": base.__doc__},
    )


def check_structured(reg: Registration) -> None:
    """Fail at registration (inside the plugin's isolation) if Hydra could not store the config."""
    from omegaconf import OmegaConf

    try:
        OmegaConf.structured(node_class(reg))
    except Exception as exc:  # noqa: BLE001 - any failure here is the plugin's config's fault
        name = getattr(reg.config, "__qualname__", repr(reg.config))
        raise PluginError(
            f"{reg.source}: config dataclass {name} of {reg.kind} {reg.name!r} is not a valid Hydra "
            f"structured config: {type(exc).__name__}: {exc}"
        ) from exc


__all__ = ["KINDS", "OPTION_NAME", "Clash", "chosen_options", "DuplicateRegistration", "FailedPlugin", "Registration", "Registry", "Source", "check_structured", "node_class"]
