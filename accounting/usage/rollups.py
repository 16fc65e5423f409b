"""Whole site days of Cuebot's runs, summed in the service's own schema, so that a report reads
rollups and the runs of the unrolled tail rather than a month of frame_history.

A watermark W (epoch seconds, one row) holds the rule: the rollups hold every run that stopped
at or before W, clipped to each rolled day. A report reads a rolled day as its rollup plus the
runs that stopped after W or are still open; an unrolled stretch from the runs alone. `roll_up`
moves W to `now` minus a lag (a run is stamped stopped at its closing transaction's start and
may commit a little later), adds the runs that stopped in between to the days already rolled
(a run open when its day was rolled is counted when it closes), then rolls the whole days that
ended by the new W, one transaction a day: W and the rows it covers change together, so a rerun
adds nothing twice. `rebuild` recomputes one day.

The time above size is not a sum of runs (it depends on every run at each instant), so a day's
is computed once from every run that met it, open ones to the day's end (where they still are
when the day is over). Those open runs are watched (UsageOpenRun) until they close: Cuebot
deletes an open run stopped with exit status 299, and a day that counted one is recomputed.
"""

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Sum

from accounting.models import UsageAboveSize, UsageOpenRun, UsageRolledDay, UsageRollup, UsageWatermark
from accounting.usage import history
from accounting.usage.history import Piece
from accounting.usage.periods import Bucket, days_within, epoch, midnight, site_zone
from accounting.usage.terms import terms_between

# How long after a run's stamped stop it may still commit: runs are rolled up only past it.
LAG_SECONDS = 600
ROLLUP_LOCK = 0x61637572  # "acur": one roll-up at a time, and a report's reads of the rollups beside it
KEY_FIELDS = ("show_id", "alloc_id", "facility_id", "dept_id", "user", "shot")


@dataclass(frozen=True)
class Plan:
    """What a report reads: `raw` pieces from the runs (used figures), `above_raw` pieces for the
    time above size, and (day, bucket) rolled days from the rollups."""

    raw: list[Piece]
    above_raw: list[Piece]
    rolled: list[tuple[date, int]]


def plan(*, buckets: list[Bucket], use_rollups: bool = True) -> Plan:
    """The report's buckets cut into rolled days and stretches read raw."""
    rolled_days, watermark = _rolled_state() if use_rollups else (set(), 0)
    raw, above_raw, rolled = [], [], []
    for index, bucket in enumerate(buckets):
        for day, lo, hi in days_within(lo=bucket.lo, hi=bucket.hi):
            if lo >= bucket.lo and hi <= bucket.hi and day in rolled_days:
                rolled.append((day, index))
                raw.append(Piece(lo, hi, index, after=watermark))
            else:
                piece = Piece(max(lo, bucket.lo), min(hi, bucket.hi), index)
                raw.append(piece)
                above_raw.append(piece)
    return Plan(raw=raw, above_raw=above_raw, rolled=rolled)


def _rolled_state() -> tuple[set[date], int]:
    row = UsageWatermark.objects.first()
    return set(UsageRolledDay.objects.values_list("day", flat=True)), (row.stopped_by if row else 0)


def rolled_used(*, rolled: list[tuple[date, int]], fields: tuple[str, ...]) -> list[tuple]:
    """(bucket, *fields, outcome, centicore-seconds, GPU-seconds) from the rollups of these days."""
    if not rolled:
        return []
    bucket_of = dict(rolled)
    rows = (
        UsageRollup.objects.filter(day__in=list(bucket_of))
        .values("day", *fields, "outcome")
        .annotate(ccs=Sum("centicore_seconds"), gpu=Sum("gpu_seconds"))
    )
    return [
        (bucket_of[row["day"]], *(row[field] for field in fields), row["outcome"], row["ccs"], row["gpu"])
        for row in rows
    ]


def rolled_above(*, rolled: list[tuple[date, int]]) -> list[tuple]:
    """(bucket, show id, alloc id, centicore-seconds above size) from the rollups of these days."""
    if not rolled:
        return []
    bucket_of = dict(rolled)
    rows = UsageAboveSize.objects.filter(day__in=list(bucket_of)).values_list(
        "day", "show_id", "alloc_id", "centicore_seconds"
    )
    return [(bucket_of[day], show, alloc, ccs) for day, show, alloc, ccs in rows]


def lock_rollups(*, shared: bool) -> None:
    """Held for the transaction: a roll-up alone (exclusive), reports beside each other (shared)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pg_advisory_xact_lock{'_shared' if shared else ''}(%s)", [ROLLUP_LOCK])


def roll_up(*, now: datetime) -> int:
    """Bring the rollups up to `now` minus the lag; returns how many days it rolled."""
    target = epoch(moment=now) - LAG_SECONDS
    with transaction.atomic():
        lock_rollups(shared=False)
        _recheck_open_runs(now=now)
    rolled = 0
    while True:
        with transaction.atomic():
            lock_rollups(shared=False)
            if not _advance(target=target, now=now):
                return rolled
        rolled += 1


def _advance(*, target: int, now: datetime) -> bool:
    """Add the runs stopped since the watermark to the rolled days and roll the next whole day
    if it ended by `target`; True when a day was rolled."""
    watermark, _ = UsageWatermark.objects.get_or_create(id=1, defaults={"stopped_by": 0})
    days = list(UsageRolledDay.objects.order_by("day"))
    with history.reading_history() as cursor:
        following = _next_day(cursor=cursor, days=days, target=target)
        if watermark.stopped_by >= target and following is None:
            return False
        moved = watermark.stopped_by < target
        pieces = [Piece(day.lo, day.hi, index, after=watermark.stopped_by) for index, day in enumerate(days) if moved]
        if following is not None:
            pieces.append(Piece(following[1], following[2], len(days)))
        rows = history.closed_used(cursor=cursor, pieces=pieces, stopped_by=max(target, watermark.stopped_by))
    _store_used(rows=rows, days=[day.day for day in days] + ([following[0]] if following else []))
    watermark.stopped_by = max(target, watermark.stopped_by)
    watermark.save(update_fields=["stopped_by"])
    if following is None:
        return False
    _roll_above(day=following[0], lo=following[1], hi=following[2], now=now)
    UsageRolledDay.objects.create(day=following[0], lo=following[1], hi=following[2], rolled_at=now)
    return True


def _next_day(*, cursor, days: list[UsageRolledDay], target: int) -> tuple[date, int, int] | None:
    """The day after the last rolled one (or the first run's), if it ended by `target`."""
    if days:
        day = days[-1].day + timedelta(days=1)
    else:
        first = history.first_run_started(cursor=cursor)
        if first is None:
            return None
        day = datetime.fromtimestamp(first, tz=site_zone()).date()
    lo, hi = epoch(moment=midnight(day=day)), epoch(moment=midnight(day=day + timedelta(days=1)))
    return (day, lo, hi) if hi <= target else None


def _store_used(*, rows: list[tuple], days: list[date]) -> None:
    UsageRollup.objects.bulk_create(
        [
            UsageRollup(
                day=days[row[0]],
                **dict(zip(KEY_FIELDS, row[1:7], strict=True)),
                outcome=row[7],
                centicore_seconds=row[8],
                gpu_seconds=row[9],
            )
            for row in rows
        ],
        batch_size=5000,
    )


def _roll_above(*, day: date, lo: int, hi: int, now: datetime) -> None:
    """The day's time above size, from every run that met it and the sizes in force then."""
    terms = terms_between(since=midnight(day=day), until=midnight(day=day + timedelta(days=1)), now=now)
    with history.reading_history() as cursor:
        rows = history.above_size(cursor=cursor, pieces=[Piece(lo, hi, 0)], terms=terms.terms, now=epoch(moment=now))
        open_runs = history.open_runs_before(cursor=cursor, hi=hi)
    UsageAboveSize.objects.bulk_create(
        [UsageAboveSize(day=day, show_id=show, alloc_id=alloc, centicore_seconds=ccs) for _, show, alloc, ccs in rows]
    )
    UsageOpenRun.objects.bulk_create([UsageOpenRun(day=day, run_id=run_id) for run_id in open_runs], batch_size=5000)


def _recheck_open_runs(*, now: datetime) -> None:
    """Stop watching the runs that closed; recompute the time above size of the days that
    counted a run Cuebot has since deleted."""
    watched = list(UsageOpenRun.objects.values_list("day", "run_id"))
    if not watched:
        return
    with history.reading_history() as cursor:
        still, gone = history.still_open(cursor=cursor, run_ids=sorted({run_id for _, run_id in watched}))
    UsageOpenRun.objects.exclude(run_id__in=still).delete()
    for day in sorted({day for day, run_id in watched if run_id in gone}):
        _redo_above(day=day, now=now)


def _redo_above(*, day: date, now: datetime) -> None:
    rolled = UsageRolledDay.objects.get(day=day)
    UsageAboveSize.objects.filter(day=day).delete()
    UsageOpenRun.objects.filter(day=day).delete()
    _roll_above(day=day, lo=rolled.lo, hi=rolled.hi, now=now)


def rebuild(*, day: date, now: datetime) -> bool:
    """Recompute a rolled day from the runs (the rows it had are replaced); False if not rolled."""
    with transaction.atomic():
        lock_rollups(shared=False)
        rolled = UsageRolledDay.objects.filter(day=day).first()
        if rolled is None:
            return False
        watermark = UsageWatermark.objects.get(id=1)
        UsageRollup.objects.filter(day=day).delete()
        with history.reading_history() as cursor:
            rows = history.closed_used(
                cursor=cursor, pieces=[Piece(rolled.lo, rolled.hi, 0)], stopped_by=watermark.stopped_by
            )
        _store_used(rows=rows, days=[day])
        _redo_above(day=day, now=now)
        return True
