"""corral's Ray launcher for Hydra (``hydra/launcher=ray``); see :mod:`corral.launchers.ray`."""
