"""Fixtures of the ``corral results`` / ``corral plot`` tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def saved_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures ``corral plot`` saves, kept after it closes them: matplotlib's own ``savefig``
    still writes each (this only keeps a reference, to read its legend and extents)."""
    from matplotlib.figure import Figure

    saved: list[Any] = []
    real = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved
