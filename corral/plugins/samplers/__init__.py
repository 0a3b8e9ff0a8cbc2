"""Built-in samplers plugins."""
