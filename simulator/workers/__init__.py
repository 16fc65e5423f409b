"""The threads of a run, by role: each era's in its own package (redis, notify, maestro), and
what two eras share here (the quiet-sample gate, the scheduler's view of the farm)."""
