"""The one conversion between PostgreSQL's centicores and Redis's cores.

Rule, applied per proc and per limit value (release, booking, reseed, seeding at a
switch, drift): cores = centicores // 100, truncated toward zero, except -1 ("unlimited"),
which passes through verbatim. Per proc, because a release must take off exactly what the
booking added for that proc, and the booking adds whole cores.

What that costs: Redis reads *lower* than the fractional reservation. Two 2.5-core procs
reserve 5 cores and count 4, so the scheduler can book into the fractions (the unsafe
direction, by less than one core per fractional proc). The scheduler's own recompute sums
centicores and converts once, and writes 5: a key it wrote differs from this project's
value by that rounding only, which the drift inspector reports apart from drift
(accounting.drift). GPUs are whole units and never pass through here.
"""

UNLIMITED = -1


def cores_from_centicores(centicores: int) -> int:
    if centicores == UNLIMITED:
        return UNLIMITED
    if centicores < 0:
        raise ValueError(f"centicores must be >= 0 or -1 (unlimited), got {centicores}")
    return centicores // 100


def centicores_from_cores(cores: int) -> int:
    """For operator input in cores (cueadmin style); -1 stays -1."""
    if cores == UNLIMITED:
        return UNLIMITED
    if cores < 0:
        raise ValueError(f"cores must be >= 0 or -1 (unlimited), got {cores}")
    return cores * 100


def format_cores(centicores: int) -> str:
    """Human display of a stored centicore value: '2.5 cores', 'unlimited'."""
    if centicores == UNLIMITED:
        return "unlimited"
    cores = centicores / 100
    return f"{cores:g} core" if cores == 1 else f"{cores:g} cores"
