"""An entry-point module whose import fails, as when a plugin's own dependency is missing."""

from __future__ import annotations

raise ImportError("corral_brokenimport needs the package 'definitely_not_installed_xyz'")
