"""Check a ``train.py`` command line before Hydra starts the run: one message style for every config mistake.

``python train.py <overrides>`` composes the config once here, with Hydra's compose API, and checks
every value and whether the choices fit together (:func:`corral.framework.compose.validate`, which
runs the plugins' ``corral_validate_config`` hooks) before Hydra creates a run directory or anything
is built. Hydra's own composition errors (a value of the wrong type, an unknown option,
an override that does not parse) become the same one-paragraph ``corral: error: ...`` (exit status
2) as corral's range errors, instead of Hydra's format.

An option that does not exist (``sampler=nope``, ``logger=[console,nope]``, ``hydra/launcher=nope``)
is one line that lists the group's options, for a single run and for every value of a sweep
(``-m sampler=nope,local``), before any job starts.

A run directory that cannot be created (``hydra.run.dir=/proc/x``) is one line too, before anything
starts. With other flags (``--help``, ``--cfg`` and such) only the options are checked, and Hydra shows
what was asked. A sweep gets the checks of :func:`check_sweep_values`,
:func:`check_sweep_plugins` and :func:`check_sweep_jobs` (each of its jobs' configs, up to a bound,
before any job starts); each job checks its own config again when it starts. A command line that resumes a
run (``trainer.resume``) has its overrides checked the same way, and then the run's own config with them (see
:mod:`corral.framework.resume`), before anything is written into the run's directory. Nothing is checked when
the command line names another primary config (``--config-name`` and such).
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Sequence

from corral.framework.config import CONFIG_MODULE, CONFIG_NAME, searchpath_entry_problem
from corral.framework.errors import ConfigError, CorralError
from corral.framework.override_keys import given_keys
from corral.framework.override_keys import override_key as _key
from corral.framework.plugins import failed_plugin_note
from corral.framework.resume import check_branch_dir, check_resume_source, holds_run, resume_arg, resumed_config
from corral.framework.shell_words import shell_override

MULTIRUN_FLAGS = ("-m", "--multirun")
#: Flags that make Hydra compose another primary config than corral's: nothing is checked against corral's.
OTHER_CONFIG_FLAGS = ("--config-name", "-cn", "--config-dir", "-cd", "--config-path", "-cp",
                      "--experimental-rerun", "--shell-completion", "-sc")
#: Hydra's flags that take the next argument as their value (``--cfg job``).
VALUE_FLAGS = ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir",
               "-cd", "--experimental-rerun")
#: The values ``--info`` / ``-i`` may take (it also stands alone).
INFO_VALUES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def split_flags(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(flags, overrides)`` of a ``train.py`` command line, each in its order: Hydra's flags with
    their values (``--cfg job``, ``--info defaults``), and the overrides, wherever the flags stood."""
    flags: list[str] = []
    overrides: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-"):
            flags.append(arg)
            following = args[i + 1] if i + 1 < len(args) else None
            if following is not None and (arg in VALUE_FLAGS or (arg in ("--info", "-i") and following in INFO_VALUES)):
                flags.append(following)
                i += 1
        else:
            overrides.append(arg)
        i += 1
    return flags, overrides


def precheck(args: Sequence[str]) -> None:
    """Compose ``args`` as ``train.py`` will and check every value; raise :class:`ConfigError` with a
    one-line message when anything is wrong, and print one ``corral: warning:`` line for each value
    the command line set that the run would ignore. A sweep (``-m``) gets the checks that every
    option it names exists, that every value it lists has the setting's type
    (:func:`check_sweep_values`), and its launcher's and sweeper's (:func:`check_sweep_plugins`)."""
    flags, overrides = split_flags(args)
    multirun = bool(flags) and all(a in MULTIRUN_FLAGS for a in flags)
    command = "corral train" if Path(sys.argv[0]).name.startswith("corral") else "train.py"
    check_flags(args, command)
    if any(a in OTHER_CONFIG_FLAGS for a in flags):
        return
    check_keys_given(overrides)
    check_searchpath(overrides)
    repeated = repeated_key_warnings(overrides, "the sweep" if multirun else "the run", "" if multirun else f"{command} -m ")
    resuming = resume_arg(overrides) is not None
    if resuming:  # before the run's own config is read: a source that names nothing, a branch into another run
        check_resume_source(args)
        check_branch_dir(args)
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints (types-PyYAML is not a dependency)
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    from corral.framework.compose import validate, warn_ignored

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            options_of = _options_lister(GlobalHydra.instance().config_loader(), overrides)
            check_choices(overrides, options_of)
            check_one_preset(overrides)
            check_group_additions(overrides)
            _parse(overrides)  # also beside a flag: `--info nope` is the override nope to Hydra
            if flags and not multirun:  # --cfg, --help, ...: Hydra shows what was asked, of options that exist
                _check_types(overrides, lambda job: compose(config_name=CONFIG_NAME, overrides=job))
                return
            hydra_cfg = hydra_config(overrides)  # composed once, for the two checks below
            check_output_dir(overrides, multirun, hydra_cfg, resume=resuming)
            check_added_hydra_keys(overrides, hydra_cfg)
            if multirun:
                check_sweep_lists(overrides, options_of)
                check_no_hydra_sweep(overrides)
                check_sweep_values(overrides)
                repeated += check_sweep_plugins(overrides, hydra_cfg)
                check_sweep_jobs(overrides, hydra_cfg, options_of, resolve=resumed_config if resuming else None)
                fixed = [str(o.input_line) for o in OverridesParser.create().parse_overrides(list(overrides))
                         if not o.is_sweep_override()]
                repeated += no_addition_warnings(fixed, lambda job: compose(config_name=CONFIG_NAME, overrides=job),
                                                 options_of)
                _print_warnings(repeated + run_only_warnings(overrides))
                return
            try:
                cfg = compose(config_name=CONFIG_NAME, overrides=[o for o in overrides if _composes_job(o)])
                check_plugin_names(overrides, cfg, lambda job: compose(config_name=CONFIG_NAME, overrides=job))
                check_deletions(overrides, lambda job: compose(config_name=CONFIG_NAME, overrides=job))
                check_bool_values(overrides, cfg)
                check_preset_fits(overrides, cfg, lambda job: compose(config_name=CONFIG_NAME, overrides=job))
                repeated += no_addition_warnings(overrides, lambda job: compose(config_name=CONFIG_NAME, overrides=job),
                                                 options_of)
            except MissingConfigException as exc:
                raise ConfigError(_missing_message(exc, options_of)) from None
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(hydra_message(exc)) from None
    except yaml.YAMLError as exc:  # a config file of the search path (a user's preset) that does not parse
        raise ConfigError(yaml_message(exc)) from None
    finally:
        GlobalHydra.instance().clear()
    if resuming:  # the run's own config, with what this command may change (it refuses any other override)
        cfg = resumed_config(cfg, [o for o in overrides if _composes_job(o)])
    else:
        check_episode_length_source(overrides, cfg)
    validate(cfg)  # every value, and whether the choices fit together (the plugins' corral_validate_config)
    _print_warnings(repeated + sweep_only_warnings(overrides))
    warn_ignored(cfg, given_keys(overrides))


def _check_types(overrides: Sequence[str], compose_job: Callable[[list[str]], Any]) -> None:
    """Raise the one-line :class:`ConfigError` a run gets for a value of the wrong type
    (``trainer.n_epochs=abc``) when the command only shows the config (``--cfg job``, ``--help``):
    Hydra printed its multi-line composition error. Any other composition problem is Hydra's to show."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException, ValidationError

    try:
        compose_job([o for o in overrides if _composes_job(o)])
    except (HydraException, OmegaConfBaseException) as exc:
        if isinstance(exc.__cause__, ValidationError) or isinstance(exc, ValidationError):
            raise ConfigError(hydra_message(exc)) from None


#: Hydra's flags that say what ``train.py`` does: one of them at most (Hydra's rule).
MODE_FLAGS = {"run": "--run", "multirun": "-m", "cfg": "--cfg", "info": "--info", "shell_completion": "--shell-completion"}


def check_flags(args: Sequence[str], command: str = "train.py") -> None:
    """Raise a one-line :class:`ConfigError` for a flag Hydra's parser does not take (``--nope``,
    ``--cfg nope``, ``--cfg`` without its value) and for two flags that each say what to do
    (``-m --cfg job``): Hydra printed its whole usage block, or a traceback, for them."""
    import argparse

    from hydra._internal.utils import get_args_parser

    if "--version" in args:  # Hydra's parser prints the version and exits: Hydra's business
        return
    parser = get_args_parser()

    def refuse(message: str) -> NoReturn:
        raise ConfigError(f"{' '.join(message.split())}; `{command} --help` lists its flags, and a setting is key=value")

    parser.error = refuse  # type: ignore[method-assign]
    flags, overrides = split_flags(args)  # the overrides first, as train.py hands them to Hydra (flags_last)
    parsed: argparse.Namespace = parser.parse_args(overrides + flags)
    if parsed.help or parsed.hydra_help:
        return
    given = [flag for dest, flag in MODE_FLAGS.items() if getattr(parsed, dest) not in (None, False)]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)} cannot be given together: each says what {command} does (run, "
                          "sweep, show the config, show information); give one of them")


def _print_warnings(messages: Sequence[str]) -> None:
    for message in messages:
        print(f"corral: warning: {message}", file=sys.stderr, flush=True)


#: Hydra's settings that only a multirun (``-m``) reads: its launcher, its sweeper, its sweep directory.
SWEEP_ONLY = ("hydra/launcher", "hydra/sweeper", "hydra.launcher.", "hydra.sweeper.", "hydra.sweep.")


def sweep_only_warnings(overrides: Sequence[str]) -> list[str]:
    """One line for each override of a single run (no ``-m``) that only a multirun reads
    (``hydra/launcher=joblib``, ``hydra.sweep.dir=...``): Hydra accepts it and changes nothing."""
    return [f"{override} has no effect without -m: Hydra's launcher, sweeper and sweep directory are a multirun's; "
            "add -m to run a sweep" for override in overrides
            if "=" in override and _key(override).startswith(SWEEP_ONLY)]


def _added_options(override: str) -> tuple[str, list[str]] | None:
    """``(group, option names)`` of an override that adds options to a config group (``+logger=[a,b]``,
    ``+logger=a``); None for any other (a setting ``+algo.x=1``, a forced ``++``, a deletion, a choice)."""
    if not override.startswith("+") or override.startswith("++") or "=" not in override:
        return None
    group, value = override[1:].split("=", 1)
    if "." in group:
        return None
    return group, [name.strip() for name in value.strip().strip("[]").split(",") if name.strip()]


def no_addition_warnings(overrides: Sequence[str], compose_job: Any, options_of: Any) -> list[str]:
    """One line for each ``+group=[...]`` of a group that holds several options (``+logger=[csv]``)
    whose options the run already has: Hydra accepts it and changes nothing. ``compose_job(overrides)``
    composes a job's config; ``options_of(group)`` lists a group's options."""
    lines = []
    for override in overrides:
        added = _added_options(override)
        if added is None or _is_hydra(added[0]):
            continue  # not an addition, or to Hydra's own group
        value = override.split("=", 1)[1].strip()
        if "," in value and not value.startswith("["):
            continue  # a sweep
        group, names = added
        try:
            known = set(options_of(group))
        except Exception:  # noqa: BLE001 - not a group: another check says what is wrong
            continue
        if not names or not set(names) <= known:
            continue
        before = compose_job([o for o in overrides if o != override and _composes_job(o)]).get(group)
        if not hasattr(before, "keys") or not all(name in before and hasattr(before[name], "keys") for name in names):
            continue
        had = ", ".join(str(name) for name in before.keys())
        lines.append(f"{override} changes nothing: the run's {group} list ({had}) already has {', '.join(names)}; "
                     f"to have only {' and '.join(names)}, write {group}=[{','.join(names)}], without the +")
    return lines


#: Hydra's settings that only a single run (no ``-m``) reads: its run directory.
RUN_ONLY = ("hydra.run.",)


def run_only_warnings(overrides: Sequence[str]) -> list[str]:
    """One line for each override of a multirun (``-m``) that only a single run reads
    (``hydra.run.dir=...``): Hydra accepts it and puts the jobs under ``hydra.sweep.dir`` instead."""
    return [f"{override} has no effect with -m: a sweep's jobs go under hydra.sweep.dir, one directory each; "
            f"give {shlex.quote('hydra.sweep.dir=' + override.split('=', 1)[1])} instead" for override in overrides
            if "=" in override and _key(override).startswith(RUN_ONLY)]


def repeated_keys(overrides: Sequence[str]) -> dict[str, list[str]]:
    """The overrides of each key that more than one override sets (``seed=1 seed=2`` gives
    ``{"seed": ["seed=1", "seed=2"]}``), in their order: Hydra keeps the last and drops the others.
    A deletion (``~key``) is not counted, nor an option added to a group (``+logger=[mlflow]``; beside
    ``logger=[csv]``, :func:`check_group_additions` refuses it)."""
    given: dict[str, list[str]] = {}
    for override in overrides:
        if "=" in override and not override.startswith("~") and _added_options(override) is None:
            given.setdefault(_key(override), []).append(override)
    return {key: found for key, found in given.items() if len(found) > 1}


def repeated_key_warnings(overrides: Sequence[str], user: str = "the run", sweep: str | None = "train.py -m ") -> list[str]:
    """One line for each key that several ``overrides`` set: which one ``user`` gets (the last, as
    Hydra keeps), and, unless ``sweep`` is None or the key is Hydra's own or ``trainer.resume``, how to
    run each value (``sweep`` + ``seed=1,2``). A warning, not an error: a layered command line
    (``$COMMON seed=2``, where ``$COMMON`` sets ``seed`` too) is a fair use of Hydra's rule."""
    lines = []
    for key, found in repeated_keys(overrides).items():
        count = "twice" if len(found) == 2 else f"{len(found)} times"
        every = ",".join([found[0], *(o.split("=", 1)[1] for o in found[1:])])
        hint = ""
        if sweep is not None and key != "trainer.resume" and not key.startswith(("hydra.", "hydra/")):
            hint = f" (to run each: {sweep}{every})"
        lines.append(f"{key} is given {count} ({', then '.join(found)}); {user} uses the last, {found[-1]}{hint}")
    return lines


def _names_plugin(key: str) -> bool:
    """Whether ``key`` is a chosen plugin's ``name`` (``sampler.name``, ``logger.csv.name``)."""
    from corral.framework.registry import KINDS

    parts = key.split(".")
    return parts[-1] == "name" and ((len(parts) == 2 and parts[0] in KINDS and parts[0] != "logger")
                                    or (len(parts) == 3 and parts[0] == "logger"))


def check_plugin_names(overrides: Sequence[str], cfg: Any, compose_job: Callable[[list[str]], Any]) -> None:
    """Raise one-line :class:`ConfigError` for an override that renames a chosen plugin
    (``sampler.name=ray``, ``logger.console.name=x``). A plugin is chosen with its group
    (``sampler=ray``) and its ``name`` comes with the option: renaming it would build one plugin
    from another's settings, and a logger's would be ignored (a logger is the key it is under).
    ``compose_job(overrides)`` composes the job's config; it runs only when such an override is given,
    to compare with the name the options give."""
    from omegaconf import OmegaConf

    renames = [o for o in overrides if "=" in o and _names_plugin(_key(o))]
    if not renames:
        return
    chosen = compose_job([o for o in overrides if o not in renames and _composes_job(o)])
    for override in renames:
        key = _key(override)
        given, option = OmegaConf.select(cfg, key), OmegaConf.select(chosen, key)
        if given != option:
            group = key.split(".")[0]
            how = ("loggers are chosen with logger=[...], e.g. logger=[console,csv]" if group == "logger"
                   else f"choose the option with {group}={given}")
            raise ConfigError(f"{override}: a plugin's name comes with its option ({key} is {option!r}) and is "
                              f"not a setting; {how}")


#: At most this many compositions check a sweep's values (each takes tens of milliseconds).
MAX_VALUE_CHECKS = 32


def check_sweep_values(overrides: Sequence[str]) -> None:
    """Raise one-line :class:`ConfigError` for a value of a sweep that its setting cannot take
    (``-m env.max_episode_length=50,nope``), before any job runs, rather than when the sweep
    reaches that job. Each listed value (of a choice or range sweep) is composed with the fixed
    overrides and the first value of the other sweeps; only a value of the wrong type counts, since
    a setting missing from this composition may exist in another combination (``worker=vec,default
    worker.n_envs=2,4``). Ranges that corral checks (``> 0``) are checked job by job (:func:`check_sweep_jobs`)."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException, ValidationError

    listed = (ValueType.CHOICE_SWEEP, ValueType.SIMPLE_CHOICE_SWEEP, ValueType.RANGE_SWEEP)
    try:
        parsed = [o for o in OverridesParser.create().parse_overrides(list(overrides)) if _composes_job(str(o.input_line))]
    except (HydraException, OmegaConfBaseException):
        return  # Hydra says what does not parse
    fixed = [str(o.input_line) for o in parsed if not o.is_sweep_override()]
    sweeps = {str(o.input_line).split("=", 1)[0]: list(o.sweep_string_iterator())
              for o in parsed if o.is_sweep_override() and o.value_type in listed}
    ranges = {str(o.input_line).split("=", 1)[0] for o in parsed if o.value_type == ValueType.RANGE_SWEEP}
    written = {str(o.input_line).split("=", 1)[0]: str(o.input_line) for o in parsed}  # as given (true, not True)
    checks = 0
    for key, values in sweeps.items():
        others = [f"{k}={v[0]}" for k, v in sweeps.items() if k != key and v]
        # a range's values are numbers of one kind: its first and last stand for the rest (seed=range(1,1000))
        for value in dict.fromkeys(values[:1] + values[-1:] if key in ranges else values):
            checks += 1
            if checks > MAX_VALUE_CHECKS:
                return
            try:
                cfg = compose(config_name=CONFIG_NAME, overrides=[*fixed, *others, f"{key}={value}"])
            except (HydraException, OmegaConfBaseException) as exc:
                if isinstance(exc.__cause__, ValidationError) or isinstance(exc, ValidationError):
                    raise ConfigError(f"{hydra_message(exc)} (a value of the sweep {written[key]})") from None
                continue
            try:
                check_bool_values([f"{key}={value}"], cfg)
            except ConfigError as exc:
                raise ConfigError(f"{exc} (a value of the sweep {written[key]})") from None


def _listed_values(override: Any, options_of: Any) -> list[str] | None:
    """The values a parsed sweep override lists: a choice's or a range's, or the options of its
    group that a ``glob(...)`` matches; None for a sweep that lists none (an interval, a sweep type
    not known here). A range that cannot be made (``range(0,3,0)``) raises ValueError."""
    from hydra.core.override_parser.types import ValueType

    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
        glob: Any = override.value()
        return list(glob.filter(list(options_of(override.key_or_group))))
    if override.value_type in (ValueType.CHOICE_SWEEP, ValueType.SIMPLE_CHOICE_SWEEP, ValueType.RANGE_SWEEP):
        return list(override.sweep_string_iterator())
    return None


def check_sweep_lists(overrides: Sequence[str], options_of: Any) -> None:
    """Raise one-line :class:`ConfigError` for a sweep that lists no value (``seed=range(1,0)``,
    ``algo=glob(zz*)``: Hydra launched no job and the sweep ended as a success) or whose list cannot be
    made (``seed=range(0,3,0)``: a traceback)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except (HydraException, OmegaConfBaseException):
        return  # Hydra says what does not parse
    for o in parsed:
        if not o.is_sweep_override():
            continue
        line = str(o.input_line)
        try:
            values = _listed_values(o, options_of)
        except (HydraException, OmegaConfBaseException):
            continue  # Hydra says what is wrong
        except ValueError as exc:
            raise ConfigError(f"{line}: {exc}") from None
        if values is not None and not values:
            if o.value_type == ValueType.GLOB_CHOICE_SWEEP:
                options = list(options_of(o.key_or_group))
                if options:
                    raise ConfigError(f"{line} matches none of {o.key_or_group}'s options ({', '.join(options)}), "
                                      "so the sweep would run no job")
                continue
            raise ConfigError(f"{line} lists no values, so the sweep would run no job (range(a,b) counts from a "
                              "up to b, leaving b out)")


#: A sweep of at most this many jobs has every job composed and checked before any starts.
MAX_JOB_CHECKS = 16


def check_sweep_jobs(overrides: Sequence[str], hydra_cfg: Any, options_of: Any,
                     resolve: Callable[[Any, Sequence[str]], Any] | None = None) -> None:
    """Raise one-line :class:`ConfigError` for a job of a sweep that would fail its checks: choices
    that do not fit together (``-m algo=ppo,sac`` on CartPole: SAC needs continuous actions), a value
    out of its range, a setting one of the options lacks (``-m worker=default,vec worker.n_envs=4``),
    before any job starts rather than when the sweep reaches that job. The jobs are those of Hydra's
    basic sweeper, the product of the command line's sweeps: all of them up to :data:`MAX_JOB_CHECKS`;
    beyond that, those that combine every listed option of the config groups (``algo=...``,
    ``env=...``, a ``glob(...)`` as the options it matches) with the first value of the other sweeps, up to the
    same number; an ``interval(...)``, which the basic sweeper cannot list, is refused. Other sweepers
    (Optuna) choose their jobs as they go; each job checks its own config. ``resolve(cfg, overrides)``,
    when given, is the config a job of ``cfg`` trains with (a resume's: :func:`~corral.framework.resume.resumed_config`)."""
    import itertools

    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from corral.framework.compose import validate

    if hydra_cfg is None or not str(OmegaConf.select(hydra_cfg, "sweeper._target_", default="")).endswith("BasicSweeper"):
        return
    if OmegaConf.select(hydra_cfg, "sweeper.params", default=None):
        return  # a preset's own sweep: its jobs are the sweeper's to make
    try:
        parsed = [o for o in OverridesParser.create().parse_overrides(list(overrides)) if _composes_job(str(o.input_line))]
        fixed = [str(o.input_line) for o in parsed if not o.is_sweep_override()]
        sweeps = []
        for o in parsed:
            if not o.is_sweep_override():
                continue
            line = str(o.input_line)
            key = line.split("=", 1)[0]
            if o.value_type == ValueType.INTERVAL_SWEEP:  # Hydra's basic sweeper stops on it with a traceback
                raise ConfigError(f"{line}: Hydra's basic sweeper cannot sweep an interval, which has no values to "
                                  f"list; list them ({key}=a,b,c) or use range(...), or search the interval with "
                                  "hydra/sweeper=optuna")
            try:
                values = _listed_values(o, options_of)
            except ValueError:  # not a ConfigError: a range that cannot be made (check_sweep_lists says so)
                return
            if values is None:
                return  # a sweep type this check does not know: left to each job
            sweeps.append((key, values))
    except (HydraException, OmegaConfBaseException):
        return  # Hydra says what does not parse
    if math.prod(len(values) for _, values in sweeps) > MAX_JOB_CHECKS:
        sweeps = [(key, values if list(options_of(key.lstrip("+"))) else values[:1]) for key, values in sweeps]
    jobs = itertools.product(*[[f"{key}={value}" for value in values] for key, values in sweeps])
    for job in itertools.islice(jobs, MAX_JOB_CHECKS):
        where = f" (the sweep's job {' '.join(job)}; no job has started)" if job else " (no job of the sweep has started)"
        try:
            cfg = compose(config_name=CONFIG_NAME, overrides=[*fixed, *job])
            if resolve is None:
                check_episode_length_source([*fixed, *job], cfg)
            validate(resolve(cfg, [*fixed, *job]) if resolve is not None else cfg)
        except (HydraException, OmegaConfBaseException) as exc:
            raise ConfigError(f"{composition_error(exc, [*fixed, *job])}{where}") from None
        except CorralError as exc:  # a value out of range; a resume: an override it refuses, a snapshot it cannot read
            raise ConfigError(f"{exc}{where}") from None


def hydra_config(overrides: Sequence[str]) -> Any:
    """Hydra's own config (the ``hydra`` node) composed from the overrides that are not sweeps, for
    :func:`check_output_dir` and :func:`check_sweep_plugins`; None when it does not compose (Hydra
    or each job reports why). A ``hydra.*`` value of the wrong type (``hydra.job.chdir=abc``) and a
    key the config does not have (``nope=1``, ``hydra.launcher.n_jobs=2`` with the basic launcher,
    also beside a sweep) are a one-line :class:`ConfigError` (:func:`composition_error`)."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException, ValidationError

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except (HydraException, OmegaConfBaseException):
        return None  # _parse says what does not parse
    fixed = [str(o.input_line) for o in parsed if not o.is_sweep_override()]
    try:
        return compose(config_name=CONFIG_NAME, overrides=fixed, return_hydra_config=True).hydra
    except (HydraException, OmegaConfBaseException) as exc:
        if isinstance(exc.__cause__, ValidationError) or isinstance(exc, ValidationError):
            raise ConfigError(hydra_message(exc)) from None  # e.g. hydra.sweeper.max_batch_size=abc
        if not_overridable(exc) is not None:
            raise ConfigError(composition_error(exc, [o for o in fixed if _composes_job(o)])) from None
        if (line := added_group_message(str(exc))) is not None:  # +hydra/launcher=joblib
            raise ConfigError(line) from None
        return None


def yaml_message(exc: Exception) -> str:
    """A config file's YAML error in one line: the file, where in it, and what the parser expected."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return f"a config file is not valid YAML: {problem}; fix it"
    return (f"{mark.name} is not valid YAML (line {mark.line + 1}, column {mark.column + 1}: {problem}); fix that "
            "file")


def check_added_hydra_keys(overrides: Sequence[str], hydra_cfg: Any) -> None:
    """Raise a one-line :class:`ConfigError` for a key added to Hydra's own settings with ``+``
    (``+hydra.nope=1``, ``+hydra.job.nope=1``) where Hydra's config is a fixed schema: Hydra takes it
    and nothing reads it. A key added under a mapping Hydra reads as one (``+hydra.job.env_set.FOO=1``,
    ``+hydra.callbacks.x._target_=...``) is fine."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    if hydra_cfg is None:
        return
    for override in overrides:
        key = _key(override)
        if not (override.startswith("+") and "=" in override and key.startswith("hydra.")):
            continue
        *parents, name = key.split(".")[1:]
        node = hydra_cfg
        for part in parents:
            node = node.get(part) if isinstance(node, DictConfig) else None
        schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
        if schema is None or not dataclasses.is_dataclass(schema):
            continue
        if name not in {field.name for field in dataclasses.fields(schema)}:
            raise ConfigError(f"{override}: Hydra's config has no {key} (Key '{name}' not in '{schema.__name__}'), "
                              "and nothing would read a key added to it; `python train.py --cfg hydra` shows its "
                              "settings")


def not_overridable(exc: BaseException) -> tuple[str, str] | None:
    """``(key, override)`` when ``exc`` is Hydra's ``Could not override 'key'. To append to your
    config use +override``: a key the composed config does not have (``nope=1``,
    ``logger.wandb.project=x`` without the wandb logger, ``hydra.launcher.n_jobs=2`` with the basic
    launcher); else None."""
    text = str(exc).strip()
    head, _, rest = text.partition("\n")
    append = "To append to your config use +"
    if not (head.startswith("Could not override '") and head.endswith("'.") and rest.startswith(append)):
        return None
    return head[len("Could not override '"):-2], rest[len(append):].split("\n", 1)[0].strip()


def composition_error(exc: BaseException, overrides: Sequence[str]) -> str:
    """The one line for a composition error of ``overrides``: for a key the config does not have
    (:func:`not_overridable`) a logger the run does not use (``logger.wandb.project=x``: how to add
    it), else corral's own message for the key added with ``+`` (``nope is not a setting: the
    top-level settings are ...``); else, and for ``hydra.*`` keys, Hydra's reason in one line
    (:func:`hydra_message`). Call inside an initialised Hydra."""
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from corral.framework.compose import validate
    from corral.framework.plugins import get_plugin_manager

    unknown = not_overridable(exc)
    if unknown is None or _is_hydra(unknown[0]):
        return hydra_message(exc)
    key, override = unknown
    job = [o for o in overrides if _composes_job(o) and o != override]
    parts = key.split(".")
    try:
        if len(parts) > 2 and parts[0] == "logger" and get_plugin_manager().registry.entries.get(("logger", parts[1])):
            chosen = list(compose(config_name=CONFIG_NAME, overrides=job).logger)
            return (f"{override}: logger {parts[1]} is not among the run's loggers ({', '.join(chosen) or 'none'}); "
                    f"add it: logger=[{','.join([*chosen, parts[1]])}] {override}")
        added = compose(config_name=CONFIG_NAME, overrides=[*job, f"+{override}"])
        check_plugin_names([*job, f"+{override}"], added, lambda other: compose(config_name=CONFIG_NAME, overrides=other))
        validate(added)
    except ConfigError as error:
        return str(error)
    except (HydraException, OmegaConfBaseException):
        pass
    return hydra_message(exc)


def check_output_dir(overrides: Sequence[str], multirun: bool, hydra_cfg: Any, resume: bool = False) -> None:
    """Raise one-line :class:`ConfigError` when the run's directory (``hydra.run.dir``, or
    ``hydra.sweep.dir`` for a sweep, in ``hydra_cfg`` from :func:`hydra_config`) cannot be created:
    its nearest existing ancestor is not a directory, or refuses a new directory
    (``hydra.run.dir=/proc/x``, a read-only file system). Hydra would stop on it with a traceback
    (:func:`corral.results.writable.directory_problem`); a directory that does not resolve yet (it
    names run-time values) is left to Hydra. A single run that resumes another (``resume``) continues in
    that run's directory unless it gives a ``hydra.run.dir`` of its own (a branch, whose target
    :func:`~corral.framework.resume.check_branch_dir` checks), so only a given directory is checked, and
    only whether it can be created."""
    from pathlib import Path

    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from corral.results.writable import directory_problem

    if hydra_cfg is None or (resume and not multirun and "hydra.run.dir" not in given_keys(overrides)):
        return
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        where = str(OmegaConf.select(hydra_cfg, key.removeprefix("hydra."), throw_on_resolution_failure=True))
    except OmegaConfBaseException:
        return
    if where.strip() in ("", "None"):  # Path("") is the current directory: the run's files would land there
        default = "multirun/<date>/<time>" if multirun else "outputs/<date>/<time>"
        raise ConfigError(f"{key} is empty, which would make the current directory the "
                          f"{'sweep' if multirun else 'run'}'s directory; give a directory, or leave {key} out "
                          f"for {default}")
    target = Path(where).expanduser().absolute()
    problem = directory_problem(target)
    given = f"{key}={where}" if any(_key(o) == key for o in overrides) else f"{key} ({where})"
    if problem is not None:
        raise ConfigError(f"{given}: cannot create the {'sweep' if multirun else 'run'}'s directory {target}: "
                          f"{problem}; give a directory you can write to, e.g. {key}=outputs/<name>")
    if not multirun and not resume and holds_run(target):
        raise ConfigError(f"{given}: {target} already holds a run, and a new run there would overwrite its "
                          f"progress.csv and snapshots; continue it with {shell_override('trainer.resume', where)}, or give another "
                          f"directory")
    first = first_job_number(hydra_cfg) if multirun and target.is_dir() else None
    if first is not None:
        earlier = sorted((p.parent.name for p in target.glob("*/.hydra")
                          if p.parent.name.isdigit() and int(p.parent.name) >= first), key=int)
        if earlier:
            numbered = f", numbered from {first} (the trials its stored study has)," if first else ""
            raise ConfigError(f"{given}: {target} already holds the jobs of an earlier sweep ({', '.join(earlier[:5])}"
                              f"{', ...' if len(earlier) > 5 else ''}), and this sweep's jobs{numbered} would overwrite "
                              "them; give another directory (the default, multirun/<date>/<time>, is new each time)")


def first_job_number(hydra_cfg: Any) -> int | None:
    """The number of the first job directory the sweep's sweeper writes: 0 for Hydra's basic sweeper;
    what a sweeper class's ``first_job_number(cfg)`` classmethod says (corral's Optuna sweeper: the
    trials its stored study already has, else 0); None for a sweeper that does not say."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    target = str(OmegaConf.select(hydra_cfg, "sweeper._target_", default="") or "")
    if target.endswith("BasicSweeper"):
        return 0
    try:
        first = getattr(get_class(target), "first_job_number", None) if target else None
        return int(first(hydra_cfg.sweeper)) if callable(first) else None
    except ConfigError:
        raise
    except Exception:  # noqa: BLE001 - a sweeper that does not import, a storage that does not answer: the
        return None  # sweep reports it when it starts


def check_sweep_plugins(overrides: Sequence[str], hydra_cfg: Any) -> list[str]:
    """Before a sweep starts, let its Hydra launcher and sweeper check their settings: a launcher or
    sweeper class with a ``check_config(cfg, overrides)`` classmethod (corral's submitit, Ray and
    Optuna shims have one) is given its composed ``hydra.launcher`` / ``hydra.sweeper`` node (from
    ``hydra_cfg``, :func:`hydra_config`) and the command line's job overrides, and raises
    :class:`ConfigError` for what would fail once jobs are launched (no SLURM on this machine,
    ``n_trials=0``, ``interval(1, 0.1)``). A sweeper with a ``search_ends(cfg, overrides)``
    (corral's Optuna sweeper) has the ends of its search space checked as job values, and with a
    ``check_job(job_cfg)`` each of those job configs checked by it too (a trial that could not give
    the sweeper its objective). Returns the lines of a class's ``ignored_settings(cfg)``: its
    settings the sweep would not read. When Hydra's config does not compose, the sweep goes on and
    each job reports its own config's errors."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.utils import get_class

    if hydra_cfg is None:
        return []
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    fixed = [str(o.input_line) for o in parsed if not o.is_sweep_override() and _composes_job(str(o.input_line))]
    job = [str(o.input_line) for o in parsed if not _is_hydra(str(o.input_line))]
    ignored: list[str] = []
    for part in ("launcher", "sweeper"):
        node = hydra_cfg.get(part)
        target = node.get("_target_") if node is not None else None
        try:
            cls = get_class(str(target)) if target else None
        except Exception:  # noqa: BLE001 - a plugin that does not import: Hydra reports it when it starts
            continue
        check = getattr(cls, "check_config", None)
        if callable(check):
            check(node, job)
        ends = getattr(cls, "search_ends", None)
        if callable(ends):
            _check_search_ends(ends(node, job), fixed, getattr(cls, "check_job", None))
        settings = getattr(cls, "ignored_settings", None)
        if callable(settings):
            ignored += list(settings(node))
    return ignored


def _check_search_ends(ends: dict[str, list[str]], fixed: Sequence[str],
                       check_job: Callable[[Any], None] | None = None) -> None:
    """Raise one-line :class:`ConfigError` when a value at an end of a search space (a sweeper's
    ``search_ends``: ``algo.clip_range=interval(-1, 0.3)`` gives -1 and 0.3) fails the job's checks:
    a setting that does not exist, a value of the wrong type or out of its range, or the sweeper's
    own ``check_job``. Each end is composed with the fixed overrides alone, so the error names the
    setting it comes from (:data:`MAX_VALUE_CHECKS` compositions at most)."""
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from corral.framework.compose import check_values

    checks = 0
    composed: list[tuple[str, Any]] = []
    for key, values in ends.items():
        for value in values:
            checks += 1
            if checks > MAX_VALUE_CHECKS:
                break
            where = f" (an end of the search space of {key})"
            try:
                job_cfg = compose(config_name=CONFIG_NAME, overrides=[*fixed, value])
                check_values(job_cfg)
            except (HydraException, OmegaConfBaseException) as exc:
                raise ConfigError(f"{hydra_message(exc)}{where}") from None
            except ConfigError as exc:
                raise ConfigError(f"{exc}{where}") from None
            composed.append((where, job_cfg))
    if check_job is None:
        return
    try:  # a fixed setting's own problem first, named without a searched value
        check_job(compose(config_name=CONFIG_NAME, overrides=list(fixed)))
    except (HydraException, OmegaConfBaseException):
        pass  # each end composed: what fails here is a value's problem, named below
    for where, job_cfg in composed:
        try:
            check_job(job_cfg)
        except ConfigError as exc:
            raise ConfigError(f"{exc}{where}") from None


def check_no_hydra_sweep(overrides: Sequence[str]) -> None:
    """Raise one-line :class:`ConfigError` for a sweep over one of Hydra's own settings
    (``hydra.job.chdir=true,false``), which Hydra cannot do; a search space written under
    ``hydra.sweeper.params`` on the command line is shown how to write it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        line = str(override.input_line)
        if not (override.is_hydra_override() and override.is_sweep_override()):  # what Hydra refuses
            continue
        key, value = line.split("=", 1)
        if key.lstrip("+~").startswith("hydra.sweeper.params."):
            setting = key.lstrip("+~").removeprefix("hydra.sweeper.params.")
            raise ConfigError(f"{line}: Hydra reads this as a sweep over its own settings; give the search space "
                              f"as {setting}={shlex.quote(value)} (or quote it: {shell_override(key, value)})")
        raise ConfigError(f"{line}: Hydra cannot sweep over its own settings (hydra.*); give one value")


def _is_hydra(override: str) -> bool:
    key = _key(override)
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def _parse(overrides: Sequence[str]) -> None:
    """Raise one-line :class:`ConfigError` for an override that does not parse (``a=[1``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(hydra_message(exc)) from None


def check_searchpath(overrides: Sequence[str]) -> None:
    """Raise a one-line :class:`ConfigError` for a ``hydra.searchpath`` entry that names nothing: a
    ``file://`` (or plain) directory that does not exist, a ``pkg://`` package that cannot be found
    (:func:`corral.framework.config.searchpath_entry_problem`, which checks the plugins' entries too).
    Hydra said so in a two-line Python warning and went on, and the options the user meant to add
    were then "not found" with no word of the path."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    for override in overrides:
        if not _is_searchpath(override) or "=" not in override or override.startswith("~"):
            continue
        try:
            (parsed,) = OverridesParser.create().parse_overrides([override])
            entries = parsed.value()
        except (HydraException, OmegaConfBaseException, ValueError):
            continue  # _parse says what does not parse
        for entry in entries if isinstance(entries, list) else [entries]:
            problem = searchpath_entry_problem(str(entry))
            if problem is None:
                continue
            if str(entry).startswith("pkg://"):
                raise ConfigError(f"hydra.searchpath: {problem}; give a package that holds config groups, or a "
                                  "directory as file:///abs/path")
            raise ConfigError(f"hydra.searchpath: {problem}; give the directory that holds your config groups "
                              "(e.g. file://$PWD/conf, with conf/experiment/*.yaml)")


def _is_searchpath(override: str) -> bool:
    return _key(override).startswith("hydra.searchpath")


def _composes_job(override: str) -> bool:
    """Whether ``override`` changes the job's config: any but Hydra's own settings, except the
    search path (a user's ``hydra.searchpath`` adds config options, e.g. an experiment of their own)."""
    return not _is_hydra(override) or _is_searchpath(override)


def _options_lister(loader: Any, overrides: Sequence[str]) -> Any:
    """``options_of(group)``: the options of a config group, in the search path that ``overrides`` give."""
    searchpath = [o for o in overrides if _is_searchpath(o)]
    if not searchpath:
        return loader.get_group_options
    return lambda group: loader.get_group_options(group, config_name=CONFIG_NAME, overrides=searchpath)


def _choices(override: str) -> Iterator[tuple[str, str]]:
    """``(group, option)`` for every option a group override names: one (``sampler=ray``), a list
    (``logger=[console,csv]``) or the values of a sweep (``sampler=local,ray``, ``choice(...)``,
    a sweep of lists). Nothing for a value override (``algo.learning_rate=...``), a deletion, or a
    sweep that cannot be listed (``glob(...)``, ``interval(...)``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides([override])[0]
    except HydraException:
        return  # does not parse: compose (or the sweeper) says so, naming the override
    if "." in parsed.key_or_group or parsed.is_delete():
        return
    if parsed.is_sweep_override():
        try:
            values = list(parsed.sweep_string_iterator())
        except (HydraException, ValueError):  # range(0,3,0): check_sweep_lists says what is wrong
            return
        for swept in values:
            yield from _choices(f"{parsed.key_or_group}={swept}")
        return
    value = parsed.value()
    for item in value if isinstance(value, list) else [value]:
        # A number, a boolean or null is never an option's name (Hydra itself would fail with a traceback):
        # it is named as the command line wrote it, so that a group's check reports it as a missing option.
        yield parsed.key_or_group, item if isinstance(item, str) else _as_written(item)


def _as_written(value: Any) -> str:
    """A parsed override value as Hydra's grammar writes it (``true``, ``null``, ``1.5``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_choices(overrides: Sequence[str], options_of: Any) -> None:
    """Raise :class:`ConfigError` for the first option named in ``overrides`` that its group does not
    have; ``options_of(group)`` lists a group's options (``[]``: not a config group)."""
    for override in overrides:
        for group, option in _choices(override):
            options = list(options_of(group))
            if options and option not in options:
                raise ConfigError(unknown_option_message(group, option, options, override))


def check_keys_given(overrides: Sequence[str]) -> None:
    """Raise a one-line :class:`ConfigError` for an override with nothing before its ``=`` (``=1``,
    ``+=1``): Hydra read it as an option of the primary config's group and listed its own internal
    config names."""
    for override in overrides:
        if "=" in override and not _key(override).strip():
            raise ConfigError(f"{override}: an override is key=value, and this one has no key before '='; name the "
                              "setting, e.g. seed=1 (`python train.py --help` lists the settings and options)")


def check_preset_fits(overrides: Sequence[str], cfg: Any, compose_job: Callable[[list[str]], Any]) -> None:
    """Raise one :class:`ConfigError` line for a preset with one of its components swapped
    (``experiment=sac_halfcheetah algo=ppo``) whose settings for that component the new option does not
    have (``algo.min_buffer_size``): the line names the preset, its settings and the option they are
    for, where each such setting was one line reading as if the command line had given it.
    ``compose_job(overrides)`` composes a job's config (run only on this error's path)."""
    from corral.framework.registry import KINDS

    presets = [o.split("=", 1)[1] for o in overrides if _key(o) == "experiment" and "=" in o and not o.startswith("~")]
    swapped = [o for o in overrides if "=" in o and not o.startswith(("+", "~")) and _key(o) in KINDS]
    if len(presets) != 1 or "," in presets[0] or not swapped:
        return
    given = given_keys(overrides)
    foreign: dict[str, list[str]] = {}
    for override in swapped:
        group = _key(override)
        node = cfg.get(group)
        fields = _option_fields(group, str(node.get("name"))) if hasattr(node, "get") else None
        if fields is None:
            continue
        keys = [f"{group}.{k}" for k in node.keys() if k not in fields | {"name"} and f"{group}.{k}" not in given]
        if keys:
            foreign[group] = keys
    if not foreign:
        return
    preset = presets[0]
    own = compose_job([f"experiment={preset}", *(o for o in overrides if _is_searchpath(o))])
    parts = [f"{', '.join(keys)} for its {group}={own[group].name}" for group, keys in foreign.items()]
    chosen = " ".join(o for o in swapped if _key(o) in foreign)
    dropped = " ".join(f"~{key}" for keys in foreign.values() for key in keys)
    raise ConfigError(f"experiment={preset} sets {'; '.join(parts)}, which {chosen} does not have: the preset is made "
                      f"for {' '.join(f'{g}={own[g].name}' for g in foreign)}; leave out {chosen}, drop those settings "
                      f"({dropped}), or use a preset made for it (`corral plugins` lists each option's settings)")


def check_episode_length_source(overrides: Sequence[str], cfg: Any) -> None:
    """Raise one :class:`ConfigError` line for ``env.max_episode_length`` given on the command line where
    a preset (not the command line) set the environment option's own length field to another value
    (``experiment=rl2_bandits env.max_episode_length=20``: the preset sets ``env.n_pulls=1``): the line
    names what the command line gave and where the other value came from, where the config's own check
    would name a value the user never typed. The field is the option config's ``episode_length_field``
    (:class:`~corral.meta.task_envs.TaskEnvConfig`); with the field not set, ``env.max_episode_length``
    sets the length, and with both given the config's own check names them."""
    from corral.framework.plugins import get_plugin_manager

    given = given_keys(overrides)
    env = cfg.get("env")
    if "env.max_episode_length" not in given or not hasattr(env, "get"):
        return
    entry = get_plugin_manager().registry.entries.get(("env", str(env.get("name"))))
    own = getattr(getattr(entry, "config", None), "episode_length_field", None)
    if own is None or f"env.{own}" in given:
        return
    value, length = env.get(own), env.get("max_episode_length")
    if value is None or length is None or int(value) == int(length):
        return
    presets = [o.split("=", 1)[1] for o in overrides if _key(o) == "experiment" and "=" in o and not o.startswith("~")]
    source = f"experiment={presets[0]}" if len(presets) == 1 else "the composed config (a preset)"
    what = getattr(getattr(entry, "config", None), "episode_length_what", "the episode length")
    raise ConfigError(f"env.max_episode_length={length}: {source} sets env.{own}={value}, which sets {what}; give "
                      f"env.{own}={length} instead of env.max_episode_length")


def check_group_additions(overrides: Sequence[str]) -> None:
    """Raise a one-line :class:`ConfigError` for an option added to a group (``+logger=[tensorboard]``)
    beside an override that chooses that group's options (``logger=[csv]``): Hydra keeps the chosen
    list and drops the addition without a word."""
    chosen = {_key(o): o for o in overrides if "=" in o and not o.startswith(("+", "~")) and "." not in _key(o)}
    for override in overrides:
        if (addition := _added_options(override)) is not None and addition[0] in chosen:
            group, added = addition
            given = chosen[group].split("=", 1)[1].strip()
            one_list = given.startswith("[") and given.endswith("]") and "[" not in given[1:]
            if one_list or not any(c in given for c in ",[]"):  # one list or one option, not a sweep
                names = [name.strip() for name in given.strip("[]").split(",")]
                fix = f"give them in one list: {group}=[{','.join(dict.fromkeys(filter(None, names + added)))}]"
            else:
                fix = f"add {','.join(added)} to each list {chosen[group]} gives"
            raise ConfigError(f"{override}: {chosen[group]} chooses the run's {group} options, and Hydra drops an "
                              f"option added beside it; {fix}")


def check_one_preset(overrides: Sequence[str]) -> None:
    """Raise a one-line :class:`ConfigError` for a list of presets (``experiment=[a,b]``, also as a value of
    a sweep): Hydra merges them in order, so each preset's settings silently replace those of the presets
    before it. A list of one preset is that preset."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in overrides:
        if _key(override) != "experiment" or "=" not in override or override.startswith("~"):
            continue
        try:
            parsed = parser.parse_overrides([override])[0]
            values: list[tuple[str | None, Any]]
            if parsed.is_sweep_override():
                values = [(swept, parser.parse_overrides([f"experiment={swept}"])[0].value())
                          for swept in parsed.sweep_string_iterator()]
            else:
                values = [(None, parsed.value())]
        except (HydraException, ValueError):
            continue  # _parse says what does not parse
        for swept, value in values:
            if isinstance(value, list) and len(value) > 1:
                where = "" if swept is None else f" (the sweep's value {swept})"
                names = [str(v) for v in value]
                raise ConfigError(
                    f"{override}: experiment takes one preset, and of a list each preset's settings would replace the "
                    f"ones before it in silence ({names[-1]}'s win){where}; give one preset (e.g. "
                    f"experiment={names[0]}), or put the settings you want from {' and '.join(names)} into one preset "
                    "file of your own (conf/experiment/<name>.yaml, added with hydra.searchpath=[file://$PWD/conf])")


def unknown_option_message(group: str, option: str, options: Sequence[str], override: str | None = None) -> str:
    """One line: the override, the option its group lacks, the group's options and where more come from."""
    where = ("Hydra plugin packages add more" if group.startswith("hydra/")
             else "a plugin package adds its own; `corral plugins` lists what is installed")
    head = f"{override}: " if override else ""
    if (note := failed_plugin_note(group, option)) is not None:  # a plugin that failed to load is why
        return f"{head}{group} has no option {option!r}: {note}; or choose one of {', '.join(options)}"
    return (f"{head}{group} has no option {option!r}; choose one of {', '.join(options)} ({where})")


def _missing_message(exc: BaseException, options_of: Any) -> str:
    """A config file that composition could not find, as :func:`unknown_option_message` when it is a
    group's option (a preset naming an option that is not there), else Hydra's own message."""
    missing = str(getattr(exc, "missing_cfg_file", "") or "")
    group, _, option = missing.rpartition("/")
    options = list(options_of(group)) if group else []
    if options and option not in options:
        return unknown_option_message(group, option, options)
    return hydra_message(exc)


def check_deletions(overrides: Sequence[str], compose_job: Callable[[list[str]], Any]) -> None:
    """Raise one-line :class:`ConfigError` for an override that deletes a setting (``~trainer.n_epochs``):
    corral fills a deleted setting back with its default, so the deletion would change nothing. Deleting
    a whole part stays (``~logger.csv`` runs without the CSV logger); a list or mapping setting
    (``~policy.hidden_sizes``, ``~env.kwargs``) is a setting like any other. A key that is not a setting
    of the chosen option (a preset's ``worker.backend`` after ``worker=vec``) is deleted for good: that
    is how a preset's settings for another option are dropped."""
    deletions = [o for o in overrides if o.startswith("~") and "." in _key(o) and not _is_hydra(o)]
    if not deletions:
        return
    from omegaconf import OmegaConf

    kept = compose_job([o for o in overrides if o not in deletions and _composes_job(o)])
    for override in deletions:
        key = _key(override)
        value = OmegaConf.select(kept, key, default=None, throw_on_missing=False)
        is_part = OmegaConf.is_dict(value) and "name" in value  # a chosen part (logger.csv) has its name
        if value is not None and not is_part and _is_option_setting(kept, key):
            raise ConfigError(f"{override}: a deleted setting is filled back with its default, so this changes "
                              f"nothing; give {key} a value instead ({key}=..., or {key}=null where it accepts null)")


def _option_fields(kind: str, name: str) -> set[str] | None:
    """The fields of the registered option ``kind=name`` (``worker=vec``); None for one corral does not
    know or that declares no config (its own checks name it)."""
    from corral.framework.plugins import get_plugin_manager

    entry = get_plugin_manager().registry.entries.get((kind, name))
    if entry is None or entry.config is None:
        return None
    return {f.name for f in dataclasses.fields(entry.config)}


def _is_option_setting(cfg: Any, key: str) -> bool:
    """Whether the dotted ``key`` (``worker.backend``, ``logger.csv.filename``) names a field of the
    option ``cfg`` chose for its group; True for a key outside the plugin groups (``seed``) and for an
    option corral does not know (its own checks name it)."""
    from corral.framework.registry import KINDS

    parts = key.split(".")
    if parts[0] not in KINDS:
        return True
    if parts[0] == "logger":
        kind, name, leaf = "logger", parts[1], parts[2] if len(parts) > 2 else None
    else:
        node = cfg.get(parts[0])
        kind, name, leaf = parts[0], str(node.get("name")) if hasattr(node, "get") else "", parts[1]
    fields = _option_fields(kind, name)
    return fields is None or leaf is None or leaf in fields


def check_bool_values(overrides: Sequence[str], cfg: Any) -> None:
    """Raise one-line :class:`ConfigError` for a true/false setting given another value
    (``normalize.obs=2``, ``normalize.obs=yes``): OmegaConf would read it as true or false in silence
    (any number but 0 is true). ``cfg`` is the composed config, which says which settings are true/false."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.nodes import BooleanNode

    parser = OverridesParser.create()
    for override in overrides:
        if "=" not in override or override.startswith("~") or not _composes_job(override):
            continue
        try:
            parsed = parser.parse_override(override)
        except HydraException:
            continue  # Hydra says what does not parse
        if parsed.is_sweep_override():
            continue  # each value is checked on its own (check_sweep_values)
        key = parsed.key_or_group
        parent_key, _, leaf = key.rpartition(".")
        try:
            parent = cfg if not parent_key else OmegaConf.select(cfg, parent_key, throw_on_missing=False)
            node = parent._get_node(leaf) if parent is not None and hasattr(parent, "_get_node") else None
        except Exception:  # noqa: BLE001 - a key this composition does not have: nothing to check
            node = None
        if not isinstance(node, BooleanNode):
            continue
        value = parsed.value()
        if isinstance(value, bool) or (value is None and node._is_optional()):
            continue
        if isinstance(value, str) and "${" in value:
            continue  # an interpolation: OmegaConf resolves it
        written = value if isinstance(value, str) else _as_written(value)
        raise ConfigError(true_false_message(key, written, read_as=bool(node._value())))


def true_false_message(key: str, written: str, read_as: bool | None = None) -> str:
    """The one line for a true/false setting given another value (``train.py`` and ``corral eval``);
    ``read_as``: what OmegaConf would have read it as, when known."""
    read = "" if read_as is None else f" (OmegaConf would read it as {'true' if read_as else 'false'} without a word)"
    return f"{key} must be true or false, got {written}{read}; give {key}=true or {key}=false"


def hydra_message(exc: BaseException) -> str:
    """Hydra's composition error as one paragraph: the override and the reason (``worker.n_envs=abc:
    Value 'abc' of type 'str' could not be converted to Integer``); multi-line lists (available
    options) are kept, Hydra's hint about HYDRA_FULL_ERROR is dropped."""
    text = str(exc).strip()
    lexer = "LexerNoViableAltException: "
    if text.startswith(lexer) and "\n" in text:  # the override, then a caret under the character it cannot read
        unread, caret = text[len(lexer):].split("\n", 2)[:2]
        column = caret.find("^") - len(lexer)
        if 0 <= column < len(unread):
            return (f"{unread}: Hydra's override syntax does not take {unread[column]!r} there (character "
                    f"{column + 1}); quote the value (key='...') or see "
                    "https://hydra.cc/docs/1.2/advanced/override_grammar/basic")
    if text.startswith("Could not append to config. An item is already at ") and "Either remove + prefix: " in text:
        # Hydra's three lines: what happened, then its two ways out, in one line
        head = text.split("\n", 1)[0].rstrip(".")
        plain = text.split("Either remove + prefix: ", 1)[1].split("\n", 1)[0].strip()
        return f"{head}; set it with {plain} (no '+'), or add or override it with '++{plain.strip(chr(39))}'"
    if text.startswith("Error parsing override ") and "\n" in text:
        # the override, the parser's reason, Hydra's link: one line
        first, *rest = [line.strip() for line in text.splitlines() if line.strip() and "HYDRA_FULL_ERROR" not in line]
        reason = "; ".join(line for line in rest if not line.startswith("See https://"))
        return (f"{first.removeprefix('Error parsing override ').strip(chr(39))}: Hydra cannot read this override "
                f"({reason}); an override is key=value "
                "(see https://hydra.cc/docs/1.2/advanced/override_grammar/basic)")
    if (group_line := added_group_message(text)) is not None:
        return group_line
    cause = exc.__cause__
    if (unknown := not_overridable(exc)) is not None:
        key, written = unknown
        reason = str(cause).strip().splitlines()[0] if cause is not None else f"no key {key}"
        if _is_hydra(key):
            return (f"{written}: Hydra's config has no {key} ({reason}); `python train.py --cfg hydra` shows "
                    "its settings (a launcher's or sweeper's come with choosing it, e.g. hydra/launcher=joblib)")
        return f"{written}: the config has no {key} ({reason}); to add a new key, write +{written}"
    if text.startswith("Error merging override ") and cause is not None:
        reason = str(getattr(cause, "msg", None) or cause).strip().splitlines()[0]
        return type_message(text.removeprefix("Error merging override "), reason)
    override = getattr(exc, "override", None)
    if override and str(override) not in text:  # a parse error: name the override that does not parse
        text = f"{override}: {text}"
    text = text.split("\nConfig search path:", 1)[0]  # Hydra's search path adds nothing for a user
    lines = [line for line in text.splitlines() if "HYDRA_FULL_ERROR" not in line]
    links = [line for line in lines if line.startswith("See https://")]  # the grammar's page: on the same line
    lines = [line for line in lines if line not in links]
    if links and lines:
        lines[0] += f" ({links[0].removeprefix('See ').removesuffix(' for details')})"
    if len(lines) == 1 and override and lines[0].startswith(f"{override}: "):
        return type_message(str(override), lines[0].removeprefix(f"{override}: "))
    return "\n".join(lines).strip()


_MULTIPLE_VALUES = re.compile(r"Multiple values for (\S+)\. To override a value use 'override \S+: (.*)'")
_FORCE_ADD = re.compile(r"force-add of config groups is not supported: '(\+\+(\S+?)=(.*))'")


def added_group_message(text: str) -> str | None:
    """The one line for Hydra's refusal of a group option given with ``+`` or ``++`` (``+experiment=x``:
    ``Multiple values for experiment. To override a value use 'override experiment: x'``, advice for a
    defaults list): a group that the run already has is chosen without the ``+``. None for another error."""
    head = text.strip().split("\n", 1)[0]
    if (found := _MULTIPLE_VALUES.match(head)) is not None:
        group, value = found.groups()
        return (f"+{group}={value}: {group} is a config group the run already has, so an option of it is chosen, not "
                f"added; write {group}={value}, without the +")
    if (found := _FORCE_ADD.match(head)) is not None:
        override, group, value = found.groups()
        return (f"{override}: {group} is a config group, and Hydra cannot force-add a group's option; write "
                f"{group}={value}, without the ++")
    return None


_NOT_CONVERTED = re.compile(r"Value '(.*)' of type '(\w+)' could not be converted to (Integer|Float)")
#: OmegaConf's words for a true/false setting given a word it does not read as one (``trainer.progress=maybe``).
_NOT_A_BOOL = re.compile(r"Value '(.*)' is not a valid bool \(type \w+\)")
#: OmegaConf's words for null given to a setting that must hold a value.
_NOT_OPTIONAL = re.compile(r"field '[^']*' is not Optional")
#: OmegaConf's words for a list setting given a scalar, and for a mapping setting given a scalar.
_NOT_A_LIST = re.compile(r"Invalid value assigned: \w+ is not a ListConfig, list or tuple\.?")
_NOT_A_MAPPING = re.compile(r"Cannot assign \w+ to Dict\[.*\]\.?")
#: ... and for a mapping given to a list setting, or a list to a mapping setting (the same words).
_MERGE_MISMATCH = "Cannot merge DictConfig with ListConfig"


def shape_message(override: str, reason: str) -> str | None:
    """``<override>: <key> takes a list, not 64; write it in brackets, e.g. <key>=[64]`` (or a mapping,
    in braces) for OmegaConf's ``Invalid value assigned: int is not a ListConfig, list or tuple`` and its
    kin; None for another reason."""
    key = _key(override)
    written = override.split("=", 1)[1] if "=" in override else ""
    given = written.strip()
    reason = reason.strip()
    mismatch = reason.rstrip(".") == _MERGE_MISMATCH
    if _NOT_A_LIST.fullmatch(reason) or (mismatch and given.startswith("{")):
        if given.startswith("{"):
            return f"{override}: {key} takes a list, not a mapping ({given}); write it in brackets, e.g. {key}=[...]"
        return f"{override}: {key} takes a list, not {given}; write it in brackets, e.g. {key}=[{given}]"
    if _NOT_A_MAPPING.fullmatch(reason) or (mismatch and given.startswith("[")):
        shown = f"a list ({given})" if given.startswith("[") else given
        return (f"{override}: {key} takes a mapping, not {shown}; write it in braces, quoted for the shell, e.g. "
                f"'{key}={{name: value}}'")
    return None


def type_message(override: str, reason: str) -> str:
    """``<override>: <reason>``, where OmegaConf's ``Value '1000.0' of type 'float' could not be
    converted to Integer`` becomes what the setting takes and, for a whole number written as a
    float (``trainer.batch_size=1e3``), how to write it (``write trainer.batch_size=1000``); null for a
    setting that must hold a value says so; a true/false setting given another word is
    :func:`true_false_message`'s line, as for a number there; a list or mapping setting given something
    else is :func:`shape_message`'s line."""
    key = _key(override)
    given = override.split("=", 1)[1] if "=" in override else None  # the value as the command line wrote it
    if _NOT_OPTIONAL.fullmatch(reason.strip()):
        return f"{override}: {key} cannot be null; give it a value, or leave it out for its default"
    if (word := _NOT_A_BOOL.fullmatch(reason.strip())) is not None:
        return true_false_message(key, word.group(1) if given is None else given)
    found = _NOT_CONVERTED.fullmatch(reason.strip())
    if found is None:
        return shape_message(override, reason) or f"{override}: {reason}"
    value, kind, target = found.groups()
    wanted = "a whole number" if target == "Integer" else "a number"
    if kind == "float":
        shown = value
    elif kind in ("ListConfig", "list"):
        shown = f"a list ({value})"
    elif kind in ("DictConfig", "dict"):
        shown = f"a mapping ({value})"
    else:
        shown = repr(value)
    written = value if given is None else given
    if shown == value and written != value:
        shown = f"{written} (read as {value})"
    hint = ""
    if kind == "float" and target == "Integer" and abs(float(value)) < 2**53 and float(value).is_integer():
        hint = f"; write {key}={int(float(value))}"
    return f"{override}: {key} takes {wanted}, not {shown}{hint}"


__all__ = ["MAX_JOB_CHECKS", "MAX_VALUE_CHECKS", "MULTIRUN_FLAGS", "INFO_VALUES", "MODE_FLAGS", "OTHER_CONFIG_FLAGS", "VALUE_FLAGS", "check_added_hydra_keys", "check_flags", "added_group_message", "check_choices", "check_bool_values", "check_keys_given", "check_one_preset", "check_deletions", "check_episode_length_source", "check_group_additions", "check_no_hydra_sweep", "check_output_dir", "check_plugin_names", "check_preset_fits", "check_sweep_jobs", "check_sweep_lists", "check_sweep_plugins", "check_sweep_values", "composition_error", "first_job_number", "hydra_config", "hydra_message", "no_addition_warnings", "not_overridable", "precheck", "repeated_key_warnings", "repeated_keys", "RUN_ONLY", "shape_message", "run_only_warnings", "SWEEP_ONLY", "split_flags", "sweep_only_warnings", "true_false_message", "type_message", "unknown_option_message"]
