"""A usage query: the period [since, until), the keys to group by and the bucket, read from what
the command, the API and the page are given, or refused in one line."""

from dataclasses import dataclass
from datetime import date, datetime

from accounting.usage.periods import PERIODS, midnight

KEYS = ("show", "allocation", "facility", "department", "user", "shot")


class UsageQueryError(ValueError):
    """A query refused: str() is the one line shown to the user."""


@dataclass(frozen=True)
class UsageQuery:
    since: datetime
    until: datetime
    by: tuple[str, ...]
    per: str | None


def _when(*, value: str, name: str) -> datetime:
    """An ISO 8601 date (the site's midnight) or a date-time with an offset, in whole seconds."""
    text = value.strip()
    try:
        if len(text) == 10:
            return midnight(day=date.fromisoformat(text))
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageQueryError(
            f"{name} {value!r} is not an ISO 8601 date (2026-11-01) or date-time with offset"
        ) from None
    if moment.tzinfo is None:
        raise UsageQueryError(f"{name} {value!r} has no offset: give one (2026-11-01T06:00:00+00:00) or a date")
    if moment.microsecond:
        raise UsageQueryError(f"{name} {value!r}: runs are stamped in whole seconds; give whole seconds")
    return moment


def _keys(*, by: str) -> tuple[str, ...]:
    keys = tuple(key.strip() for key in by.split(","))
    unknown = [key for key in keys if key not in KEYS]
    if unknown:
        named = ", ".join(repr(key) for key in unknown)
        raise UsageQueryError(f"unknown grouping {named}: group by any of {', '.join(KEYS)}")
    if len(set(keys)) != len(keys):
        raise UsageQueryError(f"grouping {by!r} names a key twice")
    return keys


def parse_query(*, since: str, until: str, by: str = "show", per: str | None = None) -> UsageQuery:
    """The query of `manage.py acct_usage` and the API, or UsageQueryError in one line."""
    start, end = _when(value=since, name="since"), _when(value=until, name="until")
    if end <= start:
        raise UsageQueryError(f"the period ends ({until}) before or when it starts ({since}); until is exclusive")
    if per is not None and per not in PERIODS:
        raise UsageQueryError(f"unknown period {per!r}: per day, week or month")
    return UsageQuery(since=start, until=end, by=_keys(by=by), per=per)
