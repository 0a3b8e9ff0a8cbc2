"""The ``corral`` console script: ``corral train``, ``corral plugins``, ``corral results``, ``corral plot``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from corral.framework.arguments import CommandParser

USAGE = """usage: corral <command> [args]

commands:
  train [overrides...]      train; the same as `python train.py [overrides...]`
  plugins [--json] [--check]
                            list every registered component and any plugin that failed to load
  results <dir> [<dir> ...] [--json] [--ignore [KEY ...]] [--only KEY=VAL ...]
                            a table of run or sweep directories: one row per group of the swept
                            keys, mean ± std across seeds
  plot <dir> [<dir> ...] [-o OUT.png] [--metric COLUMN] [--ignore [KEY ...]] [--only KEY=VAL ...]
       [--legend N]         learning curves (mean and spread across seeds, one line per group)
  eval <run dir | snapshot> [overrides...] [--episodes N] [--stochastic] [--seed S] [--video DIR]
       [--env-id ID] [--sampler NAME] [--n-workers N] [--trust]
                            evaluate a trained run: mean ± std of return and length, eval.json
"""


def main(argv: Sequence[str] | None = None) -> Any:
    """Dispatch a ``corral`` subcommand."""
    try:
        return _dispatch(argv)
    except BrokenPipeError:  # the reader left (`corral results --json | head`): stop quietly, like Unix tools
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141  # 128 + SIGPIPE, what a shell reports for a tool stopped by a closed pipe
    except KeyboardInterrupt:  # Ctrl-C in `corral results`, `plot` or `plugins`: nothing half-written to report
        print("\ncorral: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:
        from corral.framework.errors import no_room_error

        if (problem := no_room_error(exc)) is None:
            raise
        # a full disk (or quota, or ulimit -f) under `corral eval -o`, `corral plot -o`: what could not be written
        args = list(sys.argv[1:] if argv is None else argv)
        command = f"corral {args[0]}" if args and args[0] in COMMANDS else "corral"
        what = problem.filename or "its output"
        print(f"{command}: error: could not write {what} ({type(problem).__name__}: {problem.strerror or problem}); "
              "make room there, or write elsewhere (-o)", file=sys.stderr, flush=True)
        return 2


def _dispatch(argv: Sequence[str] | None) -> Any:
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
    if command == "eval":
        from corral.framework.eval_run import eval_command

        return eval_command(rest)
    if command in ("results", "plot"):
        try:
            return (results_command if command == "results" else plot_command)(rest)
        except (FileNotFoundError, NotADirectoryError, ValueError, ImportError) as exc:  # ImportError: a missing extra
            print(f"corral {command}: error: {exc}", file=sys.stderr)
            return 2
    print(unknown_command_message(args), file=sys.stderr)
    return 2


COMMANDS = ("train", "plugins", "results", "plot", "eval")


def unknown_command_message(args: Sequence[str]) -> str:
    """The one line for ``corral <args>`` whose first word is no command: the commands, the nearest
    one, and ``corral train ...`` for a command line of overrides (``corral algo=vpg``)."""
    import difflib

    command = args[0]
    if "=" in command:
        return (f"corral: error: {command!r} is an override, not a command; to train with it: "
                f"corral train {' '.join(args)}")
    close = difflib.get_close_matches(command, COMMANDS, n=1)
    near = f" (did you mean `corral {close[0]}`?)" if close else ""
    return (f"corral: error: unknown command {command!r}{near}; the commands are {', '.join(COMMANDS[:-1])} and "
            f"{COMMANDS[-1]} (`corral --help` says what each does)")


def plugins_command(argv: Sequence[str]) -> int:
    """``corral plugins``: a table (or ``--json``) of components and failed plugins."""
    parser = CommandParser(prog="corral plugins", description="List corral's registered components.")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a plugin failed to load or registers nothing, an option name clashed, "
                             "a config default is outside its own declared range, a plugin's config search "
                             "path names nothing, or CORRAL_PLUGINS / CORRAL_DISABLE_PLUGINS names a plugin that is "
                             "not installed")
    opts = parser.parse_args(list(argv))

    import warnings

    from corral.framework.config import report_searchpath_problems
    from corral.framework.errors import PluginHookError
    from corral.framework.plugins import PluginWarning, get_plugin_manager

    with warnings.catch_warnings():  # listed below instead (FAILED PLUGINS, NAME CLASHES, SEARCH PATH ...)
        warnings.simplefilter("ignore", PluginWarning)
        manager = get_plugin_manager()
        try:  # a plugin's config search path that names nothing: a PluginError under CORRAL_STRICT_PLUGINS
            searchpath_problems = report_searchpath_problems(manager)
        except PluginHookError as exc:  # the hook itself raised: listed, the other plugins still are
            searchpath_problems = [str(exc)]
    registry = manager.registry
    components = [
        {
            "kind": r.kind,
            "name": r.name,
            "distribution": r.source.distribution,
            "version": r.source.version,
            "plugin": r.source.plugin,
            "help": r.help,
            "config": [{**f, "default": _jsonable(f["default"])} for f in r.config_fields(registry)],
        }
        for r in registry
    ]
    failed = [
        {"plugin": f.source.plugin, "distribution": f.source.distribution, "version": f.source.version, "error": f.error}
        for f in registry.failed
    ]
    clashes = [
        {"kind": c.kind, "name": c.name, "kept": str(c.kept), "skipped": str(c.skipped), "message": c.message()}
        for c in registry.clashes
    ]
    from corral.framework.checks import check_defaults

    # A default outside its own declared range would make every run with that option fail: the author's mistake.
    config_problems = [f"{r.kind}={r.name} ({r.source}): {p}" for r in registry if r.config is not None
                       for p in check_defaults(r.config, r.path, registry)]
    for message in manager.unknown_names:  # CORRAL_PLUGINS=<a name nothing has>: why a plugin is missing below
        print(f"corral: warning: {message}", file=sys.stderr)
    if opts.json:
        print(json.dumps({"components": components, "failed": failed, "clashes": clashes,
                          "config_problems": config_problems, "searchpath_problems": searchpath_problems,
                          "unknown_names": list(manager.unknown_names)}, indent=2))
    else:
        _print_table(components, failed, clashes)
        if config_problems:
            print("\nCONFIG DEFAULTS OUTSIDE THEIR DECLARED RANGES")
            for line in config_problems:
                print(f"  {line}")
        if searchpath_problems:
            print("\nCONFIG SEARCH PATHS THAT NAME NOTHING")
            for line in searchpath_problems:
                print(f"  {line}")
    # a name that matched nothing: the plugin it meant is not loaded, which is what --check is for
    problems = failed or clashes or config_problems or searchpath_problems or manager.unknown_names
    return 1 if (opts.check and problems) else 0


def _checked_ignore(command: str, roots: list[str], given: list[str] | None) -> list[str]:
    """``--ignore``'s keys (``seed`` when not given; none for ``--ignore`` alone); a given key that no run
    under ``roots`` overrides is one warning line, since it would merge nothing (a typo of a swept key),
    and a key that is a directory is an error (it was meant as one of ``roots``)."""
    if given is None:
        return ["seed"]
    from corral.results.table import unused_ignore_keys

    unused, overridden = unused_ignore_keys(roots, given)
    for key in unused:
        if Path(key).is_dir():
            raise ValueError(f"--ignore took the directory {key} as an override key; give the directories before "
                             f"--ignore (corral {command} {' '.join(dict.fromkeys([*roots, key]))} --ignore ...)")
    for key in unused:
        print(f"corral {command}: warning: --ignore {key}: no run under {', '.join(roots)} overrides {key}, so it "
              f"merges nothing (the runs override: {', '.join(overridden) or 'nothing'}); check the spelling",
              file=sys.stderr)
    return given


def _checked_only(command: str, roots: list[str], given: list[str] | None) -> dict[str, list[str]]:
    """``--only``'s ``{key: [values]}`` (empty when not given); an item that is a directory rather than
    ``KEY=VAL`` is an error that says to give the directories first."""
    from corral.results.select import parse_only

    for item in given or []:
        if "=" not in item and Path(item).is_dir():
            raise ValueError(f"--only took the directory {item} as KEY=VAL; give the directories before --only "
                             f"(corral {command} {' '.join(dict.fromkeys([*roots, item]))} --only KEY=VAL ...)")
    return parse_only(given or [])


def _checked_dirs(parser: CommandParser, command: str, opts: argparse.Namespace) -> None:
    """Exit with the parser's error when no directory is given; raise ValueError when an option took
    them (``corral plot --ignore seed sweep``: ``--ignore`` took ``sweep`` as a key)."""
    if opts.dirs:
        return
    for option in ("ignore", "only"):
        taken = [item for item in getattr(opts, option) or [] if Path(item).is_dir()]
        if taken:
            raise ValueError(f"no directory given: --{option} took {' '.join(taken)} as its own; give the directories "
                             f"first (corral {command} {' '.join(taken)} --{option} ...)")
    parser.error("the following arguments are required: dir")


def _selection_lines(ignore: list[str], only: dict[str, list[str]], kept: int, total: int, what: str) -> list[str]:
    """The lines ``corral results`` and ``corral plot`` print above their output when the runs are not
    all of them grouped as by default: which ``--only`` runs are kept, and that ``--ignore`` alone merges
    no key, not even ``seed`` (``what``: ``row`` or ``line``)."""
    from corral.results.select import describe

    lines = []
    if only:
        lines.append(f"only {describe(only)}: {kept} of {total} run(s)")
    if not ignore:
        lines.append(f"merged: no key (--ignore with no keys), not even seed: runs that differ in seed are "
                     f"separate {what}s")
    return lines


class _Once(argparse.Action):
    """An option that takes one value and may be given once: a second one is an error, not a silent
    replacement of the first (``-o a.png -o b.png``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        """Keep ``values``; a second time, exit with the parser's one-line error."""
        before = getattr(namespace, self.dest, None)
        if before is not None:
            parser.error(f"{option_string} given twice ({before}, then {values}); give it once")
        setattr(namespace, self.dest, values)


#: How ``corral results`` and ``corral plot`` take their directories.
DIRS_HELP = ("run directories or multirun (sweep) directories; runs with the same overrides (apart from the "
             "--ignore keys) are one group, whichever directory holds them")
#: ``--ignore``'s help, for both commands (``what``: ``group`` or ``line``).
IGNORE_HELP = ("override keys merged within a {what} (default: seed); --ignore with no keys merges none, not even "
               "seed (a {what} per seed); may be given more than once")
#: ``--only``'s help, for both commands.
ONLY_HELP = ("keep only the runs whose overrides have these values: several values of one key keep runs with any "
             "of them, several keys runs with all (--only algo=ppo algo=vpg seed=1); a number matches the same "
             "number (1e-3 = 0.001); a key or value no run has is an error that lists what the runs have")


def _results_parser(prog: str, description: str, what: str) -> CommandParser:
    """The parser of ``corral results`` / ``corral plot``: their directories, ``--ignore`` and ``--only``."""
    parser = CommandParser(prog=prog, description=description)
    parser.add_argument("dirs", nargs="*", metavar="dir", help=DIRS_HELP)
    parser.add_argument("--ignore", nargs="*", action="extend", metavar="KEY", help=IGNORE_HELP.format(what=what))
    parser.add_argument("--only", nargs="+", action="extend", metavar="KEY=VAL", help=ONLY_HELP)
    return parser


def results_command(argv: Sequence[str]) -> int:
    """``corral results <dir> [<dir> ...]``: the grouped table of every run under run or multirun directories."""
    parser = _results_parser("corral results", "Summarise the runs under one or more directories.", "group")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output (with the keys merged, \"ignore\", and the --only selection)")
    opts = parser.parse_args(list(argv))
    _checked_dirs(parser, "results", opts)
    opts.ignore = _checked_ignore("results", opts.dirs, opts.ignore)
    only = _checked_only("results", opts.dirs, opts.only)

    from corral.results.select import select_runs
    from corral.results.summary import find_runs_under
    from corral.results.table import found_runs_table

    found = find_runs_under(opts.dirs)
    kept = select_runs(found, only)
    table = found_runs_table(kept, ignore=opts.ignore)
    where = ", ".join(opts.dirs)
    if only:
        where += f" with --only {' '.join(opts.only)}"
    if not table.rows and not table.skipped:
        raise FileNotFoundError(f"no completed run (a directory with summary.json) under {where}")
    if opts.json:
        print(json.dumps({**table.to_json(), "ignore": opts.ignore, "only": only}, indent=2))
    else:  # with no completed run, no empty table: the runs that are not, and why
        for line in _selection_lines(opts.ignore, only, len(kept.runs) + len(kept.unfinished),
                                     len(found.runs) + len(found.unfinished), "row"):
            print(line)
        print(table.format() if table.rows else "\n".join(f"skipped: {s}" for s in table.skipped))
    if not table.rows:  # every job failed, or an interrupted sweep before its first job finished
        print(f"corral results: error: no completed run under {where} ({kept.status_counts()}; listed above)",
              file=sys.stderr)
        return 2
    return 0


def plot_command(argv: Sequence[str]) -> int:
    """``corral plot <dir> [<dir> ...]``: learning curves of the runs under directories as an image."""
    parser = _results_parser("corral plot", "Plot learning curves of the runs under one or more directories.",
                             "line")
    parser.add_argument("-o", "--out", action=_Once,
                        help="image to write: a file (.png, .svg, .pdf, ...; .png is added to a name without a "
                             "suffix) or a directory (default, for one directory: <dir>/learning_curves.png)")
    parser.add_argument("--metric", action=_Once,
                        help="progress.csv column (default: eval/return_mean if every run evaluated "
                             "at least twice, else train/return_mean)")
    parser.add_argument("--legend", type=int, metavar="N", action=_Once,
                        help="name at most N groups (1 to 20) in the legend, the first ones listed; the others are "
                             "drawn in gray behind one '+K more' entry (default 10). Long labels are wrapped or "
                             "shortened there; the lines printed give them whole")
    opts = parser.parse_args(list(argv))
    _checked_dirs(parser, "plot", opts)
    opts.ignore = _checked_ignore("plot", opts.dirs, opts.ignore)
    only = _checked_only("plot", opts.dirs, opts.only)

    from corral.results.plot import check_legend, plot_dir
    from corral.results.table import format_mean_std, mean_std

    if opts.legend is not None:
        check_legend(opts.legend)
    result = plot_dir(opts.dirs, out=opts.out, metric=opts.metric, ignore=opts.ignore, only=only,
                      **({} if opts.legend is None else {"legend": opts.legend}))
    for line in _selection_lines(opts.ignore, only, result.n_kept, result.n_found, "line"):
        print(line)
    for c in result.curves:
        # each run's own final value, as `corral results` averages them (the line ends at the shortest run's end)
        mean, std = mean_std(c.finals) or (float(c.mean[-1]), float(c.std[-1]))
        final = format_mean_std(mean, std if c.n_runs > 1 else None)  # one run has no spread
        print(f"{c.label}: {c.n_runs} run(s), final {result.metric} {final}")
    for line in result.skipped:  # as `corral results` lists them: a missing line is never silent
        print(f"skipped: {line}")
    if result.legend_note:  # a line the legend does not name is gray: which ones, and how to name them
        print(f"legend: {result.legend_note}")
    print(f"wrote {result.path} ({len(result.curves)} line(s), {result.metric} vs environment steps)")
    return 0


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def _print_table(components: list[dict[str, Any]], failed: list[dict[str, Any]],
                 clashes: list[dict[str, Any]] | None = None) -> None:
    kind_w = max((len(c["kind"]) for c in components), default=4)
    name_w = max((len(c["name"]) for c in components), default=4)
    src_w = max((len(f"{c['distribution']} {c['version']}") for c in components), default=4)
    print(f"{'KIND':<{kind_w}}  {'NAME':<{name_w}}  {'FROM':<{src_w}}  HELP")
    for c in components:
        src = f"{c['distribution']} {c['version']}"
        print(f"{c['kind']:<{kind_w}}  {c['name']:<{name_w}}  {src:<{src_w}}  {c['help']}")
        for f in c["config"]:  # under the path a user types: algo.learning_rate, logger.csv.filename
            line = f"{'':<{kind_w}}  {'':<{name_w}}    {f['path']}: {f['type']} = {f['default']!r}"
            if f["accepts"]:
                line += f"  [{f['accepts']}]"
            if f["help"]:
                line += f"  # {f['help']}"
            print(line)
    if failed:
        print("\nFAILED PLUGINS")
        for f in failed:
            print(f"  {f['plugin']} ({f['distribution']} {f['version']}): {f['error']}")
    if clashes:  # the option kept its first registration; the plugin's other options loaded
        print("\nNAME CLASHES (the second registration was skipped)")
        for c in clashes:
            print(f"  {c['message']}")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
