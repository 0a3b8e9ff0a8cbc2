"""Built-in algos plugins."""
