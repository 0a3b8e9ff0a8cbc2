"""Snapshots are data, not code: how corral writes and reads them.

A snapshot is two files:

- ``epoch_NNNNNN.pt``, the **data part**: tensors, numpy arrays, numbers, strings and containers
  of them. It loads with ``torch.load(..., weights_only=True)``, which runs no code from the file;
  the only globals allowed beyond torch's own are the numpy ones needed to rebuild arrays, dtypes
  and scalars (:data:`NUMPY_SAFE_GLOBALS`, numeric dtypes only: no object arrays).
- ``epoch_NNNNNN.objects.pkl``, the **objects part**, written only when some state is an object
  that only pickle can hold (a plugin's custom object, the ``fragment`` worker's in-flight
  episodes). Unpickling it can run arbitrary code, so it is loaded only when the user says the
  snapshot is trusted: ``trainer.trust_snapshot=true`` (``corral eval --trust``). The data part
  records which entries it holds, and its SHA-256, so a swapped file is refused.

:func:`save_snapshot` writes both atomically (temporary file, fsync, rename; the objects part
first); :func:`load_snapshot` reads them back, refusing anything that needs code to load unless
``trust=True``. :func:`remove_snapshot` deletes both parts. A dataclass registered with
:func:`register_snapshot_dataclass` is stored as data (its fields), so state such as the meta-RL
workers' task schedules needs no objects part.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import os
import pickle
from pathlib import Path
from typing import Any, Iterator, Mapping

from corral.framework.errors import SnapshotError
from corral.results.writable import write_atomically

#: Key of the data part's manifest of the objects part.
MANIFEST_KEY = "__corral_objects__"
#: Key of a placeholder that stands for entry ``i`` of the objects part.
PLACEHOLDER_KEY = "__corral_object__"
#: Key of the data part's record of which plugin (distribution, version) registered each option the
#: run's config chose (:meth:`corral.framework.registry.Registry.option_sources`): a run whose plugin
#: is missing later (uninstalled, ``CORRAL_DISABLE_PLUGINS``) names the package to install.
SOURCES_KEY = "option_sources"
#: How to tell a user to trust a snapshot.
TRUST_HINT = ("pass trainer.trust_snapshot=true (corral eval --trust) only if you trust where this snapshot "
              "came from: loading it can run code")


def _numpy_safe_globals() -> list[Any]:
    """The numpy callables and classes that rebuild numeric arrays, dtypes and scalars, under the
    names numpy 1 and numpy 2 pickle them with."""
    import numpy as np

    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    out: list[Any] = []
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        out.append((multiarray._reconstruct, f"{module}._reconstruct"))
        out.append((multiarray.scalar, f"{module}.scalar"))
    out += [np.ndarray, np.dtype]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:  # numpy >= 1.25: one class per dtype; numeric ones only (no object dtype)
        for name in ("BoolDType", "Int8DType", "Int16DType", "Int32DType", "Int64DType", "UInt8DType",
                     "UInt16DType", "UInt32DType", "UInt64DType", "Float16DType", "Float32DType", "Float64DType",
                     "LongDoubleDType", "Complex64DType", "Complex128DType", "ByteDType", "UByteDType",
                     "ShortDType", "UShortDType", "IntDType", "UIntDType", "LongDType", "ULongDType",
                     "LongLongDType", "ULongLongDType"):
            cls = getattr(dtypes, name, None)
            if cls is not None:
                out.append(cls)
    return out


#: The globals a data part may name besides torch's own (built on first use).
NUMPY_SAFE_GLOBALS: list[Any] = []


@contextlib.contextmanager
def _safe_globals() -> Iterator[None]:
    import torch

    if not NUMPY_SAFE_GLOBALS:
        NUMPY_SAFE_GLOBALS.extend(_numpy_safe_globals())
    with torch.serialization.safe_globals(NUMPY_SAFE_GLOBALS):
        yield


def objects_path(path: str | os.PathLike) -> Path:
    """Where the objects part of the snapshot ``path`` goes: ``epoch_000001.pt`` ->
    ``epoch_000001.objects.pkl``."""
    p = Path(path)
    return p.with_name(p.stem + ".objects.pkl")


# ------------------------------------------------------------------------------- registered dataclasses
#: Key of a registered dataclass stored as data: ``{DATACLASS_KEY: name, "fields": {...}}``.
DATACLASS_KEY = "__corral_dataclass__"
_DATACLASSES: dict[str, type] = {}


def register_snapshot_dataclass(cls: type) -> type:
    """Let instances of the dataclass ``cls`` live in a snapshot's data part: they are stored as
    their ``init`` fields (each one data, or another registered dataclass) and rebuilt with
    ``cls(**fields)``. A snapshot can only name classes registered here, so loading it still runs
    no code it chose. Usable as a class decorator; corral registers its meta-RL task schedules."""
    import dataclasses

    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"register_snapshot_dataclass needs a dataclass, got {cls!r}")
    _DATACLASSES[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return cls


def snapshot_dataclass(name: str) -> type:
    """The dataclass registered under ``name`` (``module.QualName``) with :func:`register_snapshot_dataclass`.

    The modules that register them (corral's meta-RL task schedules, a plugin's own) are imported
    when the plugins load, which ``train.py`` and ``corral eval`` do first; a library user may read
    a snapshot before anything else. So a name not registered yet loads the plugin manager
    (:func:`corral.framework.plugins.get_plugin_manager`, once per process: the installed plugins'
    code, the same that a run executes, not code the snapshot names) and looks again. Raises a
    :class:`SnapshotError` naming the class when no loaded plugin registers it either."""
    cls = _DATACLASSES.get(name)
    if cls is None:
        from corral.framework.plugins import get_plugin_manager

        get_plugin_manager()
        cls = _DATACLASSES.get(name)
    if cls is None:
        raise SnapshotError(
            f"the snapshot holds a {name}, a dataclass that no loaded plugin registers with "
            "register_snapshot_dataclass; install the plugin that wrote the snapshot (`corral plugins` lists what "
            "is installed, and whether CORRAL_PLUGINS or CORRAL_DISABLE_PLUGINS leaves one out)"
        )
    return cls


# ---------------------------------------------------------------------------------------- splitting
_PRIMITIVES = (type(None), bool, int, float, complex, str, bytes)


def _loads_as_data(value: Any) -> bool:
    """Whether ``value`` survives a ``weights_only=True`` round trip with corral's allow-list."""
    import torch

    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        with _safe_globals():
            torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - anything that does not load as data goes to the objects part
        return False
    return True


class _Splitter:
    """Walks a state, keeping data in place and moving everything else to ``objects``."""

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self.where: list[str] = []
        self._known: dict[type, bool] = {}

    def split(self, value: Any, path: str) -> Any:
        import numpy as np
        import torch

        kind = type(value)
        if kind in _PRIMITIVES or isinstance(value, torch.Tensor):
            return value
        if kind in (dict, collections.OrderedDict):
            if all(type(k) in _PRIMITIVES for k in value):
                return kind((k, self.split(v, f"{path}.{k}" if path else str(k))) for k, v in value.items())
        elif kind in (list, tuple):
            items = [self.split(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return items if kind is list else tuple(items)
        elif isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind not in "OV":
            return value
        elif _DATACLASSES.get(f"{kind.__module__}.{kind.__qualname__}") is kind:
            import dataclasses

            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
            return {DATACLASS_KEY: f"{kind.__module__}.{kind.__qualname__}",
                    "fields": {k: self.split(v, f"{path}.{k}") for k, v in fields.items()}}
        elif kind not in self._known:
            self._known[kind] = _loads_as_data(value)
            if self._known[kind]:
                return value
        elif self._known[kind]:
            return value
        self.objects.append(value)
        self.where.append(f"{path or '<root>'} ({kind.__module__}.{kind.__qualname__})")
        return {PLACEHOLDER_KEY: len(self.objects) - 1}


def _merge(value: Any, objects: list[Any]) -> Any:
    """Put the objects part and registered dataclasses back in place of their stand-ins."""
    kind = type(value)
    if kind in (dict, collections.OrderedDict):
        if len(value) == 1 and PLACEHOLDER_KEY in value:
            return objects[int(value[PLACEHOLDER_KEY])] if objects else value
        if len(value) == 2 and DATACLASS_KEY in value and "fields" in value:
            cls = snapshot_dataclass(str(value[DATACLASS_KEY]))
            return cls(**{k: _merge(v, objects) for k, v in value["fields"].items()})
        return kind((k, _merge(v, objects)) for k, v in value.items())
    if kind is list:
        return [_merge(v, objects) for v in value]
    if kind is tuple:
        return tuple(_merge(v, objects) for v in value)
    return value


# ---------------------------------------------------------------------------------------- writing
def save_snapshot(state: Mapping[str, Any], path: str | os.PathLike) -> list[str]:
    """Write ``state`` as the snapshot ``path``: its data part there, and the objects part beside
    it when some entry is not data (see the module docstring). Each file is written atomically,
    the objects part first. Returns the entries that went to the objects part (empty: none, and a
    stale objects part of the same name is removed). A state with a run ``config`` (its YAML) also
    gets :data:`SOURCES_KEY` (where each option it chose came from), unless it has one already."""
    import torch

    path = Path(path)
    if isinstance(state.get("config"), str) and SOURCES_KEY not in state:
        sources = _option_sources(state["config"])
        state = {**state, SOURCES_KEY: sources} if sources else state
    splitter = _Splitter()
    data = splitter.split(dict(state), "")
    part = objects_path(path)
    if splitter.objects:
        blob = io.BytesIO()
        torch.save(splitter.objects, blob)
        raw = blob.getvalue()
        write_atomically(part, lambda f: f.write(raw))
        data[MANIFEST_KEY] = {"file": part.name, "sha256": hashlib.sha256(raw).hexdigest(),
                              "entries": list(splitter.where)}
    write_atomically(path, lambda f: torch.save(data, f))
    if not splitter.objects:
        part.unlink(missing_ok=True)
    return list(splitter.where)


def _option_sources(config_yaml: str) -> dict[str, dict[str, str]]:
    """Where each option of the run config ``config_yaml`` came from, from this process's plugins."""
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints

    from corral.framework.plugins import get_registry
    from corral.framework.registry import chosen_options

    try:
        cfg = yaml.safe_load(config_yaml)
    except yaml.YAMLError:  # not the YAML a trainer writes: nothing to record
        return {}
    if not isinstance(cfg, dict) or not chosen_options(cfg):
        return {}
    return get_registry().option_sources(cfg)


def remove_snapshot(path: str | os.PathLike) -> None:
    """Delete a snapshot: its data part and its objects part, if any."""
    Path(path).unlink(missing_ok=True)
    objects_path(path).unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------- reading
def _refusal(exc: BaseException) -> str:
    """The line of torch's weights-only error that names what the file wanted to run."""
    for line in str(exc).splitlines():
        line = line.strip()
        if "Unsupported global" in line or "Unsupported operand" in line or "not an allowed global" in line:
            return line.rstrip(".")[:300]
    first = str(exc).strip().splitlines()
    return first[0][:300] if first else type(exc).__name__


def _check_archive(path: Path) -> None:
    """A SnapshotError saying so when ``path`` is not a whole snapshot file. ``torch.save`` writes a
    zip archive whose index sits at its end, so a truncated or foreign file has none; without this
    check ``torch.load`` reads it as an old-style pickle and reports a refusal or a miniz error."""
    import zipfile

    if not path.is_file() or zipfile.is_zipfile(path):
        return  # a missing file: torch.load's own error says so
    others = sorted(p.name for p in path.parent.glob("epoch_*.pt") if p != path)
    earlier = (f"; the other snapshots beside it: {', '.join(others[-3:])} (give one of them as trainer.resume=<file> "
               "or to corral eval)") if others else ""
    raise SnapshotError(f"cannot read snapshot {path}: it is not a whole snapshot file ({path.stat().st_size:,} bytes "
                        f"without the index a snapshot ends with: truncated, or another kind of file){earlier}")


def load_snapshot(path: str | os.PathLike, trust: bool = False, *, objects: bool = True) -> dict[str, Any]:
    """Read the snapshot ``path`` (a data part written by :func:`save_snapshot`, or an older
    single-file snapshot).

    Without ``trust`` nothing in the files can run code: the data part is loaded with
    ``weights_only=True`` and an objects part is refused. A snapshot that needs more is a
    :class:`~corral.framework.errors.SnapshotError` saying what it holds and how to trust it. With
    ``trust=True`` (``trainer.trust_snapshot=true``, ``corral eval --trust``) a data part that is
    not plain data is unpickled in full and the objects part is loaded. ``objects=False`` reads the
    data part alone (the run's config, counters) and leaves the objects part's entries as stand-ins.
    """
    import torch

    path = Path(path)
    _check_archive(path)
    try:
        with _safe_globals():
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if not trust:
            raise SnapshotError(
                f"refusing to load snapshot {path}: it is not plain data (tensors, arrays, numbers) and "
                f"unpickling it could run code ({_refusal(exc)}); {TRUST_HINT}"
            ) from None
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc2:  # noqa: BLE001 - a clear one-line error instead
            raise SnapshotError(f"cannot read snapshot {path}: {type(exc2).__name__}: {exc2}") from exc2
    except (OSError, RuntimeError, EOFError, ValueError) as exc:
        raise SnapshotError(f"cannot read snapshot {path}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict):
        raise SnapshotError(f"{path} is not a corral snapshot (it holds a {type(state).__name__}, not a dict)")
    manifest = state.pop(MANIFEST_KEY, None)
    if manifest is None or not objects:
        return _merged(path, state, [])
    part = path.with_name(str(manifest.get("file", objects_path(path).name)))
    entries = list(manifest.get("entries") or [])
    if not trust:
        shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise SnapshotError(
            f"snapshot {path} keeps state that only pickle can hold in {part.name} ({shown}); corral does not "
            f"unpickle it by default; {TRUST_HINT}"
        )
    try:
        raw = part.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"snapshot {path} needs its objects part {part}, which cannot be read: {exc}") from exc
    if hashlib.sha256(raw).hexdigest() != manifest.get("sha256"):
        raise SnapshotError(f"{part} is not the objects part written with {path} (its SHA-256 differs)")
    loaded = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
    return _merged(path, state, list(loaded))


def _merged(path: Path, state: dict[str, Any], objects: list[Any]) -> dict[str, Any]:
    """:func:`_merge` of the snapshot ``path``, whose errors name the file."""
    try:
        return _merge(state, objects)
    except SnapshotError as exc:
        raise SnapshotError(f"cannot read snapshot {path}: {exc}") from None


__all__ = ["MANIFEST_KEY", "SOURCES_KEY", "load_snapshot", "objects_path", "register_snapshot_dataclass", "remove_snapshot",
           "save_snapshot", "snapshot_dataclass"]
