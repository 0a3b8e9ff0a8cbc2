"""``trainer.resume=<dir>``: continue a run as the same run, with the config it was started with.

A resumed run is one run with one learning curve:

- ``python train.py trainer.resume=<run dir>`` (or the run's newest snapshot file) continues *in
  place*: the run's ``progress.csv``, TensorBoard events, ``corral.log`` and ``summary.json`` are
  appended to; Hydra's record of the resuming command goes to ``.hydra/resume-<time>/``.
- With another ``hydra.run.dir``, or from an older snapshot file, the run continues in the new
  directory as a *branch*: the original's history up to the snapshot (progress rows, TensorBoard
  events, log, the snapshot itself) is copied there first, and the original is left as it was.

Either way the rows of epochs after the snapshot are dropped before the run logs them again
(:meth:`corral.framework.logger.Logger.resume`), so every epoch appears exactly once.

What a resume may change: ``trainer.*`` (e.g. a larger ``trainer.n_epochs``), the loggers, the
sampler type and its options as long as ``sampler.n_workers`` stays the same (every sampler
returns the same episodes for the same seed, worker and number of workers), and
``normalize.update`` (``false`` freezes the normalisation statistics of the snapshot, ``true``
lets them update again; the snapshot holds the statistics, the resuming command says whether they
change). Any other override (``algo=vpg``, ``algo.learning_rate=...``, ``env.*``, ``worker.*``,
``normalize.obs``, ``seed``) is an error naming it. So is ``experiment=<preset>`` when a setting it
writes differs from the run's (its trainer settings too: a resume takes a change only as a key given
by itself, so the run's own values over its preset's are not replaced, nor the preset's dropped, in
silence); the run's own preset with the run's own settings goes on.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from corral.framework.errors import ConfigError, OutputError
from corral.framework.logger import RUN_LOG
from corral.framework.run_lock import LOCK_FILE, holder, in_use_message
from corral.framework.shell_words import hydra_override, shell_override, value_of

#: Overrides a resume applies: these groups (and their fields) may change.
ADJUSTABLE = ("trainer", "logger", "sampler", "hydra")
#: Single fields of other groups a resume may change: whether the normalisation statistics keep updating.
ADJUSTABLE_KEYS = ("normalize.update",)
#: What a branch leaves behind: these entries of the original run directory are not copied.
NOT_COPIED = ("snapshots", ".hydra", "summary.json", "multirun.yaml", LOCK_FILE)


@dataclass
class ResumePlan:
    """Where a resumed run continues: the snapshot it starts from and the directory it writes to."""

    snapshot: Path
    origin: Path | None  # the run directory the snapshot belongs to (None: a loose snapshot file)
    run_dir: Path | None  # where the resumed run writes (None: library use, no directory)

    @property
    def in_place(self) -> bool:
        """True when the run continues in its own directory."""
        return self.origin is not None and self.run_dir is not None and _same(self.origin, self.run_dir)


def resume_arg(argv: Sequence[str]) -> str | None:
    """The value of ``trainer.resume=...`` on a command line (None when absent or null)."""
    value = None
    for item in argv:
        key, sep, val = item.partition("=")
        if sep and key.lstrip("+~") == "trainer.resume":
            value = _text(val) or None
    return None if value in (None, "null", "None") else value


def _text(value: str) -> str:
    """The string a command line's override value stands for (:func:`value_of`: quotes and escapes
    taken off); a sweep, a number, null or an interpolation as written, less its outer quotes."""
    text = value_of(value)
    return value.strip("'\"") if text is None else text


def absolute_resume(argv: Sequence[str]) -> list[str]:
    """``argv`` with a relative ``trainer.resume=<path>`` made absolute, from the directory
    ``train.py`` was started in: the job may run elsewhere (``hydra.job.chdir=true`` runs it in its
    run directory), and the path must name the same run there. A sweep of values is left as it is."""
    out = []
    for item in argv:
        key, sep, value = item.partition("=")
        raw = value_of(value) if sep and key.lstrip("+~") == "trainer.resume" else None
        if raw not in (None, "", "null", "None") and not Path(raw).expanduser().is_absolute():
            item = hydra_override(key, Path(raw).expanduser().absolute())
        out.append(item)
    return out


def run_dir_of(snapshot: Path) -> Path | None:
    """The run directory of a snapshot file at ``<run>/snapshots/epoch_N.pt`` (None for another layout)."""
    parent = snapshot.resolve().parent
    return parent.parent if parent.name == "snapshots" else None


def is_latest(snapshot: Path) -> bool:
    """True when ``snapshot`` is its run's newest snapshot (the one a run directory resumes from)."""
    from corral.framework.trainer import find_snapshot

    origin = run_dir_of(snapshot)
    if origin is None:
        return False
    try:
        return _same(find_snapshot(origin), snapshot)
    except Exception:  # noqa: BLE001 - no readable pointer: not the latest
        return False


def in_place_overrides(argv: Sequence[str]) -> list[str]:
    """Extra Hydra overrides that make ``train.py trainer.resume=<dir>`` continue in ``<dir>``.

    Only when the command names no ``hydra.run.dir`` of its own, is not a multirun, and resumes
    from a run directory or from its newest snapshot. Hydra's record of this command then goes to
    ``<dir>/.hydra/resume-<UTC time>/`` so the original ``.hydra/`` stays as it was.
    """
    from corral.framework.trainer import find_snapshot

    source = resume_arg(argv)
    if source is None or any(a in ("-m", "--multirun") for a in argv):
        return []
    given = _given(argv)
    if "hydra.output_subdir" in given:
        return []
    try:
        snapshot = find_snapshot(source)
    except Exception:  # noqa: BLE001 - reported by the run itself, with the usual message
        return []
    origin = run_dir_of(snapshot)
    if origin is None or not (Path(source).is_dir() or is_latest(snapshot)):
        return []
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d_%H-%M-%S")
    subdir = f"hydra.output_subdir=.hydra/resume-{stamp}"  # the original .hydra/ stays as it was
    if "hydra.run.dir" in given:  # the user's own run directory: in place only if it is the run's
        return [subdir] if _same(Path(given["hydra.run.dir"]), origin) else []
    return [hydra_override("hydra.run.dir", origin), subdir]


def _given(argv: Sequence[str]) -> dict[str, str]:
    """The command line's ``key=value`` items by key (``+``/``~`` and quotes taken off)."""
    return {k.lstrip("+~"): _text(v) for k, _, v in (a.partition("=") for a in argv)}


def holds_run(path: Path) -> bool:
    """True when the directory ``path`` holds a run (its ``summary.json`` or ``snapshots/``), which a
    new run or a branch written there would overwrite."""
    return (path / "summary.json").is_file() or (path / "snapshots").is_dir()


def check_resume_source(argv: Sequence[str]) -> None:
    """Raise a one-line :class:`ConfigError` when ``trainer.resume=<path>`` names nothing, before
    Hydra makes a directory for the run (a sweep over several sources is left to its jobs)."""
    source = resume_arg(argv)
    if source is None or any(c in source for c in ",()$") or any(a in ("-m", "--multirun") for a in argv):
        return
    path = Path(source).expanduser().absolute()
    if not path.exists():
        raise ConfigError(f"trainer.resume={source}: {path} does not exist; give the run's directory (the one with "
                          "snapshots/) or a snapshot file")
    where = _given(argv).get("hydra.run.dir")
    run_dir = path if path.is_dir() else (run_dir_of(path) or path.parent)
    if run_dir.name == "snapshots":  # trainer.resume=<run>/snapshots
        run_dir = run_dir.parent
    in_place = not where or "${" in where or _same(Path(where).expanduser().absolute(), run_dir)
    if in_place and (pid := holder(run_dir)) is not None:
        raise ConfigError(f"trainer.resume={source}: {in_use_message(run_dir, pid)}")


def check_branch_dir(argv: Sequence[str]) -> None:
    """Raise a one-line :class:`ConfigError` when ``trainer.resume=<run> hydra.run.dir=<dir>`` would
    branch into a ``<dir>`` that holds another run: the branch's copied history would not replace
    that run's files, and the two runs' rows and snapshots would mix. Only for a ``hydra.run.dir``
    given as a plain path (one that names run-time values is new each time)."""
    from corral.framework.trainer import find_snapshot

    source = resume_arg(argv)
    where = _given(argv).get("hydra.run.dir")
    if source is None or not where or "${" in where or any(a in ("-m", "--multirun") for a in argv):
        return
    target = Path(where).expanduser().absolute()
    try:
        origin = run_dir_of(find_snapshot(source))
    except Exception:  # noqa: BLE001 - no snapshot there: the run reports it with the usual message
        return
    if (origin is not None and _same(origin, target)) or not holds_run(target):
        return
    raise ConfigError(f"hydra.run.dir={where}: {target} already holds a run, and a branch of {origin or source} "
                      "there would mix the two runs' progress.csv and snapshots; give the branch a new directory, "
                      f"or continue that run itself with {shell_override('trainer.resume', where)}")


def plan(source: str | os.PathLike, run_dir: str | os.PathLike | None) -> ResumePlan:
    """The :class:`ResumePlan` for ``trainer.resume=<source>`` writing to ``run_dir``."""
    from corral.framework.trainer import find_snapshot

    snapshot = find_snapshot(source)
    return ResumePlan(snapshot=snapshot, origin=run_dir_of(snapshot),
                      run_dir=Path(run_dir) if run_dir is not None else None)


def copy_history(resume: ResumePlan) -> list[Path]:
    """For a branch: copy the original run's files (progress rows, TensorBoard events, log, videos)
    and the snapshot resumed from into the new run directory; return what it copied. The loggers
    drop rows after the snapshot when the run starts (:meth:`Logger.resume`). A copy that fails (a
    full disk) removes what it had copied and raises one :class:`OutputError` line, so the same
    command can run again."""
    if resume.in_place or resume.origin is None or resume.run_dir is None:
        return []
    from corral.framework.snapshot import objects_path
    from corral.framework.trainer import BEST_POINTER

    dest = resume.run_dir
    dest.mkdir(parents=True, exist_ok=True)
    copied: list[Path] = []

    def copy(source: Path, target: Path) -> None:
        copied.append(target)
        if source.is_dir():
            shutil.copytree(source, target)
        elif source.is_file():
            shutil.copy2(source, target)

    try:
        for entry in resume.origin.iterdir():
            if entry.name not in NOT_COPIED and not (dest / entry.name).exists() and not _run_of_its_own(entry, dest):
                copy(entry, dest / entry.name)
        snapshots = dest / "snapshots"
        if not snapshots.exists():
            copied.append(snapshots)
        snapshots.mkdir(exist_ok=True)
        best = _best_as_of(resume.snapshot, BEST_POINTER)
        for snapshot in dict.fromkeys([resume.snapshot] + ([best] if best is not None else [])):
            copy(snapshot, snapshots / snapshot.name)
            objects = objects_path(snapshot)
            if objects.is_file():  # the snapshot's objects part travels with it
                copy(objects, snapshots / objects.name)
        (snapshots / "latest").write_text(resume.snapshot.name + "\n")
        if best is not None:
            (snapshots / BEST_POINTER).write_text(best.name + "\n")
    except OSError as exc:  # shutil.Error (copytree's list of failures) is one too
        _remove(copied)
        raise OutputError(f"could not copy the history of {resume.origin} into the branch {dest} "
                          f"({_copy_failure(exc, copied[-1] if copied else dest)}); make room there, or give the "
                          "branch a directory on another file system (hydra.run.dir=...), and start it again") from None
    return copied


def _best_as_of(snapshot: Path, pointer: str) -> Path | None:
    """The snapshot of the best evaluation up to ``snapshot`` (``trainer.keep_best``), when the run's
    ``snapshots/<pointer>`` names one no later than it: no evaluation between the two beat it. None
    when it names a later one (the best as of ``snapshot`` was then pruned or is unknown here) or none."""
    named = snapshot.parent / pointer
    try:
        best = snapshot.parent / named.read_text().strip() if named.is_file() else None
    except OSError:
        return None
    if best is None or not best.is_file() or not best.name.startswith("epoch_") or best.name > snapshot.name:
        return None
    return best


def _run_of_its_own(entry: Path, dest: Path) -> bool:
    """Whether ``entry`` of an original run's directory is not part of its history: the branch's own
    directory (or one it is in: ``hydra.run.dir=<run>/longer`` copied the branch into itself), or
    another run kept inside it (a directory holding a run: an earlier branch)."""
    if not entry.is_dir() or entry.is_symlink():
        return False
    return dest.resolve().is_relative_to(entry.resolve()) or holds_run(entry) or (entry / ".hydra").is_dir()


def _remove(paths: Sequence[Path]) -> None:
    """Remove ``paths`` (files or directory trees), last first."""
    for path in reversed(paths):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def drop_branch(resume: ResumePlan, copied: Sequence[Path]) -> bool:
    """Undo a branch that had nothing to do (its run had already reached the limit): remove the
    history :func:`copy_history` copied, and this job's own files (Hydra's ``.hydra/``, ``corral.log``, the
    run's lock, :mod:`corral.framework.run_lock`, which this process holds until it ends);
    the directory goes too when nothing else is left in it. True when it is gone."""
    if resume.in_place or resume.run_dir is None:
        return False
    _remove([*copied, resume.run_dir / ".hydra", resume.run_dir / RUN_LOG, resume.run_dir / LOCK_FILE])
    try:
        resume.run_dir.rmdir()  # only when empty: something of the user's stays
    except OSError:
        return False
    return True


def drop_session_record(run_dir: str | os.PathLike[str] | None) -> None:
    """Remove Hydra's record of this command (``.hydra/resume-<time>/``, :func:`in_place_overrides`)
    from a run resumed in place that had nothing to do: the run is left exactly as it was."""
    from hydra.core.hydra_config import HydraConfig

    try:
        subdir = HydraConfig.get().output_subdir
    except ValueError:  # not under Hydra (library use): nothing was written
        return
    if run_dir is not None and subdir and str(subdir).startswith(".hydra/resume-"):
        shutil.rmtree(Path(run_dir) / str(subdir), ignore_errors=True)


def _copy_failure(exc: OSError, target: Path) -> str:
    """What stopped the copy to ``target``, in a few words: ``File too large: <file>``; for copytree's
    ``shutil.Error``, its first failure."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        _, failed, why = exc.args[0][0]
        reason = re.sub(r"^\[Errno \d+\] ", "", str(why)).split(": ")[0]
        return f"{reason}: {failed}"
    return f"{exc.strerror or exc}: {target}"


#: What :func:`snapshot_config` has read of each snapshot file (by its path, time, size and trust): its config
#: and its record of where the options came from. ``train.py`` reads the run's config when it checks the
#: command line and again when the run starts, in one process.
_READ_CONFIGS: dict[tuple[str, int, int, bool], tuple[Any, Any]] = {}


def _stored(source: str | os.PathLike, trust: bool) -> tuple[Any, Any]:
    """The ``config`` and the :data:`~corral.framework.snapshot.SOURCES_KEY` entries of the data part of
    the snapshot of ``source`` (a run directory or snapshot file), read once while the file is unchanged."""
    from corral.framework.snapshot import SOURCES_KEY, load_snapshot
    from corral.framework.trainer import find_snapshot

    snapshot = find_snapshot(source)
    try:
        stat = snapshot.stat()
        key: tuple[str, int, int, bool] | None = (str(snapshot.resolve()), stat.st_mtime_ns, stat.st_size, trust)
    except OSError:  # load_snapshot says what is wrong with it
        key = None
    if key is not None and key in _READ_CONFIGS:
        return _READ_CONFIGS[key]
    state = load_snapshot(snapshot, trust=trust, objects=False)  # the data part alone
    stored = (state.get("config") or None, state.get(SOURCES_KEY) or None)
    if key is not None:
        _READ_CONFIGS[key] = stored
    return stored


def snapshot_config(source: str | os.PathLike, trust: bool = False) -> DictConfig | None:
    """The resolved config stored in the snapshot of a run directory or snapshot file (None for a
    snapshot without one). For a resumed run it is the original run's config, not what the
    resuming command composed (which is what the run's ``.hydra/config.yaml`` holds). The snapshot
    is read as data only unless ``trust`` (see :func:`corral.framework.snapshot.load_snapshot`); a
    snapshot file read once is not read again while it is unchanged."""
    config = _stored(source, trust)[0]
    return OmegaConf.create(config) if config else None


def snapshot_sources(source: str | os.PathLike, trust: bool = False) -> dict[str, dict[str, str]]:
    """The snapshot's record of which plugin (distribution, version) registered each option of its run
    (:meth:`corral.framework.registry.Registry.option_sources`), by place in the config (``env``,
    ``logger.csv``); empty for a snapshot written before corral kept one."""
    sources = _stored(source, trust)[1]
    return {str(k): dict(v) for k, v in sources.items() if isinstance(v, dict)} if isinstance(sources, dict) else {}


def check_run_options(cfg: Any, run: str | os.PathLike, sources: Mapping[str, Mapping[str, str]], doing: str
                      ) -> None:
    """Raise a one-line :class:`ConfigError` when an option the run in ``run`` chose (its config ``cfg``:
    ``env=...``, ``worker=...``, a logger) is not registered in this process: it names the run, the
    option, the plugin and package that provided it when the run's ``sources`` record says
    (:func:`snapshot_sources`), and what to do to ``doing`` (``evaluate``, ``resume``) it: install the
    package again, or let ``CORRAL_DISABLE_PLUGINS`` / ``CORRAL_PLUGINS`` load it."""
    from corral.framework.plugins import get_plugin_manager
    from corral.framework.registry import chosen_options

    manager = get_plugin_manager()
    for path, kind, name in chosen_options(cfg):
        if (kind, name) not in manager.registry.entries:
            record = sources.get(path)
            if record is not None and (record.get("kind"), record.get("option")) != (kind, name):
                record = None  # the record is of another option (a config changed since)
            raise ConfigError(_missing_option(manager, Path(run), kind, name, record, doing))


def _missing_option(manager: Any, run: Path, kind: str, name: str, record: Mapping[str, str] | None, doing: str
                    ) -> str:
    """The line of :func:`check_run_options` for the option ``kind=name`` that no loaded plugin registers."""
    head = f"the run in {run} was made with {kind}={name}"
    to = f"to {doing} the run"
    if record is None:  # a run from before corral recorded where its options came from
        available = ", ".join(manager.registry.names(kind)) or "none"
        left_out = _left_out(manager.skipped.values())
        if left_out:
            return (f"{head}, which no plugin loaded here registers (available: {available}), and {left_out}; if one "
                    f"of them provides {kind}={name}, let it load {to}")
        return (f"{head}, which no installed plugin registers (available: {available}); install the plugin package "
                f"that provides it {to} (the run does not record which; `corral plugins` lists what is installed)")
    plugin, dist, version = record.get("plugin", "?"), record.get("distribution", "?"), record.get("version", "?")
    if dist == "corral":
        return (f"{head}, an option of corral {version} that this corral does not have; install corral=={version} "
                f"{to}")
    if dist == "inline":
        return f"{head}, which {plugin} registered inline (register_object) in the program that ran it; register it again {to}"
    who = f"{head}, from the plugin {plugin} ({dist} {version})"
    if plugin in manager.skipped:
        var = manager.skipped[plugin][1]
        value = os.environ.get(var, "")
        if var == "CORRAL_DISABLE_PLUGINS":
            return f"{who}, which {var}={value} disables here; unset {var} (or take {plugin} out of it) {to}"
        return f"{who}, which {var}={value} leaves out here; add {plugin} to {var} (or unset it) {to}"
    failed = next((f for f in manager.registry.failed if f.source.plugin == plugin), None)
    if failed is not None:
        return (f"{who}, which failed to load here ({failed.error}); fix it, or install it again "
                f"(pip install --force-reinstall {dist}) {to}")
    installed = next((s for s in manager.sources.values() if s.plugin == plugin or s.distribution == dist), None)
    if installed is not None and installed.version == version:
        return (f"{who}, which is loaded here but does not register it now; see what it registers (`corral "
                f"plugins`) and what decides that {to}")
    if installed is not None:
        return (f"{who}, but {installed.distribution} {installed.version} installed here does not register it; "
                f"install the version the run was made with (pip install {dist}=={version}) {to}")
    return f"{who}, which is not installed here; install it again (pip install {dist}) {to}"


def _left_out(skipped: Any) -> str:
    """``CORRAL_DISABLE_PLUGINS=a disables the installed plugin a (corral-a 1.0)`` for the plugins that
    the variables left out (``(Source, variable)`` pairs); empty when none."""
    by_var: dict[str, list[str]] = {}
    for source, var in skipped:
        by_var.setdefault(var, []).append(f"{source.plugin} ({source.distribution} {source.version})")
    verb = {"CORRAL_DISABLE_PLUGINS": "disables", "CORRAL_PLUGINS": "leaves out"}
    return " and ".join(f"{var}={os.environ.get(var, '')} {verb.get(var, 'leaves out')} the installed plugin"
                        f"{'s' if len(names) > 1 else ''} {', '.join(names)}" for var, names in by_var.items())


def resumed_config(cfg: DictConfig, overrides: Sequence[str] | None) -> DictConfig:
    """The config a run of ``cfg`` trains with: with ``trainer.resume=<dir>``, the config the run was
    started with and this command's adjustable ``overrides`` (:func:`check_overrides`, which raises
    :class:`ConfigError` for any other); ``cfg`` itself without ``trainer.resume`` or for a snapshot
    that holds no config. ``overrides=None`` (no command line: library use) takes as overrides what
    ``cfg`` changes in the run's config (:func:`changed_settings`). Raises
    :class:`~corral.framework.errors.SnapshotError` for a snapshot that cannot be found or read."""
    resume = cfg.trainer.get("resume")
    if not resume:
        return cfg
    trust = bool(cfg.trainer.get("trust_snapshot", False))
    old = snapshot_config(resume, trust=trust)
    if old is None:
        return cfg
    if overrides is None:
        overrides = changed_settings(old, cfg)
    resolved = check_overrides(old, cfg, overrides)
    check_run_options(resolved, _run_of(resume), snapshot_sources(resume, trust=trust), "resume")
    with open_dict(resolved):
        resolved.trainer.resume = str(resume)
    return resolved


def changed_settings(old: DictConfig, new: DictConfig) -> list[str]:
    """The overrides that a config ``new`` given outside Hydra stands for, against the run's config
    ``old``: ``algo=vpg`` for a group whose option differs, ``trainer.n_epochs=4`` for each other setting
    both configs have with another value (a setting the run's config lacks came with a newer corral, and
    ``trainer.resume`` / ``trainer.trust_snapshot`` say how to resume, not what the run is). Library use
    (``corral.framework.entry.run(cfg)`` with ``trainer.resume``) has no command line: what the caller
    changed in the config is what :func:`check_overrides` applies or refuses, not dropped in silence."""
    before, after = _settings(old), _settings(new)
    moved = sorted(k for k in before if k.endswith(".name") and k.count(".") == 1 and k in after
                   and before[k] != after[k] and isinstance(old.get(k.split(".", 1)[0]), DictConfig))
    groups = {k.split(".", 1)[0] for k in moved}
    items = [f"{k.split('.', 1)[0]}={_written(after[k])}" for k in moved]
    for key in sorted(before.keys() & after.keys()):
        if key.split(".", 1)[0] in groups or key in ("trainer.resume", "trainer.trust_snapshot"):
            continue
        if before[key] != after[key]:
            items.append(f"{key}={_written(after[key])}")
    return items


def _settings(cfg: DictConfig) -> dict[str, Any]:
    """Every setting of ``cfg`` by its dotted key, resolved where it can be (a list or an empty
    mapping is one setting)."""
    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - an interpolation only Hydra resolves (${hydra:...}): as written
        plain = OmegaConf.to_container(cfg, resolve=False)
    created = OmegaConf.create(plain)
    return _leaves(created) if isinstance(created, DictConfig) else {}


def _run_of(source: str | os.PathLike) -> Path:
    """The run directory of ``trainer.resume=<source>`` (the snapshot file itself for a loose one)."""
    from corral.framework.trainer import find_snapshot

    snapshot = find_snapshot(source)
    return run_dir_of(snapshot) or snapshot


def check_overrides(old: DictConfig, new: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """The config a resumed run trains with: the original ``old`` with this command's adjustable
    overrides applied (``trainer.*``, ``logger``, the sampler, ``normalize.update``); any other
    override that would change the run is a :class:`ConfigError` naming it."""
    refused: list[str] = []
    explicit = {item.partition("=")[0].lstrip("+~") for item in overrides}
    result = old.copy()
    with open_dict(result):
        for item in overrides:
            key = item.partition("=")[0].lstrip("+~")
            group = key.split(".", 1)[0].split("/", 1)[0]
            if key == "trainer.resume" or group == "hydra":
                continue
            if group == "trainer":
                if "." in key:
                    OmegaConf.update(result, key, OmegaConf.select(new, key), force_add=True)
                continue
            if group == "logger":
                result.logger = new.logger
                continue
            if group == "sampler":
                continue  # below, as a whole
            if key in ADJUSTABLE_KEYS and _has(old, key) and isinstance(OmegaConf.select(new, key), bool):
                OmegaConf.update(result, key, OmegaConf.select(new, key))
                continue
            change = _preset_change(old, new, item, explicit) if key == "experiment" else _change(old, new, key)
            if change is not None:
                refused.append(f"{item} ({change})")
        if any(k.split(".", 1)[0] == "sampler" for k in explicit):
            sampler = new.sampler.copy()
            if "sampler.n_workers" not in explicit and "n_workers" in old.sampler:
                with open_dict(sampler):
                    sampler.n_workers = old.sampler.n_workers
            if sampler.get("n_workers") != old.sampler.get("n_workers"):
                refused.append(f"sampler.n_workers={sampler.get('n_workers')} (the run has "
                               f"{old.sampler.get('n_workers')}; the episodes depend on it)")
            result.sampler = sampler
    if refused:
        raise ConfigError(
            "trainer.resume continues a run with the config it was started with, and these overrides "
            f"would change it: {'; '.join(refused)}. A resume may change trainer.*, the loggers, the "
            "sampler (with the same sampler.n_workers) and normalize.update (freeze or thaw the statistics); drop "
            "the others, or start a new run without trainer.resume"
        )
    return result


def finished_message(run_dir: Any, reason: str, epoch: int, env_steps: int, branch: Any = None) -> str:
    """What resuming a run that already reached its limit says; ``branch``: the directory of a
    branch that was therefore not made."""
    key, _, value = reason.partition("=")
    made = f", so the branch {branch} was not made" if branch is not None else ""
    into = f" {shell_override('hydra.run.dir', branch)}" if branch is not None else ""
    head = (f"corral: the run in {run_dir} already finished: {reason} reached at epoch {epoch} "
            f"({env_steps:,} env steps); nothing to do{made}.")
    if key == "stop_at_eval_return":  # its last evaluation reached the target: no limit to double
        return (f"{head} To train on, resume without that target, e.g. {shell_override('trainer.resume', run_dir)}"
                f"{into} trainer.stop_at_eval_return=null (or a higher one)")
    # twice the limit, or twice where the run is when a resume gave a limit below that (n_epochs=1 at epoch 3)
    reached = {"n_epochs": epoch, "max_env_steps": env_steps}.get(key, 0)
    larger = f"trainer.{key}={max(int(value), reached) * 2}" if value.isdigit() else f"a larger trainer.{key}"
    other = "trainer.max_env_steps" if key == "n_epochs" else "trainer.n_epochs"
    return (f"{head} To train longer, resume with a larger limit, "
            f"e.g. {shell_override('trainer.resume', run_dir)}{into} {larger} (and {other} if it would stop the run first)")


def say(message: str) -> None:
    """Print a ``corral:`` line on stderr (after ``[job N] `` in a multirun)."""
    from corral.framework.logger import job_prefix

    lead = "\n" if message.startswith("\n") else ""
    print(lead + job_prefix() + message[len(lead):], file=sys.stderr, flush=True)


def _change(old: DictConfig, new: DictConfig, key: str) -> str | None:
    """How an override of ``key`` would change the run (None: it would not): a group compares by
    option name, a field, a mapping or a list by its whole value."""
    if "." not in key and isinstance(OmegaConf.select(old, key, default=None), DictConfig):
        before, after = _plain(old, f"{key}.name"), _plain(new, f"{key}.name")  # a group: its option
    else:  # a field, a mapping (env.kwargs={...}) or a list: by its whole value, as its leaf keys would be
        before, after = _plain(old, key), _plain(new, key)
    return None if before == after else f"the run has {key}={_written(before)}"


def _preset_change(old: DictConfig, new: DictConfig, item: str, explicit: set[str]) -> str | None:
    """How ``experiment=<preset>`` would change the run (None: it would not): every setting the preset
    file writes (its options, ``override /env: bandits``, and its keys, ``trainer.batch_size: 2048``)
    that this command does not give itself is compared with the run's, trainer settings included. A
    resume takes a change only as a key given by itself, so the run's own values
    (``trainer.batch_size=200`` over its preset's) are not replaced in silence."""
    preset = _text(item.partition("=")[2])
    if preset in ("", "null", "None"):
        return None
    settings = _preset_settings(preset)
    if settings is None:
        return (f"corral cannot read the preset experiment/{preset} here to compare it with the run; leave "
                f"experiment={preset} out (the run keeps its own config) and give the settings to change by themselves")
    changes: list[tuple[str, Any, Any]] = []
    for key, value in settings.items():
        if any(key == g or key.startswith(g + ".") for g in explicit):
            continue  # the command's own key decides it (and is checked by itself)
        group = isinstance(OmegaConf.select(old, key, default=None), DictConfig)
        before = _plain(old, f"{key}.name" if group else key)
        after = value if group else _plain(new, key)
        if before != after:
            changes.append((key, after, before))
    moved = {k for k, _, _ in changes if "." not in k and isinstance(OmegaConf.select(old, k, default=None), DictConfig)}
    changes = [c for c in changes if c[0].split(".", 1)[0] not in moved or c[0] in moved]  # the option, not its fields
    if not changes:
        return None
    said = [f"{k}={_written(after)} where the run has {_written(before)}" for k, after, before in changes]
    one_by_one = [f"{k}={_written(after)}" for k, after, _ in changes
                  if ("." in k and k.split(".", 1)[0] in ADJUSTABLE) or k in ADJUSTABLE_KEYS]
    shown = ", ".join(said[:6]) + (f" and {len(said) - 6} more" if len(said) > 6 else "")
    give = f", e.g. {' '.join(one_by_one[:6])}" if one_by_one else ""
    return f"it sets {shown}; a resume takes a change only as a key given by itself{give}"


def _preset_settings(preset: str) -> dict[str, Any] | None:
    """What the preset file ``experiment/<preset>`` writes: its group options (``algo``: ``ppo``) and
    its keys by dotted path (``trainer.batch_size``: 2048), from Hydra's config search path (a
    plugin's presets included); None when it finds none there (one on a ``hydra.searchpath`` given on
    the command line: that path is not part of this search)."""
    from hydra import initialize_config_module
    from hydra.core.default_element import GroupDefault
    from hydra.core.global_hydra import GlobalHydra

    from corral.framework.config import CONFIG_MODULE

    def read() -> Any:
        return GlobalHydra.instance().config_loader().repository.load_config(f"experiment/{preset}")  # type: ignore[attr-defined]

    if GlobalHydra.instance().is_initialized():
        loaded = read()
    else:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            loaded = read()
    if loaded is None:
        return None
    settings: dict[str, Any] = {}
    for default in loaded.defaults_list or []:
        if isinstance(default, GroupDefault) and default.group and isinstance(default.value, str):
            settings[default.group.lstrip("/").replace("/", ".")] = default.value
    package = str((loaded.header or {}).get("package") or "_global_")
    prefix = "" if package == "_global_" else package.replace("_global_.", "") + "."
    settings.update({prefix + k: v for k, v in _leaves(loaded.config).items() if k})
    return settings


def _leaves(cfg: DictConfig) -> dict[str, Any]:
    """Every leaf of ``cfg`` (unresolved) by its dotted key; a list or an empty mapping is one leaf."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        else:
            out[prefix] = node

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return out


def _written(value: Any) -> str:
    """``value`` as an override writes it: ``null``, ``{max_episode_steps: 10}``, ``[64, 64]``, ``3``."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_written(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_written(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _has(cfg: DictConfig, key: str) -> bool:
    """True when ``cfg`` has a value at the dotted ``key`` (a run made before the field existed has none)."""
    return OmegaConf.select(cfg, key, default=None) is not None


def _plain(cfg: DictConfig, key: str) -> Any:
    node = OmegaConf.select(cfg, key, default=None)
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def _same(a: Path, b: Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


__all__ = ["ResumePlan", "absolute_resume", "changed_settings", "check_branch_dir", "check_run_options", "check_resume_source", "check_overrides", "copy_history", "drop_branch", "drop_session_record", "finished_message", "holds_run", "in_place_overrides", "plan",
           "resume_arg", "resumed_config", "run_dir_of", "snapshot_config", "snapshot_sources"]
