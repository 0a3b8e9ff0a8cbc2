"""The config contract: a plugin's config dataclass declares what its fields accept, and its own
defaults satisfy those declarations.

:class:`ConfigContract` checks one config dataclass (``config_class``) or a registered option
(``kind`` and ``name``). :class:`~corral.testing.contracts.algorithm.AlgorithmContract`,
:class:`~corral.testing.contracts.env.EnvContract` and
:class:`~corral.testing.contracts.logger.LoggerContract` run the same checks on the option they test.
"""

from __future__ import annotations

from typing import Any, ClassVar

from corral.framework.checks import check_defaults, unchecked_fields


def registered_config(kind: str, name: str) -> type | None:
    """The config dataclass of a registered option (None when it has none)."""
    from corral.framework.plugins import get_registry

    return get_registry().get(kind, name).config


def factory_config_problems(kind: str, factory: Any) -> list[str]:
    """:func:`config_problems` of every registered ``kind`` option built by ``factory`` (a worker or
    sampler class): what a Worker/Sampler contract suite checks for the class under test. An
    unregistered class has nothing to check."""
    from corral.framework.plugins import get_registry

    problems: list[str] = []
    for reg in get_registry():
        if reg.kind == kind and reg.factory is factory:
            problems += [f"{reg.kind}={reg.name}: {p}" for p in config_problems(reg.config, reg.path)]
    return problems


def config_problems(config: type | None, prefix: str = "config", *, require_ranges: bool = True) -> list[str]:
    """What is wrong with a config dataclass: defaults outside their own declared ranges and, with
    ``require_ranges``, numeric fields that declare no range (``metadata=corral.check(...)``)."""
    if config is None:
        return []
    problems = check_defaults(config, prefix)
    if require_ranges:
        problems += [f"{prefix}.{name} is numeric but declares no range: use "
                     f"field(default=..., metadata=corral.check(ge=..., help=...))" for name in unchecked_fields(config)]
    return problems


class ConfigContract:
    """The config contract. Subclass it as ``Test...`` and set ``config_class`` or ``kind`` and ``name``.

    Checks that the defaults satisfy the ranges and choices declared with :func:`corral.check`, and
    (unless ``require_ranges = False``) that every numeric field declares one.
    """

    config_class: ClassVar[type | None] = None
    kind: ClassVar[str | None] = None
    name: ClassVar[str | None] = None
    require_ranges: ClassVar[bool] = True

    def config_under_test(self) -> tuple[type | None, str]:
        """The config dataclass and the prefix its fields are named with (``algo``, ``logger.csv``)."""
        if self.config_class is not None:
            return self.config_class, self.config_class.__name__
        if self.kind is None or self.name is None:
            raise TypeError(f"{type(self).__name__} must set config_class, or kind and name")
        prefix = f"logger.{self.name}" if self.kind == "logger" else self.kind
        return registered_config(self.kind, self.name), prefix

    def test_config_defaults_satisfy_their_ranges(self) -> None:
        """Every default is inside its field's declared range; numeric fields declare one."""
        config, prefix = self.config_under_test()
        problems = config_problems(config, prefix, require_ranges=self.require_ranges)
        assert not problems, "; ".join(problems)


__all__ = ["ConfigContract", "config_problems", "factory_config_problems", "registered_config"]
