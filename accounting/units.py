"""The one conversion between PostgreSQL's centicores and Redis's cores.

Rule, applied per proc and per limit value, everywhere (release, booking, reseed,
seeding at a switch, drift): cores = centicores // 100, truncated toward zero, except
-1 ("unlimited"), which passes through verbatim. A 250-centicore proc counts as 2
cores in Redis whether it is booked, released or recomputed, so the three always
agree. Summing centicores first and converting once would give 5 for two such procs
where the release path removes 2 + 2, and the key would drift low. GPUs are whole
units and never pass through here.
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
