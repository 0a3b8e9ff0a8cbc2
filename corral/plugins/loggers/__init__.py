"""Built-in loggers plugins."""
