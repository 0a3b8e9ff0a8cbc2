"""corral's warnings for the person running it: one ``corral: warning:`` line each on the command line."""

from __future__ import annotations

import io
import warnings

from corral.framework.errors import CorralWarning, warnings_as_lines
from corral.framework.plugins import PluginWarning


def test_a_corral_warning_is_one_line_each_time_and_others_keep_pythons_format() -> None:
    stream = io.StringIO()
    shown: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, *args, **kwargs: shown.append(f"{category.__name__}: {message}")
        original = warnings.showwarning
        with warnings_as_lines(stream):
            for _ in range(2):  # the same place twice: both are shown (the code that warns decides how often)
                warnings.warn("the tracker went quiet", CorralWarning, stacklevel=1)
            warnings.warn("a plugin was skipped", PluginWarning, stacklevel=1)
            warnings.warn("something else", UserWarning, stacklevel=1)
        assert warnings.showwarning is original  # restored after the block
        warnings.warn("after", CorralWarning, stacklevel=1)
    assert stream.getvalue().splitlines() == ["corral: warning: the tracker went quiet"] * 2 + [
        "corral: warning: a plugin was skipped"]
    assert shown == ["UserWarning: something else", "CorralWarning: after"]
