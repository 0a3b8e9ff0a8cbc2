"""Valid ranges and choices of config fields, declared next to the field and checked at composition.

A plugin's config dataclass declares what each numeric or enumerated field accepts in the field's
metadata, with :func:`check`::

    from dataclasses import dataclass, field
    from corral import check

    @dataclass
    class MyAlgoConfig:
        learning_rate: float = field(default=3e-4, metadata=check(gt=0, help="Adam step size"))
        discount: float = field(default=0.99, metadata=check(ge=0, le=1, help="discount factor"))
        mode: str = field(default="mean", metadata=check(choices=("mean", "sum"), help="reduction"))
        hidden_sizes: list[int] = field(default_factory=lambda: [64], metadata=check(ge=1, help="widths"))

When a run is composed, corral checks every value of every chosen option against these
declarations (:func:`check_values`) and rejects a key that is not a field of the option
(:func:`unknown_key_message`), before anything is built: ``corral: error: algo.learning_rate must
be > 0, got -1.0``. ``None`` is accepted for an ``Optional`` field; a list is checked item by item.

A field that only matters under a sibling's value declares it with ``applies_if``; set by the user
away from its default while that does not hold, it is named in one warning line rather than
silently ignored (:func:`ignored_values`)::

    video_every: int = field(default=0, metadata=check(ge=0, applies_if=("eval_every", ">", 0), help="..."))

``corral: warning: trainer.video_every=2 has no effect while trainer.eval_every=0: it applies only with
trainer.eval_every > 0; set that, or leave trainer.video_every at its default (0)``.

A condition may name another group's setting by its dotted key, read from the run's whole composed
config: ``("worker.context_reward", "==", "sparse_reward")``; ``worker.name`` is the group's choice
(``("worker.name", "not in", ("vec", "fragment"))``, said as ``worker=vec``); where the options are those
whose class has a trait, :class:`OptionsWith` names the trait instead of the names, so an installed
plugin's option counts as a built-in one does (``env.task_seed``: ``OptionsWith("sets_tasks", ...)``,
the trial-running workers). A setting the run does not
have (``worker=default`` has no ``context_reward``) holds no value, so no condition on it holds. A key
that names no setting (a typo) is caught when a run with the option is composed
(:func:`condition_problems`, part of :func:`composed_problems`), as a sibling that is not a field is.
``corral plugins`` shows the declarations, and the contract kit checks that a plugin's defaults
satisfy its own (:func:`check_defaults`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Mapping

from corral.framework.errors import ConfigError

#: The metadata key under which :func:`check` stores its :class:`Check`.
CHECK_KEY = "check"


@dataclass(frozen=True)
class Check:
    """What one config field accepts: numeric bounds, a set of choices, or a regular expression.

    Bounds apply to numbers (and to each item of a list of numbers); a number must also be finite
    unless ``finite=False``. ``choices`` lists the accepted values; ``pattern`` is a regular
    expression a string must match in full (``describe`` says what it means to a user).
    """

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    choices: tuple[Any, ...] | None = None
    pattern: str | None = None
    describe_pattern: str | None = None
    finite: bool = True
    gt_field: str | None = None
    ge_field: str | None = None
    lt_field: str | None = None
    le_field: str | None = None
    applies_if: tuple[tuple[str, str, Any], ...] = ()
    ignored_because: str = ""

    def relations(self) -> list[tuple[str, str]]:
        """``(operator, other field)`` pairs: this field compared with a sibling field's value."""
        return [(op, name) for op, name in ((">", self.gt_field), (">=", self.ge_field), ("<", self.lt_field),
                                            ("<=", self.le_field)) if name is not None]

    def describe(self) -> str:
        """The accepted values in words: ``> 0``, ``>= 0 and <= 1``, ``one of 'spawn', 'fork'``."""
        parts = [f"{op} {_num(bound)}" for op, bound in
                 ((">", self.gt), (">=", self.ge), ("<", self.lt), ("<=", self.le)) if bound is not None]
        if self.choices is not None:
            parts.append("one of " + ", ".join(repr(c) for c in self.choices))
        if self.pattern is not None:
            parts.append(self.describe_pattern or f"matching {self.pattern!r}")
        parts += [f"{op} {name}" for op, name in self.relations()]
        return " and ".join(parts) if parts else ("any finite number" if self.finite else "any number")

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not accepted (``"must be > 0"``), or None when it is."""
        if self.choices is not None and value not in self.choices:
            return "must be " + self.describe()
        if self.pattern is not None and not (isinstance(value, str) and re.fullmatch(self.pattern, value)):
            return "must be " + self.describe()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if self.choices is None and self.pattern is None and _has_bounds(self):
                return "must be a number " + self.describe()
            return None
        if self.finite and not math.isfinite(value):
            return "must be a finite number" + ("" if not _has_bounds(self) else " " + self.describe())
        if ((self.gt is not None and not value > self.gt) or (self.ge is not None and not value >= self.ge)
                or (self.lt is not None and not value < self.lt) or (self.le is not None and not value <= self.le)):
            return "must be " + self.describe()
        return None


@dataclass(frozen=True)
class OptionsWith:
    """The value of a ``("<group>.name", "not in", ...)`` condition given by a trait rather than by names:
    the group's options whose class (a registered factory's ``component_class``, else the factory) sets
    ``attribute`` to a true value. The registry at hand decides which those are, so a plugin's option with
    the trait counts as a built-in one does (``OptionsWith("sets_tasks", "the workers that run trials")``:
    every trial-running worker, ``worker=rl2`` and ``worker=pearl`` among them). ``words`` names them where
    no registry is at hand."""

    attribute: str
    words: str

    def names(self, kind: str, registry: Any) -> tuple[str, ...]:
        """The names of the options of ``kind`` in ``registry`` that have the trait, in the registry's order."""
        return tuple(reg.name for reg in registry if reg.kind == kind
                     and getattr(getattr(reg.factory, "component_class", reg.factory), self.attribute, False))


def check(*, gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
          choices: Iterable[Any] | None = None, pattern: str | None = None, describe: str | None = None,
          finite: bool = True, gt_field: str | None = None, ge_field: str | None = None,
          lt_field: str | None = None, le_field: str | None = None,
          applies_if: tuple[str, str, Any] | tuple[tuple[str, str, Any], ...] = (), ignored_because: str = "",
          help: str = "") -> dict[str, Any]:
    """Field metadata declaring what a config field accepts (and its help line).

    ``field(default=3e-4, metadata=check(gt=0, help="Adam step size"))``. ``gt``/``ge``/``lt``/``le``
    bound a number (each item of a list of numbers); ``choices`` lists the accepted values;
    ``pattern`` is a regular expression a string must match in full, ``describe`` says in words
    what it accepts. ``gt_field``/``ge_field``/``lt_field``/``le_field`` compare the value with
    another field of the same config (``min_buffer_size: ... check(ge=1, le_field="buffer_size")``;
    skipped while either is None). ``applies_if`` says when the field has any effect: a condition
    ``(field, operator, value)`` with operator ``==``, ``!=``, ``>`` or ``not in`` (a tuple of values,
    none of which it is; for a group's choice, ``worker.name``, an :class:`OptionsWith`: none of the
    options with a trait), or a tuple of conditions of which any one is enough; a value other than the
    field's default while none holds is named by :func:`ignored_values`, with ``ignored_because`` (why
    it then has no effect) in the line. The field is a sibling (``eval_every``), or another group's
    setting by its dotted key, read from the run's whole config (``trainer.eval_every``: an algorithm
    setting that only the trainer's evaluation reads; ``worker.name``: the worker chosen). A run whose
    chosen option lacks that setting (``worker=default`` has no ``context_reward``) does not satisfy
    the condition. With no argument but ``help`` it declares "any finite number".
    """
    conditions = (applies_if,) if applies_if and isinstance(applies_if[0], str) else tuple(applies_if)
    for condition in conditions:
        if len(condition) != 3 or condition[1] not in _APPLIES_OPS:
            raise ValueError(f"applies_if conditions are (field, one of {', '.join(_APPLIES_OPS)}, value), "
                             f"got {condition!r}")
        if not isinstance(condition[0], str) or not _CONDITION_KEY.fullmatch(condition[0]):
            raise ValueError(f"an applies_if condition names a sibling field (eval_every) or another group's setting "
                             f"by its dotted key (trainer.eval_every), got {condition[0]!r}")
        if condition[1] == "not in" and not isinstance(condition[2], (tuple, list, frozenset, set, OptionsWith)):
            raise ValueError(f"an applies_if condition with 'not in' takes a tuple of values, got {condition!r}")
        if isinstance(condition[2], OptionsWith) and not (condition[1] == "not in" and _is_choice(condition[0])):
            raise ValueError(f"an applies_if condition on OptionsWith is ('<group>.name', 'not in', OptionsWith(...)), "
                             f"got {condition!r}")
    conditions = tuple((key, op, tuple(value) if op == "not in" and not isinstance(value, OptionsWith) else value)
                       for key, op, value in conditions)
    spec = Check(gt=gt, ge=ge, lt=lt, le=le, choices=tuple(choices) if choices is not None else None,
                 pattern=pattern, describe_pattern=describe, finite=finite, gt_field=gt_field, ge_field=ge_field,
                 lt_field=lt_field, le_field=le_field, applies_if=conditions,  # type: ignore[arg-type]
                 ignored_because=ignored_because)
    metadata: dict[str, Any] = {CHECK_KEY: spec}
    if help:
        metadata["help"] = help
    return metadata


#: A path a run writes inside its run directory: relative, with no ``..`` part (what
#: :func:`inside_run_dir` declares).
INSIDE_RUN_DIR = r"(?!/)(?!(?:.*/)?\.\.(?:/|$)).+"


def inside_run_dir(help: str) -> dict[str, Any]:
    """Field metadata for a path the run writes inside its own run directory (``logger.csv.filename``):
    a relative path without ``..``, so nothing lands outside the run (``check(pattern=...)``)."""
    return check(pattern=INSIDE_RUN_DIR, describe="a relative path inside the run directory (not absolute, no '..')",
                 help=help)


def field_check(f: dataclasses.Field) -> Check | None:
    """The :class:`Check` declared on a dataclass field, if any."""
    spec = f.metadata.get(CHECK_KEY)
    return spec if isinstance(spec, Check) else None


def describe_field(f: dataclasses.Field, registry: Any = None) -> str:
    """What a field accepts in words (``""`` when it declares nothing); ``... or null`` for an
    ``Optional`` field; ``...; only with eval_every > 0`` for a field with ``applies_if`` (an
    :class:`OptionsWith` condition names the options of ``registry`` that have its trait)."""
    spec = field_check(f)
    if spec is None:
        return ""
    hint = f.type
    optional = ("Optional[" in hint or "None" in hint) if isinstance(hint, str) else _allows_none(hint)
    accepts = "" if f.type in (bool, "bool") else spec.describe()
    if optional and accepts and "null" not in accepts:  # a description may say it already: "a URI (or null)"
        accepts += " or null"
    if spec.applies_if:
        accepts += ("; " if accepts else "") + "only with " + applies_text(spec, registry=registry)
    return accepts


def field_problems(config: type, values: Mapping[str, Any], prefix: str) -> list[str]:
    """Every declared field of ``config`` whose value in ``values`` is out of range, as messages
    ``"<prefix>.<field> must be > 0, got -1.0"``. Fields absent from ``values`` are not checked. A
    relation between two fields (``le_field=...``) is checked only when neither of them has a
    problem of its own: ``buffer_size=-1`` is one message, not a second one about ``min_buffer_size``
    that fixing ``buffer_size`` answers."""
    problems = []
    hints = _hints(config)
    relations: list[tuple[str, Any, str, str]] = []
    wrong: set[str] = set()  # the fields with a problem of their own
    for f in dataclasses.fields(config):
        spec = field_check(f)
        if spec is None or f.name not in values:
            continue
        value = values[f.name]
        if value is None and _allows_none(hints.get(f.name)):
            continue
        items = list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)]
        for index, item in items:
            why = spec.problem(item)
            if why is not None:
                key = f"{prefix}.{f.name}" + (f"[{index}]" if index is not None else "")
                problems.append(f"{key} {why}, got {item!r}")
                wrong.add(f.name)
        relations += [(f.name, value, op, other) for op, other in spec.relations()]
    for name, value, op, other in relations:
        if name in wrong or other in wrong:
            continue
        bound = values.get(other)
        if _is_number(value) and _is_number(bound) and not _COMPARE[op](value, bound):
            problems.append(f"{prefix}.{name} must be {op} {prefix}.{other} ({bound!r}), got {value!r}")
    return problems


def ignored_values(config: type, values: Mapping[str, Any], prefix: str,
                   given: Collection[str] | None = None, run: Any = None, registry: Any = None) -> list[str]:
    """The fields of ``config`` set away from their default where their ``applies_if`` does not hold
    (values the run would ignore), as messages ``"<prefix>.<field>=2 has no effect while ..."``.

    ``given`` names the fields a user set (on a command line); only those are named, since a value
    that came from a preset is not the user's to reset. None: every field in ``values`` counts.
    ``run`` is the run's whole config, where a condition on another group's setting
    (``trainer.eval_every``) is read (a setting it does not have satisfies no condition); without it,
    or where that setting does not resolve (:func:`composed_problems` names it), such a condition
    counts as holding, as an :class:`OptionsWith` condition does without ``registry`` (the plugin
    registry, which says which options have its trait)."""
    out = []
    for f in dataclasses.fields(config):
        spec = field_check(f)
        if spec is None or f.name not in values or (given is not None and f.name not in given):
            continue
        message = _ignored(config, f, spec, values, prefix, run, registry)
        if message is not None:
            out.append(message)
    return out


#: The operators of an ``applies_if`` condition.
_APPLIES_OPS = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b,
                ">": lambda a, b: _is_number(a) and a > b, "not in": lambda a, b: a not in b}
#: What an ``applies_if`` condition names: a sibling field, or another group's setting by its dotted key.
_CONDITION_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
#: The value of a setting the run's config does not have (another option of its group was chosen).
_ABSENT = object()
#: The value of a setting whose interpolation does not resolve (:func:`composed_problems` names it).
_UNREADABLE = object()


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def _yaml(value: Any) -> str:
    """A value as a user writes it on the command line (``true``, ``null``, ``restart``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def _condition_name(other: str, prefix: str) -> str:
    """How a condition's key is written: a sibling after ``prefix`` (``trainer.eval_every``), another
    group's setting by its key, a group's choice by the group (``worker.name``: ``worker``)."""
    if "." not in other:
        return f"{prefix}{other}"
    return other[:-len(".name")] if _is_choice(other) else other


def applies_text(spec: Check, prefix: str = "", registry: Any = None) -> str:
    """A field's ``applies_if`` in words: ``eval_every > 0``, ``obs=true or reward=true``, ``resume set``,
    ``worker other than vec and fragment`` (each sibling's name after ``prefix``; another group's setting
    by its own key, ``trainer.eval_every``, and a group's choice by the group's name); an
    :class:`OptionsWith` is said by the names of the options in ``registry`` that have its trait and its
    words (``worker other than pearl and rl2 (the workers that run trials)``), by its words alone
    without a registry or where no option has it."""
    def one(other: str, op: str, wanted: Any) -> str:
        name = _condition_name(other, prefix)
        if isinstance(wanted, OptionsWith):
            names = wanted.names(other.partition(".")[0], registry) if registry is not None else ()
            return f"{name} other than {' and '.join(names)} ({wanted.words})" if names else \
                f"{name} other than {wanted.words}"
        if op == "!=" and wanted is None:
            return f"{name} set"
        if op == "not in":
            return f"{name} other than {' and '.join(_yaml(v) for v in wanted)}"
        return f"{name}{'=' if op == '==' else f' {op} '}{_yaml(wanted)}"

    return " or ".join(one(*condition) for condition in spec.applies_if)


def _ignored(config: type, f: dataclasses.Field, spec: Check, values: Mapping[str, Any], prefix: str,
             run: Any = None, registry: Any = None) -> str | None:
    """The message for a field set away from its default where its ``applies_if`` holds for none of
    its conditions (its value would be ignored), else None. A condition on another group's setting is
    read from ``run`` (the whole config): a setting the run does not have satisfies no condition; one
    that does not resolve there, or any without ``run``, counts as holding (as does a sibling that is
    not a field, which :func:`condition_problems` names, and an :class:`OptionsWith` condition without
    ``registry``)."""
    if not spec.applies_if:
        return None
    default = _default(f)
    value = values[f.name]
    if default is dataclasses.MISSING or value == default:
        return None
    by_name = {other.name: other for other in dataclasses.fields(config)}
    current = []
    for other, op, wanted in spec.applies_if:
        if "." in other:  # another group's setting
            have = _run_value(run, other)
            if have is _UNREADABLE:
                return None
            if have is _ABSENT:
                current.append(_absent_text(run, other))
                continue
        elif other in values or other in by_name:
            have = values[other] if other in values else _default(by_name[other])
        else:  # not a field: condition_problems names it
            return None
        if isinstance(wanted, OptionsWith):
            if registry is None:
                return None
            wanted = wanted.names(other.partition(".")[0], registry)
        if _APPLIES_OPS[op](have, wanted):
            return None
        current.append(f"{_condition_name(other, prefix + '.')}={_yaml(have)}")
    wants = applies_text(spec, prefix + ".", registry)
    because = f"{spec.ignored_because}; " if spec.ignored_because else ""
    return (f"{prefix}.{f.name}={_yaml(value)} has no effect while {' and '.join(dict.fromkeys(current))}: {because}it "
            f"applies only with {wants}; set that, or leave {prefix}.{f.name} at its default ({_yaml(default)})")


def _absent_text(run: Any, key: str) -> str:
    """The setting ``key`` that the run's config ``run`` does not have, in words: ``worker=default,
    which has no setting context_reward`` (the option chosen in its place), else ``no setting <key>``."""
    parent, _, leaf = key.rpartition(".")
    node = _run_value(run, parent)
    name = node.get("name") if hasattr(node, "get") else None
    if isinstance(name, str):
        return f"{parent}={name}, which has no setting {leaf}"
    return f"no setting {key}"


def _run_value(run: Any, key: str) -> Any:
    """The value of the dotted ``key`` in the run's config ``run``: :data:`_ABSENT` when the config does
    not have that setting, :data:`_UNREADABLE` when there is no config or the value does not resolve
    (``???``, an interpolation to nothing: another check names that)."""
    if run is None:
        return _UNREADABLE
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.select(run, key, default=_ABSENT, throw_on_missing=True)
    except OmegaConfBaseException:
        return _UNREADABLE


def check_values(config: type, values: Mapping[str, Any], prefix: str) -> None:
    """Raise :class:`~corral.framework.errors.ConfigError` naming every out-of-range field."""
    problems = field_problems(config, values, prefix)
    if problems:
        raise ConfigError("; ".join(problems))


def checked(prefix: str) -> Callable[[type], type]:
    """Class decorator, placed under ``@dataclass``: the config checks its own values when it is made,
    so a config built in Python (``PPO(spec, policy, sampler, learning_rate=-1)``) gets the same one-line
    :class:`~corral.framework.errors.ConfigError` a command line gets (``algo.learning_rate must be > 0,
    got -1``). ``prefix`` is the config group the message names (``algo``, ``trainer``). It checks
    ranges, choices and relations; ``applies_if`` is said when a run is composed or built
    (:func:`composed_ignored`: a condition may read another group's setting, which a config made on
    its own does not have). A ``__post_init__`` the class defines runs after it."""

    def decorate(cls: type) -> type:
        own = cls.__dict__.get("__post_init__")

        def __post_init__(self: Any) -> None:
            values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
            check_values(type(self), values, prefix)
            if own is not None:
                own(self)

        __post_init__.__doc__ = f"Check every value against its declaration (``{prefix}.*``)."
        cls.__post_init__ = __post_init__  # type: ignore[attr-defined]
        return cls

    return decorate


def check_defaults(config: type, prefix: str = "config", registry: Any = None) -> list[str]:
    """The problems of a config dataclass's own defaults against its own declarations (``[]`` = fine).

    Also reports a field whose ``check`` metadata is not a :class:`Check` (built by hand instead of
    with :func:`check`), and an ``applies_if`` that names no field of the config or, given the plugin
    ``registry``, no setting of any option of the group its dotted key names (:func:`condition_problems`).
    """
    problems = []
    values: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        raw = f.metadata.get(CHECK_KEY)
        if raw is not None and not isinstance(raw, Check):
            problems.append(f"{prefix}.{f.name}: metadata[{CHECK_KEY!r}] must come from corral.check(...), "
                            f"got {raw!r}")
        default = _default(f)
        if default is not dataclasses.MISSING:
            values[f.name] = default
    return problems + condition_problems(config, prefix, registry) + field_problems(config, values, prefix)


def condition_problems(config: type, prefix: str, registry: Any = None) -> list[str]:
    """Every ``applies_if`` condition of ``config`` that names nothing, as ``"<prefix>.<field>:
    applies_if names 'evry', which is not a field of <Config>"``: a sibling that is not a field and,
    given the plugin ``registry``, another group's key that no registered option of that group has
    (``worker.context_rewrd``; ``worker.name``, the group's choice, every group has). Such a condition
    would never hold, so the field would be named as ignored whatever the run chose."""
    names = {f.name for f in dataclasses.fields(config)}
    problems = []
    for f in dataclasses.fields(config):
        spec = field_check(f)
        for other, _, _ in spec.applies_if if spec is not None else ():
            if "." not in other:
                if other not in names:
                    problems.append(f"{prefix}.{f.name}: applies_if names {other!r}, which is not a field of "
                                    f"{config.__name__}")
            elif registry is not None and (why := _unknown_key(other, registry)) is not None:
                problems.append(f"{prefix}.{f.name}: applies_if names {other!r}, {why}")
    return problems


def _unknown_key(key: str, registry: Any) -> str | None:
    """Why the dotted ``key`` names no setting of any option in ``registry`` (``"which no worker option
    has; did you mean worker.context_reward?"``), or None when one has it. The logger group holds one
    node per selected logger: its keys are ``logger.<name>.<setting>``."""
    group, *rest = key.split(".")
    options = [reg for reg in registry.entries.values() if reg.kind == group]
    if not options:
        groups = sorted({reg.kind for reg in registry.entries.values()})
        return f"but there is no config group {group!r} (the groups: {', '.join(groups)})"
    if group == "logger":
        options = [reg for reg in options if reg.name == rest[0]]
        rest = rest[1:]
        if not options or not rest:
            return "which names no setting of a logger option (write logger.<name>.<setting>)"
    if rest[0] == "name":
        return None
    keys = sorted({f.name for reg in options if reg.config is not None for f in dataclasses.fields(reg.config)})
    if rest[0] in keys:
        return None
    close = difflib.get_close_matches(rest[0], keys, n=1)
    where = key[: -len(".".join(rest))]
    return f"which no {group} option has" + (f"; did you mean {where}{close[0]}?" if close else "")


def unchecked_fields(config: type) -> list[str]:
    """Numeric fields (int, float, lists of them) that declare no :func:`check`; bools and strings
    without declared choices are not counted."""
    hints = _hints(config)
    out = []
    for f in dataclasses.fields(config):
        if field_check(f) is None and _is_numeric(hints.get(f.name)):
            out.append(f.name)
    return out


def unknown_key_message(prefix: str, option: str, key: str, fields: list[str],
                        elsewhere: list[str] | None = None) -> str:
    """The message for a key that is not a field of the chosen option.

    ``prefix`` is the path of the group (``algo``, ``logger.csv``), ``option`` the group choice as a
    user writes it (``algo=ppo``), ``fields`` the option's fields, ``elsewhere`` the other options
    of the group that do have ``key`` (written ``worker=vec``; the first is the example given).
    """
    where = f"{option} has no setting {key!r}"
    if fields:
        where += f"; its settings are {', '.join(f'{prefix}.{f}' for f in fields)}"
    else:
        where += " (it has no settings)"
    close = difflib.get_close_matches(key, fields, n=1)
    hint = f"; did you mean {prefix}.{close[0]}?" if close else ""
    if elsewhere:
        named = elsewhere[0] if len(elsewhere) == 1 else ", ".join(elsewhere[:-1]) + " and " + elsewhere[-1]
        hint += (f"; {named} {'has' if len(elsewhere) == 1 else 'have'} {key!r}: choose "
                 f"{'it' if len(elsewhere) == 1 else 'one of them'} (e.g. {elsewhere[0]} {prefix}.{key}=...)")
    return f"{prefix}.{key} is not a setting: {where}{hint} (`corral plugins` lists every option's settings)"


_COMPARE = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}


def _is_choice(key: str) -> bool:
    """True for a condition key that names a group's choice: ``worker.name``."""
    return key.count(".") == 1 and key.endswith(".name")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _has_bounds(spec: Check) -> bool:
    return any(b is not None for b in (spec.gt, spec.ge, spec.lt, spec.le))


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


def _hints(config: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(config)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: fall back to no type information
        return {}


def _allows_none(hint: Any) -> bool:
    return hint is None or hint is Any or type(None) in typing.get_args(hint)


def _is_numeric(hint: Any) -> bool:
    if hint in (int, float):
        return True
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        return any(a in (int, float) for a in args)
    return bool(args) and all(_is_numeric(a) for a in args)


def check_minimums(node: Mapping[str, Any], prefix: str, minimums: Mapping[str, int],
                   nullable: Collection[str] = ()) -> None:
    """Raise a one-line :class:`ConfigError` for the first whole-number setting of ``node`` (a
    third-party plugin's settings, e.g. a Hydra launcher's, with no :func:`check` of their own) below
    its minimum: ``hydra.launcher.timeout_min must be >= 1, got -1``; ``None`` is allowed for the
    keys in ``nullable`` (``... must be >= 1 or null, got 0``)."""
    for key, minimum in minimums.items():
        if key not in node:
            continue
        value = node.get(key)
        if value is None and key in nullable:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            null = " or null" if key in nullable else ""
            raise ConfigError(f"{prefix}.{key} must be a whole number >= {minimum}{null}, got {value!r}")


__all__ = [
    "CHECK_KEY",
    "INSIDE_RUN_DIR",
    "Check",
    "OptionsWith",
    "check",
    "check_defaults",
    "check_minimums",
    "check_values",
    "checked",
    "condition_problems",
    "composed_ignored",
    "composed_problems",
    "describe_field",
    "field_check",
    "field_problems",
    "ignored_values",
    "inside_run_dir",
    "unchecked_fields",
    "unknown_key_message",
    "unresolved_message",
]


def composed_problems(cfg: Any, registry: Any, schema: type, kinds: Iterable[str]) -> list[str]:
    """Every problem of a composed run config: a key that is not a field of its option (or of the
    primary ``schema``), every value outside its field's declared range, and a chosen option's
    ``applies_if`` that names no setting (:func:`condition_problems`: the option's own mistake).

    ``registry`` is the plugin :class:`~corral.framework.registry.Registry`; ``kinds`` the config
    groups (the ``logger`` group holds one node per selected logger, under ``logger.<name>``).
    Options that are not registered are left to the caller's lookup.
    """
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    problems: list[str] = []
    kinds = tuple(kinds)
    top = {f.name for f in dataclasses.fields(schema)}
    for key in cfg:
        if key not in top:
            problems.append(_unknown_top_level(str(key), top, registry, kinds))
    preset = cfg.get("experiment")
    if isinstance(preset, DictConfig) and len(preset):
        # Hydra puts a group file's keys under the group's name unless the file says otherwise.
        keys = ", ".join(f"experiment.{k}" for k in list(preset)[:3])
        problems.append(f"the experiment preset's settings landed under {keys}, where nothing reads them: its file "
                        "needs `# @package _global_` as its first line (as every preset has; docs/plugins.md)")
    top_values = {}
    for k in top:
        try:
            value = cfg.get(k)
        except OmegaConfBaseException as exc:  # an interpolation that does not resolve (seed=${nope})
            problems.append(unresolved_message(cfg, k, exc))
            continue
        if k not in kinds and not isinstance(value, DictConfig):
            top_values[k] = value
    for problem in field_problems(schema, top_values, ""):
        problems.append(problem.lstrip("."))

    def check_node(prefix: str, option: str, kind: str, name: str, node: Any) -> None:
        key = (kind, name)
        if key not in registry.entries or not isinstance(node, DictConfig):
            return
        reg = registry.entries[key]
        try:
            container = OmegaConf.to_container(node, resolve=True)
        except OmegaConfBaseException as exc:  # e.g. an interpolation that does not resolve
            problems.append(unresolved_message(cfg, str(getattr(exc, "full_key", None) or prefix), exc))
            return
        assert isinstance(container, dict)
        values = {str(k): v for k, v in container.items()}
        fields = [f.name for f in dataclasses.fields(reg.config)] if reg.config is not None else []
        for f in dataclasses.fields(reg.config) if reg.config is not None else ():
            if f.name in node.keys() and OmegaConf.is_missing(node, f.name):  # `???`: no default, none given
                hint = f.metadata.get("help", "")
                problems.append(f"{prefix}.{f.name} must be set: {option} has no default for it"
                                + (f" ({hint})" if hint else "") + f"; add {prefix}.{f.name}=<value>")
                values.pop(f.name, None)
        for extra in [k for k in values if k not in fields and k != "name"]:
            owners = [other for other in registry if other.kind == kind and other.name != name
                      and other.config is not None and extra in {f.name for f in dataclasses.fields(other.config)}]
            # The simplest option that has the key (fewest settings) is the example: worker=vec for n_envs.
            owners.sort(key=lambda other: (len(dataclasses.fields(other.config)), other.name))
            elsewhere = [f"{kind}={other.name}" for other in owners]
            problems.append(unknown_key_message(prefix, option, str(extra), fields, elsewhere))
        if reg.config is not None:
            problems.extend(f"{option} ({reg.source}) declares {p}; its config's check(applies_if=...) must name "
                            "a setting (a mistake of the plugin's: report it to its author)"
                            for p in condition_problems(reg.config, prefix, registry))
            own = field_problems(reg.config, values, prefix)
            problems.extend(own)
            if not own and len(values) == len(container):  # every value is in range and set: the relations
                problems.extend(relation_problems(reg.config, values))

    for prefix, option, kind, name, node in _option_nodes(cfg, kinds):
        check_node(prefix, option, kind, name, node)
    return problems


_MISSING_KEY = re.compile(r"Interpolation key '(.+)' not found")


def unresolved_message(cfg: Any, key: str, exc: BaseException) -> str:
    """One line for the setting ``key`` of ``cfg`` whose value is an interpolation that does not resolve
    (``algo.learning_rate=${nope}``): the setting as written, the key it names that the config lacks
    (or OmegaConf's reason), and what to do."""
    from omegaconf import OmegaConf

    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    written = None
    try:
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key, throw_on_resolution_failure=False) if parent_key else cfg
        node = parent._get_node(leaf) if parent is not None and hasattr(parent, "_get_node") else None
        written = node._value() if node is not None else None
    except Exception:  # noqa: BLE001 - the value as written is only shown when it can be read
        written = None
    setting = f"{key}={written}" if isinstance(written, str) else key
    missing = _MISSING_KEY.fullmatch(reason)
    if missing is not None:
        return (f"{setting}: the interpolation names {missing.group(1)}, which the config does not have; give "
                f"{key} a value, or interpolate a setting the config has (`python train.py --cfg job` lists them)")
    return f"{setting}: its interpolation does not resolve ({reason}); give {key} a value"


def relation_problems(config: type, values: Mapping[str, Any]) -> list[str]:
    """The problem a config class's own ``__post_init__`` finds in ``values`` (a relation between
    fields, such as the trainer's "n_epochs and max_env_steps are not both null"), as ``[message]``;
    ``[]`` when it accepts them. Values it cannot be made from are left to whoever builds it."""
    names = {f.name for f in dataclasses.fields(config)}
    try:
        config(**{k: v for k, v in values.items() if k in names})
    except ConfigError as exc:
        return [str(exc)]
    except Exception:  # noqa: BLE001 - e.g. a nested setting given as a dict: building it says what is wrong
        return []
    return []


def _option_nodes(cfg: Any, kinds: Iterable[str]) -> list[tuple[str, str, str, str, Any]]:
    """``(prefix, option as a user writes it, kind, name, node)`` for every chosen option of a composed
    config (one per selected logger, under ``logger.<name>``)."""
    from omegaconf import DictConfig

    out = []
    for kind in kinds:
        node = cfg.get(kind)
        if kind == "logger":
            out += [(f"logger.{name}", f"logger {name}", kind, str(name), sub) for name, sub in (node or {}).items()]
        elif isinstance(node, DictConfig) and "name" in node:
            out.append((kind, f"{kind}={node.name}", kind, str(node.name), node))
    return out


def composed_ignored(cfg: Any, registry: Any, kinds: Iterable[str], given: Collection[str] | None) -> list[str]:
    """The values of a composed run config that its options would ignore (:func:`ignored_values`),
    among the dotted keys in ``given`` (what a command line set: ``trainer.video_every``); None: every
    value that differs from its field's default (a config made in Python). A condition on another
    group's setting is read from ``cfg``."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    out: list[str] = []

    def check_node(prefix: str, kind: str, name: str, node: Any) -> None:
        reg = registry.entries.get((kind, name))
        if reg is None or reg.config is None or not isinstance(node, DictConfig):
            return
        try:
            values = OmegaConf.to_container(node, resolve=True)
        except OmegaConfBaseException:  # composed_problems names it
            return
        assert isinstance(values, dict)
        mine = None if given is None else {key[len(prefix) + 1:] for key in given if key.startswith(prefix + ".")}
        out.extend(ignored_values(reg.config, {str(k): v for k, v in values.items()}, prefix, given=mine, run=cfg,
                                  registry=registry))

    for prefix, _, kind, name, node in _option_nodes(cfg, kinds):
        check_node(prefix, kind, name, node)
    return out


def _unknown_top_level(key: str, top: set[str], registry: Any, kinds: tuple[str, ...]) -> str:
    groups = [k for k in (*kinds, "experiment") if k in top or k in kinds]
    owners = sorted({f"{reg.kind}.{key}" for reg in registry if reg.config is not None
                     and key in {f.name for f in dataclasses.fields(reg.config)}})
    hint = f"; did you mean {' or '.join(owners[:3])}?" if owners else ""
    if not hint:
        close = difflib.get_close_matches(key, sorted(top), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
    return (f"{key} is not a setting: the top-level settings are {', '.join(sorted(top - set(groups)))} and the "
            f"groups {', '.join(groups)}{hint}")
