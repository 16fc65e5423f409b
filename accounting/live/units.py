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
(accounting.reconcile.drift). GPUs are whole units and never pass through here.
"""

import re
from decimal import Decimal

UNLIMITED = -1
UNLIMITED_WORD = "unlimited"
# ASCII digits only: Python's Decimal and int() also read other scripts' digits ('٣').
_CORES_TEXT = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)


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


def cores_text(centicores: int) -> str:
    """A stored centicore value as an operator types it: '2.5', '200', 'unlimited' (-1)."""
    if centicores == UNLIMITED:
        return UNLIMITED_WORD
    return f"{Decimal(centicores) / 100:f}".rstrip("0").rstrip(".") if centicores % 100 else str(centicores // 100)


def parse_cores(text: str, *, unlimited: bool, maximum: int) -> int:
    """Operator input in cores ('2.5', 'unlimited' where `unlimited`) to centicores, exactly:
    ValueError, with a message for a person, for anything that is not a whole number of
    centicores between 0 and `maximum` centicores (the column's range)."""
    if unlimited and text.lower() in (UNLIMITED_WORD, "-1"):
        return UNLIMITED
    if not _CORES_TEXT.fullmatch(text):
        allowed = f" or '{UNLIMITED_WORD}'" if unlimited else ""
        raise ValueError(f"Enter a number of cores such as 4 or 2.5{allowed}.")
    centicores = Decimal(text) * 100
    if centicores != centicores.to_integral_value():
        raise ValueError("Cores are stored in hundredths: use at most two decimals (2.25, not 2.125).")
    if centicores > maximum:
        raise ValueError(f"At most {cores_text(maximum)} cores here.")
    return int(centicores)
