"""The ``corral`` console script: ``corral train ...`` and ``corral plugins``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

USAGE = """usage: corral <command> [args]

commands:
  train [overrides...]      train; the same as `python train.py [overrides...]`
  plugins [--json] [--check]
                            list every registered component and any plugin that failed to load
"""


def main(argv: Sequence[str] | None = None) -> Any:
    """Dispatch a ``corral`` subcommand."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "train":
        from corral.framework.entry import main as train_main

        sys.argv = [f"{sys.argv[0]} train"] + rest
        return train_main(rest)
    if command == "plugins":
        from corral.framework.errors import CorralError

        try:
            return plugins_command(rest)
        except CorralError as exc:  # e.g. a plugin failed with CORRAL_STRICT_PLUGINS=1
            print(f"corral: error: {exc}", file=sys.stderr)
            return 2
    print(f"corral: unknown command {command!r}\n\n{USAGE}", end="", file=sys.stderr)
    return 2


def plugins_command(argv: Sequence[str]) -> int:
    """``corral plugins``: a table (or ``--json``) of components and failed plugins."""
    parser = argparse.ArgumentParser(prog="corral plugins", description="List corral's registered components.")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--check", action="store_true", help="exit 1 when any plugin failed to load")
    opts = parser.parse_args(list(argv))

    import warnings

    from corral.framework.plugins import PluginWarning, get_plugin_manager

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)
        manager = get_plugin_manager()
    registry = manager.registry
    components = [
        {
            "kind": r.kind,
            "name": r.name,
            "distribution": r.source.distribution,
            "version": r.source.version,
            "plugin": r.source.plugin,
            "help": r.help,
            "config": [{**f, "default": _jsonable(f["default"])} for f in r.config_fields()],
        }
        for r in registry
    ]
    failed = [
        {"plugin": f.source.plugin, "distribution": f.source.distribution, "version": f.source.version, "error": f.error}
        for f in registry.failed
    ]
    if opts.json:
        print(json.dumps({"components": components, "failed": failed}, indent=2))
    else:
        _print_table(components, failed)
    return 1 if (opts.check and failed) else 0


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def _print_table(components: list[dict[str, Any]], failed: list[dict[str, Any]]) -> None:
    kind_w = max((len(c["kind"]) for c in components), default=4)
    name_w = max((len(c["name"]) for c in components), default=4)
    src_w = max((len(f"{c['distribution']} {c['version']}") for c in components), default=4)
    print(f"{'KIND':<{kind_w}}  {'NAME':<{name_w}}  {'FROM':<{src_w}}  HELP")
    for c in components:
        src = f"{c['distribution']} {c['version']}"
        print(f"{c['kind']:<{kind_w}}  {c['name']:<{name_w}}  {src:<{src_w}}  {c['help']}")
        for f in c["config"]:
            line = f"{'':<{kind_w}}  {'':<{name_w}}    {c['kind']}.{f['name']}: {f['type']} = {f['default']!r}"
            if f["help"]:
                line += f"  # {f['help']}"
            print(line)
    if failed:
        print("\nFAILED PLUGINS")
        for f in failed:
            print(f"  {f['plugin']} ({f['distribution']} {f['version']}): {f['error']}")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
