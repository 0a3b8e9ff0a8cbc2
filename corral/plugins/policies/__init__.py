"""Built-in policies plugins."""
