"""The simulator's management commands (Django looks for them here)."""
