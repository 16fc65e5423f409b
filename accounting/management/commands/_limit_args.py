"""Operator input for the limit commands: cores like cueadmin, -1 for unlimited where it is.

Values are parsed in handle(), not by argparse, so a bad one is a CommandError with exit
status 2 both from the shell and from call_command. Cores follow the policy every face
shares (accounting.live.units.parse_cores: up to two decimals, the same refusals, word for
word, as the admin and the API). Counts (GPUs, priority) are whole: ASCII digits with an
optional minus sign and nothing else (int() would also take ' 7' and '٣'), and at most what
its column holds.
"""

import re

from django.core.management.base import CommandError

from accounting.limits.changes import WHOLE_CORES_COLUMNS, column_max
from accounting.live.units import CoresRefused, parse_cores

NUMBER = re.compile(r"-?[0-9]+")


def ascii_int(value: str) -> int:
    """int() of an optional minus and ASCII digits only; ValueError for anything else."""
    if not NUMBER.fullmatch(value):
        raise ValueError(value)
    return int(value)


def _whole(name: str, value: str, *, unlimited: bool, top: int) -> int:
    try:
        number = ascii_int(value)
    except ValueError:
        number = None
    if number is None or (number < 0 and not (unlimited and number == -1)):
        expected = "a whole number >= 0 or -1 (unlimited)" if unlimited else "a whole number >= 0"
        raise CommandError(
            f"--{name}: expected {expected} in ASCII digits, got {value!r}; nothing changed", returncode=2
        )
    if number > top:
        raise CommandError(
            f"--{name}: at most {top} (what the column holds), got {value}; nothing changed", returncode=2
        )
    return number


def _cores(name: str, value: str, *, unlimited: bool, top: int, whole: bool) -> int:
    try:
        return parse_cores(text=value, unlimited=unlimited, maximum=top, whole=whole)
    except CoresRefused as refused:
        raise CommandError(f"--{name}: {refused} (got {value!r}; nothing changed)", returncode=2) from None


def parse_limits(
    options: dict, *, model: type, cores: list[str], counts: list[str], unlimited: tuple[str, ...] = ()
) -> dict[str, int | None]:
    """{option: value in PG units} for the given options of `model`'s limits (option `x` is
    column `int_x`); cores become centicores. -1 is accepted only for the options in
    `unlimited` (where Cuebot reads it as unlimited)."""
    parsed: dict[str, int | None] = {}
    for name in cores + counts:
        raw = options[name]
        if raw is None:
            parsed[name] = None
            continue
        top = column_max(model=model, column=f"int_{name}")
        flag = name.replace("_", "-")
        if name in cores:
            parsed[name] = _cores(
                flag, raw, unlimited=name in unlimited, top=top, whole=(model, f"int_{name}") in WHOLE_CORES_COLUMNS
            )
        else:
            parsed[name] = _whole(flag, raw, unlimited=name in unlimited, top=top)
    if all(value is None for value in parsed.values()):
        flags = ", ".join("--" + name.replace("_", "-") for name in parsed)
        raise CommandError(f"nothing to change: give at least one of {flags}", returncode=2)
    return parsed
