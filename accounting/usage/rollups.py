"""Whole site days of Cuebot's runs, summed in the service's own schema, so that a report reads
rollups and the runs of the unrolled tail rather than a month of frame_history.

A watermark W (epoch seconds, one row) holds the rule: the rollups hold every run that stopped
at or before W, clipped to each rolled day. A report reads a rolled day as its rollup plus the
runs that stopped after W or are still open; an unrolled stretch from the runs alone. `roll_up`
moves W to `now` minus a lag (a run is stamped stopped at its closing transaction's start and
may commit a little later), adds the runs that stopped in between to the days already rolled
(a run open when its day was rolled is counted when it closes), then rolls the whole days that
ended by the new W, all in one transaction: W and the rows it covers change together, so a
rerun adds nothing twice. Rolled days are contiguous, so each step is one pass over its runs.
`rebuild` recomputes one day.

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
DAYS_PER_TRANSACTION = 31
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
    return Plan(raw=_merged(raw), above_raw=_merged(above_raw), rolled=rolled)


def _merged(pieces: list[Piece]) -> list[Piece]:
    """Adjacent pieces of one bucket read alike as one: a month of rolled days is one read of its tail."""
    merged: list[Piece] = []
    for piece in pieces:
        last = merged[-1] if merged else None
        if last and (last.bucket, last.after, last.hi) == (piece.bucket, piece.after, piece.lo):
            merged[-1] = Piece(last.lo, piece.hi, last.bucket, last.after)
        else:
            merged.append(piece)
    return merged


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
    """Bring the rollups up to `now` minus the lag; returns the days rolled. A site's first
    roll-up of a long history goes a month of days a transaction (each statement bounded)."""
    target = epoch(moment=now) - LAG_SECONDS
    rolled = 0
    while True:
        days = _roll_once(now=now, target=target)
        rolled += days
        if days < DAYS_PER_TRANSACTION:
            return rolled


def _roll_once(*, now: datetime, target: int) -> int:
    """One transaction: the runs closed since the watermark into the rolled days, and the next
    days (a month at most) that ended by `target`."""
    with transaction.atomic():
        lock_rollups(shared=False)
        _recheck_open_runs(now=now)
        watermark, _ = UsageWatermark.objects.get_or_create(id=1, defaults={"stopped_by": 0})
        days = [(row.day, row.lo, row.hi) for row in UsageRolledDay.objects.order_by("day")]
        stopped_by = max(target, watermark.stopped_by)
        with history.reading_history() as cursor:
            new = _new_days(cursor=cursor, last=days[-1][0] if days else None, target=target)[:DAYS_PER_TRANSACTION]
            # The runs closed since the watermark, into the days rolled, and every run of the new
            # days: one read of the runs they share.
            afters = [watermark.stopped_by] * len(days) + [0] * len(new)
            rows = history.closed_used(cursor=cursor, edges=_edges(days + new), afters=afters, stopped_by=stopped_by)
        _store_used(rows=rows, days=days + new)
        watermark.stopped_by = stopped_by
        watermark.save(update_fields=["stopped_by"])
        _roll_above(days=new, now=now)
        UsageRolledDay.objects.bulk_create(
            [UsageRolledDay(day=day, lo=lo, hi=hi, rolled_at=now) for day, lo, hi in new]
        )
    return len(new)


Day = tuple[date, int, int]  # a site day and its edges in epoch seconds


def _edges(days: list[Day]) -> list[int]:
    """Contiguous days' edges: each day's start, then the last one's end."""
    return [lo for _, lo, _ in days] + [days[-1][2]] if days else []


def _new_days(*, cursor, last: date | None, target: int) -> list[Day]:
    """The days after the last rolled one (or from the first run's) that ended by `target`."""
    if last is not None:
        day = last + timedelta(days=1)
    else:
        first = history.first_run_started(cursor=cursor)
        if first is None:
            return []
        day = datetime.fromtimestamp(first, tz=site_zone()).date()
    found = []
    while (hi := epoch(moment=midnight(day=day + timedelta(days=1)))) <= target:
        found.append((day, epoch(moment=midnight(day=day)), hi))
        day += timedelta(days=1)
    return found


def _store_used(*, rows: list[tuple], days: list[Day]) -> None:
    UsageRollup.objects.bulk_create(
        [
            UsageRollup(
                day=days[row[0] - 1][0],
                **dict(zip(KEY_FIELDS, row[1:7], strict=True)),
                outcome=row[7],
                centicore_seconds=row[8],
                gpu_seconds=row[9],
            )
            for row in rows
        ],
        batch_size=5000,
    )


def _roll_above(*, days: list[Day], now: datetime) -> None:
    """The days' time above size, from every run that met them and the sizes in force then; the
    runs still open are watched from the first of these days they met."""
    if not days:
        return
    terms = terms_between(since=midnight(day=days[0][0]), until=midnight(day=days[-1][0] + timedelta(days=1)), now=now)
    with history.reading_history() as cursor:
        rows = history.above_size_by_day(cursor=cursor, edges=_edges(days), terms=terms.terms, now=epoch(moment=now))
        open_runs = history.open_runs_before(cursor=cursor, hi=days[-1][2])
    UsageAboveSize.objects.bulk_create(
        [
            UsageAboveSize(day=days[i - 1][0], show_id=show, alloc_id=alloc, centicore_seconds=ccs)
            for i, show, alloc, ccs in rows
        ],
        batch_size=5000,
    )
    watched = set(UsageOpenRun.objects.values_list("run_id", flat=True))
    UsageOpenRun.objects.bulk_create(
        [
            UsageOpenRun(day=next(day for day, _, hi in days if started < hi), run_id=run_id)
            for run_id, started in open_runs
            if run_id not in watched
        ],
        batch_size=5000,
    )


def _recheck_open_runs(*, now: datetime) -> None:
    """Stop watching the runs that closed; recompute the time above size of the days from the
    first that counted a run Cuebot has since deleted."""
    watched = list(UsageOpenRun.objects.values_list("day", "run_id"))
    if not watched:
        return
    with history.reading_history() as cursor:
        still, gone = history.still_open(cursor=cursor, run_ids=sorted({run_id for _, run_id in watched}))
    UsageOpenRun.objects.exclude(run_id__in=still).delete()
    stale = [day for day, run_id in watched if run_id in gone]
    if stale:
        _redo_above(since=min(stale), now=now)


def _redo_above(*, since: date, now: datetime) -> None:
    """Recompute the time above size of the rolled days from `since` on."""
    days = [(row.day, row.lo, row.hi) for row in UsageRolledDay.objects.filter(day__gte=since).order_by("day")]
    UsageAboveSize.objects.filter(day__gte=since).delete()
    UsageOpenRun.objects.filter(day__gte=since).delete()
    _roll_above(days=days, now=now)


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
                cursor=cursor, edges=[rolled.lo, rolled.hi], afters=[0], stopped_by=watermark.stopped_by
            )
        _store_used(rows=rows, days=[(day, rolled.lo, rolled.hi)])
        _redo_above(since=day, now=now)
        return True
