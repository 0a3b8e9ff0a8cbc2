"""Built-in ``normalize=`` options."""
