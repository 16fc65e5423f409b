"""The NOTIFY era's threads: the scheduler model (its counters, LISTEN and recompute), bookers,
releasers, the operator, and the faults the runner fires between them."""
