"""corral-brokenimport: its entry-point module cannot be imported."""
