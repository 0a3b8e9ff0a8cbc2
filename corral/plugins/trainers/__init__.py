"""Built-in trainers plugins."""
