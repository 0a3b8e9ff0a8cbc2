"""corral's Optuna sweeper for Hydra (``hydra/sweeper=optuna``), for current Optuna releases."""
