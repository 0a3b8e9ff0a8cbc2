"""Import a Python file by its path: scripts under ``experiments/``, helpers under ``tests/data/``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_path(path: str | Path, name: str) -> ModuleType:
    """The module in ``path`` registered as ``sys.modules[name]``, loaded once per process.

    Registering it before running it lets dataclasses and pickle find the module by name.
    """
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path} as {name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


__all__ = ["import_path"]
