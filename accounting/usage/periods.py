"""A report's period cut into buckets (day, week, month) and site days, in the site's time zone.

Every edge is a local midnight turned into epoch seconds by zoneinfo, so a day of 23 or 25 hours
is as long as the clocks made it. Epoch seconds are what Cuebot's history stamps its runs with.
"""

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings

PERIODS = ("day", "week", "month")


def site_zone() -> ZoneInfo:
    return ZoneInfo(settings.TIME_ZONE)


def midnight(*, day: date) -> datetime:
    """The local midnight that opens `day` (aware, in the site's zone)."""
    return datetime(day.year, day.month, day.day, tzinfo=site_zone())


def epoch(*, moment: datetime) -> int:
    return int(moment.timestamp())


@dataclass(frozen=True)
class Bucket:
    """One row period of a report: `start` its label (the bucket's local start), [lo, hi) the
    part of it inside the report's period, in epoch seconds."""

    start: datetime
    lo: int
    hi: int


def bucket_start(*, day: date, per: str) -> date:
    if per == "week":
        return day - timedelta(days=day.weekday())
    if per == "month":
        return day.replace(day=1)
    return day


def next_start(*, day: date, per: str) -> date:
    if per == "week":
        return day + timedelta(days=7)
    if per == "month":
        return (day.replace(day=28) + timedelta(days=4)).replace(day=1)
    return day + timedelta(days=1)


def buckets(*, since: datetime, until: datetime, per: str | None) -> list[Bucket]:
    """The buckets of [since, until): one for the whole period without `per`."""
    lo, hi = epoch(moment=since), epoch(moment=until)
    if per is None:
        return [Bucket(start=since, lo=lo, hi=hi)]
    found = []
    day = bucket_start(day=since.astimezone(site_zone()).date(), per=per)
    while epoch(moment=midnight(day=day)) < hi:
        following = next_start(day=day, per=per)
        edge_lo, edge_hi = epoch(moment=midnight(day=day)), epoch(moment=midnight(day=following))
        if edge_hi > lo:
            found.append(Bucket(start=midnight(day=day), lo=max(lo, edge_lo), hi=min(hi, edge_hi)))
        day = following
    return found


def days_within(*, lo: int, hi: int) -> list[tuple[date, int, int]]:
    """The site days that meet [lo, hi), each as (day, its first second, the second after its last)."""
    zone = site_zone()
    day = datetime.fromtimestamp(lo, tz=zone).date()
    found = []
    while epoch(moment=midnight(day=day)) < hi:
        following = day + timedelta(days=1)
        found.append((day, epoch(moment=midnight(day=day)), epoch(moment=midnight(day=following))))
        day = following
    return found
