"""Built-in workers plugins."""
