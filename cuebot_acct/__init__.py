# Reported by every running process in its accounting.Instance record.
__version__ = "0.1.0"
