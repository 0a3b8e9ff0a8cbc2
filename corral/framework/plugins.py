"""The plugin manager: built-in plugins, then entry points of group ``corral``, each isolated.

A plugin that fails to import or to register is unregistered (its registrations dropped) and
reported in one warning naming its distribution, version and error. Environment variables:

- ``CORRAL_PLUGINS=a,b``: load only these entry points / distributions (built-ins always load).
- ``CORRAL_DISABLE_PLUGINS=a,b``: skip these entry points / distributions.
- ``CORRAL_STRICT_PLUGINS=1``: re-raise plugin failures instead of warning.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import sys
import traceback
import warnings
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any, Callable

import pluggy

from corral.framework import hookspecs
from corral.framework.errors import ComponentError, CorralError, CorralWarning, PluginError, PluginHookError
from corral.framework.registry import KINDS, Clash, DuplicateRegistration, FailedPlugin, Registration, Registry, Source

ENTRY_POINT_GROUP = "corral"

#: The built-in plugin modules, registered exactly like third-party ones.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "corral.plugins.trainers.default",
    "corral.plugins.samplers.local",
    "corral.plugins.samplers.multiprocessing",
    "corral.plugins.samplers.ray",
    "corral.plugins.samplers.action_server",
    "corral.plugins.samplers.alternating",
    "corral.plugins.workers.default",
    "corral.plugins.workers.vec",
    "corral.plugins.workers.vector",
    "corral.plugins.workers.fragment",
    "corral.plugins.workers.rl2",
    "corral.plugins.workers.pearl",
    "corral.plugins.policies.mlp",
    "corral.plugins.policies.gru",
    "corral.plugins.policies.tanh_gaussian",
    "corral.plugins.policies.qnet",
    "corral.plugins.policies.pearl",
    "corral.plugins.algos.vpg",
    "corral.plugins.algos.ppo",
    "corral.plugins.algos.rl2",
    "corral.plugins.algos.sac",
    "corral.plugins.algos.dqn",
    "corral.plugins.algos.trpo",
    "corral.plugins.algos.pearl",
    "corral.plugins.envs.gym",
    "corral.plugins.envs.cartpole",
    "corral.plugins.envs.acrobot",
    "corral.plugins.envs.pendulum",
    "corral.plugins.envs.mountaincar_continuous",
    "corral.plugins.envs.halfcheetah",
    "corral.plugins.envs.cpu_heavy",
    "corral.plugins.envs.bandits",
    "corral.plugins.envs.point_nav",
    "corral.plugins.envs.half_cheetah_vel",
    "corral.plugins.envs.half_cheetah_dir",
    "corral.plugins.loggers.console",
    "corral.plugins.loggers.csv",
    "corral.plugins.loggers.tensorboard",
    "corral.plugins.loggers.wandb",
    "corral.plugins.loggers.mlflow",
    "corral.plugins.optuna_pruning",
    "corral.plugins.normalizers.running",
    "corral.plugins.validation",
)

class PluginWarning(CorralWarning):
    """A plugin failed to load or register and was skipped, or one of its options clashed with another's."""


class PluginManager:
    """Loads plugins and holds the registry and the hook relay."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("corral")
        self.pm.add_hookspecs(hookspecs)
        self.registry = Registry()
        self.sources: dict[str, Source] = {}
        #: What :meth:`load` found wrong in ``CORRAL_PLUGINS`` / ``CORRAL_DISABLE_PLUGINS``: a name no
        #: installed plugin has (one message per variable; each also given as a :class:`PluginWarning`).
        self.unknown_names: list[str] = []
        #: The installed plugins that :meth:`load` left out, by plugin (entry-point) name: their source
        #: and the variable that left them out (``CORRAL_DISABLE_PLUGINS`` or ``CORRAL_PLUGINS``).
        self.skipped: dict[str, tuple[Source, str]] = {}
        #: The lines about plugins' config search-path entries that name nothing already said
        #: (:func:`corral.framework.config.report_searchpath_problems`): each is said once per process.
        self.searchpath_reported: set[str] = set()

    @property
    def hook(self) -> Any:
        """The pluggy hook relay (``manager.hook.corral_epoch_end(...)``)."""
        return self.pm.hook

    # ------------------------------------------------------------------ loading
    def load(self) -> None:
        """Register the built-ins, then every allowed entry point."""
        version = _version("corral")
        for module_name in BUILTIN_PLUGINS:
            self._load_one(Source(module_name, "corral", version), functools.partial(importlib.import_module, module_name))
        only = _env_list("CORRAL_PLUGINS")
        disabled = _env_list("CORRAL_DISABLE_PLUGINS")
        installed: dict[str, set[str]] = {}  # distribution -> its names (its own and its entry points')
        for ep in _entry_points():
            owner = getattr(ep, "dist", None)
            dist = owner.name if owner is not None else "unknown"
            names = {_normalize(ep.name), _normalize(dist)}
            installed.setdefault(dist, set()).update(names)
            ver = owner.version if owner is not None else "?"
            if only is not None and not names & only:
                self.skipped[ep.name] = (Source(ep.name, dist, ver), "CORRAL_PLUGINS")
                continue
            if disabled and names & disabled:
                self.skipped[ep.name] = (Source(ep.name, dist, ver), "CORRAL_DISABLE_PLUGINS")
                continue
            self._load_one(Source(ep.name, dist, ver), ep.load)
        self.unknown_names = _warn_unknown_names(installed, CORRAL_PLUGINS=only, CORRAL_DISABLE_PLUGINS=disabled)

    def register_object(self, plugin: Any, source: Source | str | None = None) -> None:
        """Register an already-imported plugin object (tests, notebooks) with full isolation.

        ``source`` names it: a :class:`Source`, or a plugin name (distribution ``"inline"``);
        by default the object's ``__name__`` or class name.
        """
        if not isinstance(source, Source):
            name = source or getattr(plugin, "__name__", None) or type(plugin).__name__
            source = Source(str(name), "inline", "-")
        self._load_one(source, lambda: plugin)

    def _load_one(self, source: Source, loader: Callable[[], Any]) -> None:
        plugin = None
        registered = False  # whether this call registered the plugin with pluggy (a failure undoes only that)
        added: list[tuple[str, str]] = []
        asked: list[tuple[str, str]] = []  # every option the plugin asked for, kept or not
        try:
            plugin = loader()
            _check_not_loaded(self, source, plugin)
            try:
                self.pm.register(plugin, name=source.plugin)
            except pluggy.PluginValidationError as exc:
                raise PluginError(_validation_message(exc)) from exc
            registered = True
            self.sources[source.plugin] = source
            _check_hook_names(self.pm, plugin)
            _check_hooks_marked(self.pm, plugin)

            def register(kind: str, name: str, factory: Any, config: type | None = None, help: str = "") -> None:
                asked.append((str(kind), str(name)))
                if not help:
                    doc = (getattr(factory, "__doc__", None) or "").strip()
                    help_ = doc.splitlines()[0] if doc else ""
                else:
                    help_ = help
                try:
                    self.registry.add(Registration(kind, name, factory, config, help_, source))
                except DuplicateRegistration as clash:
                    if strict_plugins():
                        raise
                    # Only the clashing option is dropped: the plugin's other options still load.
                    self.registry.clashes.append(clash.clash)
                    warnings.warn(clash.clash.message(), PluginWarning, stacklevel=2)
                    return
                added.append((kind, name))

            for impl in self.pm.hook.corral_register.get_hookimpls():
                if impl.plugin is plugin:
                    returned = impl.function(register=register)
                    if returned is not None:
                        raise PluginError(f"corral_register returned {_short_repr(returned)}, which corral does not "
                                          f"use; {_UNUSED_RESULT['corral_register']}")
        # SystemExit too: a plugin that calls sys.exit() while imported must not end the run in silence.
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - isolation is the point
            for key in added:
                self.registry.entries.pop(key, None)
            if registered:
                self.pm.unregister(plugin)
                self.sources.pop(source.plugin, None)
            # One line whatever the exception's text holds (pluggy's and OmegaConf's span several).
            what = _one_line(exc).replace(f": {source}: ", ": ", 1)  # a registry error names the source already
            if strict_plugins():
                raise PluginError(f"corral plugin from {source} failed to load: {what} (CORRAL_STRICT_PLUGINS is set, "
                                  "so the run stops)") from exc
            message = f"corral plugin from {source} failed to load and was skipped: {what}"
            self.registry.failed.append(FailedPlugin(source, what, traceback.format_exc(), tuple(asked)))
            # Its entry-point name, unless another plugin loaded under it (that name would turn both off).
            disable = source.distribution if self.pm.get_plugin(source.plugin) is not None else source.plugin
            warnings.warn(message + f". Disable it with CORRAL_DISABLE_PLUGINS={disable}", PluginWarning, stacklevel=2)

    def unregister(self, plugin_name: str) -> None:
        """Remove a plugin and everything it registered."""
        plugin = self.pm.get_plugin(plugin_name)
        if plugin is not None:
            self.pm.unregister(plugin)
        for key, reg in list(self.registry.entries.items()):
            if reg.source.plugin == plugin_name:
                del self.registry.entries[key]
        self.sources.pop(plugin_name, None)


def _warn_unknown_names(installed: dict[str, set[str]], **variables: set[str] | None) -> list[str]:
    """One :class:`PluginWarning` for each variable (``CORRAL_PLUGINS=...``) that names a plugin no
    installed distribution has: a typo there would otherwise load (or keep) other plugins than meant.
    Returns the messages."""
    known = set().union(*installed.values()) if installed else set()
    messages = []
    for var, names in variables.items():
        unknown = sorted((names or set()) - known)
        if unknown:
            have = ", ".join(sorted(installed)) or "none"
            messages.append(f"{var} names {', '.join(unknown)}, but no installed corral plugin has that name (an "
                            f"entry point's or its distribution's; installed: {have}); check the spelling")
            warnings.warn(messages[-1], PluginWarning, stacklevel=3)
    return messages


def strict_plugins() -> bool:
    """Whether ``CORRAL_STRICT_PLUGINS`` is set: a plugin problem stops the run instead of a warning."""
    return os.environ.get("CORRAL_STRICT_PLUGINS", "").strip().lower() not in ("", "0", "false", "no", "off")


def _check_hooks_marked(pm: pluggy.PluginManager, plugin: Any) -> None:
    """A function named like a corral hook but without ``@hookimpl`` is never called: an error. So is a
    plugin that implements no hook at all (it would be loaded and do nothing, without a word)."""
    hooks = sorted(name for name in dir(hookspecs) if name.startswith("corral_"))
    unmarked = [name for name in hooks if callable(getattr(plugin, name, None))
                and not hasattr(getattr(plugin, name), "corral_impl")]
    if unmarked:
        raise PluginError(
            f"{', '.join(unmarked)} {'is' if len(unmarked) == 1 else 'are'} not decorated with @corral.hookimpl, so "
            f"corral never calls {'it' if len(unmarked) == 1 else 'them'} and the plugin registers nothing; add "
            "`from corral import hookimpl` and put `@hookimpl` above each hook function"
        )
    if not pm.get_hookcallers(plugin):
        raise PluginError(
            f"implements no corral hook, so it registers nothing; decorate its hook functions with @corral.hookimpl "
            f"(corral's hooks are {', '.join(hooks)})"
        )


def _check_hook_names(pm: pluggy.PluginManager, plugin: Any) -> None:
    """A ``@hookimpl`` whose name is not a corral hook (a typo) is an error, not silently ignored."""
    unknown = sorted(caller.name for caller in pm.get_hookcallers(plugin) or [] if caller.spec is None)
    if unknown:
        known = sorted(name for name in dir(hookspecs) if name.startswith("corral_"))
        raise PluginError(f"unknown hook(s) {', '.join(unknown)}; corral's hooks are {', '.join(known)} (a misspelt "
                          f"name, or a plugin written for another version of corral: {_corral_version()} is "
                          "installed)")


#: What to do instead of returning a value from a hook whose return value corral does not use.
_UNUSED_RESULT: dict[str, str] = {
    "corral_register": "call register(kind, name, factory, config=..., help=...) for each component instead, "
                       "and return nothing",
    "corral_validate_config": "to reject the config, raise corral.ConfigError('<what to change>') instead; "
                              "to accept it, return nothing",
    "corral_epoch_end": "to add statistics, set them in the stats dict it is given, and return nothing",
}

#: The longest error text a plugin's warning line quotes (pluggy's can list every registered plugin).
MAX_ERROR_CHARS = 500


def _one_line(exc: BaseException) -> str:
    """``TypeName: message`` of ``exc`` on one line, at most :data:`MAX_ERROR_CHARS` characters."""
    what = " ".join(f"{type(exc).__name__}: {exc}".split())
    return what if len(what) <= MAX_ERROR_CHARS else what[:MAX_ERROR_CHARS - 3] + "..."


def _short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)``, shortened to ``limit`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_not_loaded(manager: PluginManager, source: Source, plugin: Any) -> None:
    """A plugin whose entry-point name another plugin already loaded under, or whose module another of
    its entry points already loaded, is an error that names both (pluggy's own error lists every plugin)."""
    other = manager.pm.get_plugin(source.plugin)
    if other is not None:
        first = manager.sources.get(source.plugin)
        who = f"{first.distribution} {first.version}" if first is not None else "another plugin"
        raise PluginError(
            f"its entry point is named {source.plugin!r}, as is one of {who}, which loaded first, so this one is not "
            f"loaded. Plugin author: give the entry point a name of its own; to use this plugin instead, disable the "
            f"other: CORRAL_DISABLE_PLUGINS={first.distribution if first is not None else source.plugin}")
    if manager.pm.is_registered(plugin):
        name = manager.pm.get_name(plugin)
        module = getattr(plugin, "__name__", type(plugin).__name__)
        raise PluginError(
            f"it names {module}, which its entry point {name!r} already loaded; the plugin works as {name!r}. "
            "Plugin author: keep one entry point per plugin module")


def _validation_message(exc: pluggy.PluginValidationError) -> str:
    """pluggy's complaint about a hook implementation (an argument the hook does not pass, a misused
    wrapper), on one line, and what it usually means: a plugin written for another corral version."""
    text = " ".join(str(exc).split())
    match = re.search(r"for hook '(\w+)'.*?Argument\(s\) \{(.*?)\} are declared in the hookimpl", text)
    spec = getattr(hookspecs, match.group(1), None) if match else None
    if match and spec is not None:
        passed = ", ".join(p for p in inspect.signature(spec).parameters)
        extra = ", ".join(sorted(a.strip().strip("'\"") for a in match.group(2).split(",")))
        return (f"its {match.group(1)} takes {extra}, which corral does not pass (it passes {passed}): a plugin "
                f"written for another version of corral ({_corral_version()} is installed); update the plugin, or "
                f"remove {'it' if ',' not in extra else 'them'} from its hook function")
    return text


def _corral_version() -> str:
    return f"corral {_version('corral')}"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _normalize(name: str) -> str:
    """PEP 503 normal form, so ``corral_foo``, ``Corral-Foo`` and ``corral-foo`` all match."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _env_list(var: str) -> set[str] | None:
    value = os.environ.get(var)
    if value is None:
        return None
    return {_normalize(x.strip()) for x in value.split(",") if x.strip()}


_MANAGER: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, loaded on first use."""
    global _MANAGER
    if _MANAGER is None:
        manager = PluginManager()
        _MANAGER = manager
        try:
            manager.load()
        except BaseException:
            _MANAGER = None
            raise
    return _MANAGER


def get_registry() -> Registry:
    """The registry of the process-wide plugin manager."""
    return get_plugin_manager().registry


def call_hook(caller: Any, **kwargs: Any) -> Any:
    """``caller(**kwargs)``, a pluggy hook call (``manager.hook.corral_run_start``): the list of the
    implementations' results that are not None, in the order pluggy calls them. An exception that
    an implementation raises, other than a corral error (whose message already says what to change),
    becomes one :class:`~corral.framework.errors.PluginHookError` line naming the plugin, the hook and
    the exception, with the traceback from the plugin's own code. An exception with a
    ``summary_status`` (Optuna's pruning: ``"pruned"``) is a hook stopping the run on purpose, and
    passes as it is. A value returned from a hook whose result corral does not use (``return False``
    from ``corral_validate_config``, meant to reject the config) is one such line too
    (:func:`unused_result_error`), not ignored."""
    get_impls = getattr(caller, "get_hookimpls", None)
    impls = get_impls() if callable(get_impls) else None
    if impls is None or any(impl.hookwrapper or getattr(impl, "wrapper", False) for impl in impls):
        try:
            return caller(**kwargs)
        except CorralError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's own failure, named
            if getattr(exc, "summary_status", None):  # a stop on purpose that names the run's status (a pruned trial)
                raise
            raise _hook_error(caller, exc) from exc
    results: list[Any] = []
    _call_each(caller, kwargs, lambda _plugin, result: results.append(result) if result is not None else None)
    return results


def call_hook_each(caller: Any, **kwargs: Any) -> list[tuple[str, Any]]:
    """Like :func:`call_hook`, but ``(plugin name, result)`` of each implementation, in the order pluggy
    calls them (a None result left out, as pluggy does), to say which plugin returned what. Hook
    wrappers are not called (no corral hook needs one)."""
    results: list[tuple[str, Any]] = []

    def keep(plugin: str, result: Any) -> None:
        if result is not None:
            results.append((plugin, result))

    _call_each(caller, kwargs, keep)
    return results


def call_hook_checked(caller: Any, check: Callable[[str | None], None], **kwargs: Any) -> None:
    """Like :func:`call_hook`, but ``check(plugin name)`` runs right after each implementation returns,
    in the order pluggy calls them, so that what one left wrong (a statistic of ``corral_epoch_end``
    that is not a number) is named with its plugin before the next one, or anything else, sees it.
    ``check`` raises (a corral error, e.g. :func:`hook_result_error`'s) to stop. A hook with a wrapper
    among its implementations, or a relay that is not pluggy's, is called whole, then ``check(None)``."""
    get_impls = getattr(caller, "get_hookimpls", None)
    impls = get_impls() if callable(get_impls) else None
    if impls is None or any(impl.hookwrapper or getattr(impl, "wrapper", False) for impl in impls):
        call_hook(caller, **kwargs)
        check(None)
        return
    _call_each(caller, kwargs, lambda plugin, _result: check(plugin))


def _call_each(caller: Any, kwargs: dict[str, Any], after: Callable[[str, Any], None]) -> None:
    """Call each implementation of the pluggy hook ``caller`` (but wrappers) with ``kwargs``, as pluggy
    would (the last registered first), and ``after(plugin name, result)`` once each returns; a
    plugin's own exception is one :class:`PluginHookError` line (:func:`call_hook`)."""
    try:
        for impl in reversed(caller.get_hookimpls()):  # pluggy calls the last registered first
            if impl.hookwrapper or getattr(impl, "wrapper", False):
                continue
            result = impl.function(*[kwargs[name] for name in impl.argnames])
            if result is not None and not _result_used(caller):
                raise unused_result_error(caller, impl.plugin_name, result)
            after(impl.plugin_name, result)
    except CorralError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's own failure, named
        if getattr(exc, "summary_status", None):
            raise
        raise _hook_error(caller, exc) from exc


def _result_used(caller: Any) -> bool:
    """Whether corral uses what implementations of the hook ``caller`` return: its spec in
    :mod:`corral.framework.hookspecs` is annotated with a return type other than None."""
    spec = getattr(hookspecs, str(getattr(caller, "name", "")), None)
    if spec is None:
        return True  # not one of corral's hooks: nothing to say
    return inspect.signature(spec).return_annotation not in (None, "None", inspect.Signature.empty)


def unused_result_error(caller: Any, plugin: str, result: Any) -> PluginHookError:
    """The one line for an implementation of the hook ``caller``, by the plugin ``plugin``, that returned
    ``result`` although corral does not use that hook's result (it would be ignored without a word)."""
    hook = str(getattr(caller, "name", "a hook"))
    advice = _UNUSED_RESULT.get(hook, "return nothing (None)")
    return hook_result_error(caller, plugin, f"returned {_short_repr(result)}",
                             f"corral does not use what {hook} returns, so the run stopped; {advice}")


def _raising_plugin(caller: Any, exc: BaseException) -> tuple[str | None, TracebackType | None]:
    """The plugin whose implementation of the hook ``caller`` raised ``exc`` (the one whose frame is the
    deepest on the traceback) and the traceback from that frame on; ``(None, None)`` when none is on it."""
    get_impls = getattr(caller, "get_hookimpls", None)
    impls = {impl.function.__code__: impl.plugin_name for impl in (get_impls() if get_impls else [])
             if hasattr(impl.function, "__code__")}
    name, start, tb = None, None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in impls:
            name, start = impls[tb.tb_frame.f_code], tb
        tb = tb.tb_next
    return name, start


def _exception_line(exc: BaseException) -> str:
    """``TypeName: first line of its message`` (at most 500 characters; OmegaConf adds full_key and
    object_type lines), or the type's name alone."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:500] if text else type(exc).__name__


def _hook_error(caller: Any, exc: Exception) -> PluginHookError:
    """The PluginHookError of ``exc``, raised in an implementation of the hook ``caller``: the plugin is
    the one whose implementation's frame is the deepest on the traceback."""
    hook = str(getattr(caller, "name", "a hook"))
    name, start = _raising_plugin(caller, exc)
    summary = _exception_line(exc)
    shown = "".join(traceback.format_exception(type(exc), exc, start)) if start is not None else None
    if name is None:
        return PluginHookError(f"a plugin's {hook} raised {summary}", plugin="?", hook=hook, plugin_traceback=shown)
    return PluginHookError(_hook_blame(name, f"raised {summary} in {hook}"), plugin=name, hook=hook,
                           plugin_traceback=shown)


def _hook_blame(name: str, what: str) -> str:
    """``plugin <name> (<dist> <version>) <what>; fix the plugin, or run without it: CORRAL_DISABLE_PLUGINS=<name>``,
    or for one of corral's own plugins ``corral's own plugin <name> <what>: a bug in corral; please report it``."""
    manager = _MANAGER
    source = manager.sources.get(name) if manager is not None else None
    if source is not None and source.distribution == "corral":
        return f"corral's own plugin {name} {what}: a bug in corral; please report it"
    who = f"{name} ({source.distribution} {source.version})" if source is not None else name
    return f"plugin {who} {what}; fix the plugin, or run without it: CORRAL_DISABLE_PLUGINS={name}"


def hook_result_error(caller: Any, plugin: str | None, what: str, why: str = "") -> PluginHookError:
    """The one line for what an implementation of the hook ``caller`` left wrong without raising
    (found by :func:`call_hook_checked`'s check), worded as for a hook that raised: the plugin,
    ``what`` it did (``set the statistic x to 'a' (type str)``), the hook, ``why`` that is wrong and
    what happened then, and how to go on. ``plugin`` None: not known."""
    hook = str(getattr(caller, "name", "a hook"))
    because = f": {why}" if why else ""
    if plugin is None:
        return PluginHookError(f"a plugin's {hook} {what}{because}", plugin="?", hook=hook)
    return PluginHookError(_hook_blame(plugin, f"{what} in {hook}{because}"), plugin=plugin, hook=hook)


def call_run_summary(caller: Any, *, log_dir: Path, summary: dict[str, Any]) -> PluginHookError | None:
    """Call the ``corral_run_summary`` hook ``caller`` for a run whose ``summary.json`` in ``log_dir``
    holds ``summary``, once the run's closing line is out. An implementation that raises (a corral error
    too: the run is over either way) does not change what the run was: it comes back (not raised) as one
    :class:`PluginHookError` line that says how the run ended and where its summary is, names the plugin
    and where it raised, and says how to go on. None when every implementation returned.

    ``train.py`` prints the line as the run's error when the run completed (exit status 2: the run's
    data is whole, but what the plugin does with it, an upload, a notice, did not happen, and a script
    that checks the exit status learns of it), and as a warning when the run stopped on an error of
    its own (that error is the run's)."""
    try:
        caller(log_dir=log_dir, summary=summary)
    except Exception as exc:  # noqa: BLE001 - reported by the caller, after the run's own lines
        hook = str(getattr(caller, "name", "corral_run_summary"))
        name, start = _raising_plugin(caller, exc)
        where = f" (at {_frame_location(start, _plugin_root(name))})" if name is not None else ""
        status = str(summary.get("status"))
        ended = {"completed": "completed", "failed": "failed"}.get(status, f"was {status}")  # "was interrupted"
        head = f"the run {ended} and its summary is {Path(log_dir) / 'summary.json'}, but"
        what = f"raised {_exception_line(exc)} in {hook}{where}"
        if name is None:
            return PluginHookError(f"{head} a plugin's {what}", plugin="?", hook=hook)
        return PluginHookError(f"{head} {_hook_blame(name, what)}", plugin=name, hook=hook)
    return None


# ------------------------------------------------------------------ options missing because a plugin failed
def failed_plugin_note(group: str, option: str, manager: PluginManager | None = None) -> str | None:
    """Why ``group=option`` may be missing when a plugin that failed to load is to blame, for the line
    about an option its group lacks: the plugin that asked to register it and why it failed, or,
    when none did (a plugin whose import failed registers nothing), every third-party plugin that
    failed, since one of them may provide it. None when no plugin failed (or none is loaded yet)."""
    manager = manager or _MANAGER
    if manager is None or group.startswith("hydra/"):
        return None
    failed = [f for f in manager.registry.failed if f.source.distribution != "corral"]
    owner = next((f for f in failed if (group, option) in f.options), None)
    if owner is not None:
        return (f"it comes from the plugin {_failed_name(owner)}, which failed to load here ({owner.error}); fix "
                f"the plugin, or install a version that loads (pip install --upgrade {owner.source.distribution})")
    if not failed:
        return None
    many = len(failed) > 1
    names = ", ".join(_failed_name(f) for f in failed)
    return (f"the installed plugin{'s' if many else ''} {names} failed to load here, so {'their' if many else 'its'} "
            f"options are missing (`corral plugins` says why); if {group}={option} is one of them, fix the plugin")


def _failed_name(failed: FailedPlugin) -> str:
    return f"{failed.source.plugin} ({failed.source.distribution} {failed.source.version})"


# ------------------------------------------------------------------ components that fail to build
def component_error(registration: Registration, exc: BaseException, manager: PluginManager | None = None
                    ) -> ComponentError:
    """The one line for the option ``registration`` (``env=foo``) whose building raised ``exc``, an
    exception of its own (not a corral error): the option, the plugin that registered it, the
    exception and where it raised (the deepest frame in the plugin's own package, else the deepest);
    for one of corral's own options it is a bug in corral. Raise it ``from exc``."""
    source = registration.source
    option = f"{registration.kind}={registration.name}"
    root = _plugin_root(source.plugin, manager)
    where = _frame_location(exc.__traceback__, root)
    raised = f"building it raised {_exception_line(exc)}" + (f" (at {where})" if where else "")
    if source.distribution == "corral":
        message = f"{option} (corral's own): {raised}: a bug in corral; please report it"
    else:
        origin = ("registered inline" if source.distribution == "inline"
                  else f"from {source.distribution} {source.version}")
        message = (f"{option} (plugin {source.plugin} {origin}): {raised}; fix the plugin, or choose another "
                   f"{registration.kind}")
    return ComponentError(message, kind=registration.kind, name=registration.name, plugin=source.plugin)


def _plugin_root(plugin_name: str, manager: PluginManager | None = None) -> str | None:
    """The directory of the top-level package of the plugin ``plugin_name`` (its module's file for a
    top-level module); None when it cannot be told (an object registered inline, an unknown plugin)."""
    manager = manager or _MANAGER
    plugin = manager.pm.get_plugin(plugin_name) if manager is not None else None
    if plugin is None:
        return None
    module_name = plugin.__name__ if isinstance(plugin, type(sys)) else getattr(type(plugin), "__module__", "")
    top = sys.modules.get(str(module_name).split(".")[0])
    file = getattr(top, "__file__", None)
    if not file:
        return None
    return os.path.dirname(os.path.abspath(file)) if os.path.basename(file) == "__init__.py" else os.path.abspath(file)


def _frame_location(tb: TracebackType | None, root: str | None) -> str | None:
    """``file:line`` of the deepest frame of ``tb`` in ``root`` (a package's directory or a module's
    file), or of the deepest frame when none is there (or ``root`` is None); None without a traceback."""
    frames = traceback.extract_tb(tb) if tb is not None else []
    if not frames:
        return None
    if root is not None:
        inside = [f for f in frames if os.path.abspath(f.filename) == root
                  or os.path.abspath(f.filename).startswith(root.rstrip(os.sep) + os.sep)]
        if inside:
            return f"{inside[-1].filename}:{inside[-1].lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}"


def reset_plugin_manager() -> None:
    """Forget the loaded plugins (the next use loads them again). For tests."""
    global _MANAGER
    _MANAGER = None


__all__ = [
    "strict_plugins",
    "BUILTIN_PLUGINS",
    "KINDS",
    "Clash",
    "PluginManager",
    "PluginWarning",
    "Registration",
    "Registry",
    "Source",
    "FailedPlugin",
    "call_hook",
    "call_hook_checked",
    "call_hook_each",
    "call_run_summary",
    "component_error",
    "failed_plugin_note",
    "hook_result_error",
    "unused_result_error",
    "get_plugin_manager",
    "get_registry",
    "reset_plugin_manager",
]
