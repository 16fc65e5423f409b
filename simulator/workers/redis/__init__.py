"""The Redis era's threads: bookers (the scheduler), releasers (Cuebot), the reconciler and the
operator, and the faults each injects at its own point."""
