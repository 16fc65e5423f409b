"""Operator input for the limit commands: cores like cueadmin, -1 for unlimited where it is.

Values are parsed in handle(), not by argparse, so a bad one is a CommandError with exit
status 2 both from the shell and from call_command.
"""
from django.core.management.base import CommandError

from accounting.units import centicores_from_cores


def _whole(name: str, value: str, *, unlimited: bool) -> int:
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or (number < 0 and not (unlimited and number == -1)):
        expected = "a whole number >= 0 or -1 (unlimited)" if unlimited else "a whole number >= 0"
        raise CommandError(f"--{name}: expected {expected}, got {value!r}", returncode=2)
    return number


def parse_limits(options: dict, *, cores: list[str], counts: list[str], unlimited: tuple[str, ...] = ()) -> dict[str, int | None]:
    """{option: value in PG units} for the given options; cores become centicores. -1 is
    accepted only for the options in `unlimited` (where Cuebot reads it as unlimited)."""
    parsed: dict[str, int | None] = {}
    for name in cores + counts:
        raw = options[name]
        if raw is None:
            parsed[name] = None
            continue
        number = _whole(name.replace("_", "-"), raw, unlimited=name in unlimited)
        parsed[name] = centicores_from_cores(number) if name in cores else number
    if all(value is None for value in parsed.values()):
        flags = ", ".join("--" + name.replace("_", "-") for name in parsed)
        raise CommandError(f"nothing to change: give at least one of {flags}", returncode=2)
    return parsed
