"""corral's built-in plugins, one module per registered option."""
