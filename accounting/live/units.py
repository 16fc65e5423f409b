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
(accounting.reconcile.redis_against_pg). GPUs are whole units and never pass through here.

It is also where cores meet people: how a stored value reads (cores_text, format_cores,
cores_number) and the one policy for cores a person types (parse_cores), which the admin,
the commands and the API all call, so each accepts and refuses the same input with the
same message.
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
    """Human display of a stored centicore value: '2.5 cores', '1 core', 'unlimited'. Exact
    whatever the size (never '1e+12 cores')."""
    if centicores == UNLIMITED:
        return UNLIMITED_WORD
    text = cores_text(centicores)
    return f"{text} core" if text == "1" else f"{text} cores"


def cores_text(centicores: int) -> str:
    """A stored centicore value as an operator types it: '2.5', '200', 'unlimited' (-1)."""
    if centicores == UNLIMITED:
        return UNLIMITED_WORD
    text = hundredths_text(centicores)
    return text.rstrip("0") if not text.endswith(".00") else text[:-3]


def hundredths_text(centicores: int) -> str:
    """Centicores as cores with both decimals, as PostgreSQL keeps them: '4.00', '-2.50'. Integer
    arithmetic, not float: exact at any size (a float prints 10**14 as 1e+14); a PostgreSQL SUM
    arrives as a whole Decimal, and int() of it is exact."""
    centicores = int(centicores)
    whole, hundredths = divmod(abs(centicores), 100)
    return f"{'-' if centicores < 0 else ''}{whole}.{hundredths:02d}"


def signed_cores(centicores: int) -> int | float:
    """A count or a difference of centicores as a number of cores, exact (2.5, never 2) and signed:
    below zero, where cores_number's -1 would read as unlimited, the magnitude is converted and
    the sign put back."""
    magnitude = cores_number(abs(centicores))
    return -magnitude if centicores < 0 else magnitude


def cores_number(centicores: int) -> int | float:
    """A stored centicore value as a JSON number of cores: an integer when whole (exact at any
    size), -1 verbatim, else a float, whose shortest form is the two-decimal value exactly
    up to 15 significant digits (every integer column, and a size, fit)."""
    if centicores == UNLIMITED or centicores % 100 == 0:
        return UNLIMITED if centicores == UNLIMITED else centicores // 100
    return float(cores_text(centicores))


# --- What a person types: one policy for the admin, the commands and the API ------------
#
# A number of cores in ASCII digits with at most two decimals (PostgreSQL stores hundredths
# of a core: 2.5 and 0.25 are exact, 2.125 is not and is refused rather than rounded), up to
# what the column holds; -1 (or the word 'unlimited') only where Cuebot reads -1 as
# unlimited. Every face calls parse_cores and shows its message unchanged, so an operator
# reads the same sentence whichever face refused the value.


class CoresRefused(ValueError):
    """Input in cores that cannot be stored as typed; str() is the message for a person."""


def not_a_number(*, unlimited: bool) -> CoresRefused:
    """The refusal of anything that is not a number of cores (also for a face's non-text input,
    such as a JSON string or boolean)."""
    allowed = ", or -1 for unlimited" if unlimited else ""
    return CoresRefused(f"Enter a number of cores such as 4, 2.5 or 0.25{allowed}.")


TOO_FINE = "Cores are stored in hundredths: use at most two decimals (2.25, not 2.125)."
WHOLE_CORES = (
    "Cuebot keeps this cap in whole cores (its own setters round to whole cores): enter a whole number, such as 4."
)
NOT_UNLIMITED_HERE = "-1 is not unlimited here (Cuebot compares this limit as a number): enter 0 or more cores."


def parse_cores(*, text: str, unlimited: bool, maximum: int, whole: bool = False) -> int:
    """Operator input in cores to centicores, exactly, or CoresRefused.

    `unlimited`: -1 and 'unlimited' are taken (and stored as -1); `maximum`: the column's
    largest value, in centicores (accounting.limits.changes.column_max); `whole`: a cap Cuebot
    keeps in whole cores (accounting.limits.changes.WHOLE_CORES_COLUMNS)."""
    if text.lower() in (UNLIMITED_WORD, "-1"):
        if unlimited:
            return UNLIMITED
        raise CoresRefused(NOT_UNLIMITED_HERE)
    if not _CORES_TEXT.fullmatch(text):
        raise not_a_number(unlimited=unlimited)
    centicores = Decimal(text) * 100
    if centicores != centicores.to_integral_value():
        raise CoresRefused(TOO_FINE)
    top = maximum - maximum % 100 if whole else maximum
    if centicores > top:
        raise CoresRefused(f"At most {cores_text(top)} cores here.")
    if whole and centicores % 100:
        raise CoresRefused(WHOLE_CORES)
    return int(centicores)
