"""Built-in envs plugins."""
