#!/usr/bin/env python
"""The usage report's rollups and reads on a month of Cuebot's history at Maestro's proof size.

    DATABASE_URL=postgres://.../usage_bench ACCOUNTING_SCHEDULER=maestro \
        nice -n 10 .venv/bin/python bench/usage.py [--days 30] [--runs-per-day 480000] [--rounds 5]

Why: frame_history is a farm's biggest table and is never pruned; Maestro's proof farm (20,000
procs of one-hour frames) adds about 480,000 runs a day, 14 million a month. The report reads
whole days from the service's rollups, so the three costs that matter are the first rollup of a
month, a month's report, and the rollup of each new day.

Run it on a scratch database of its own (it builds the demo farm at MAESTRO_PROOF, then writes
--days + 1 days of runs with simulator.farm_history, one INSERT ... SELECT a day, Cuebot's
indexes on frame_history dropped for the load and built again after), migrated first
(`manage.py migrate`); drop the database afterwards: the month takes a few GB. Then, in one
process, on a timeline it sets (`now` given to each call, so that nothing depends on the clock):

- the first rollup (accounting.usage.rollups.roll_up) of --days days, against the bare aggregate
  over the same rows: one statement that splits each run closed by the watermark into the site
  days it meets, clipped to each, and sums it per day, show, allocation, facility, department,
  user, shot and outcome, fetched; and against that plus the time above size of each day (the
  rollup computes both), estimated as --days times one day's bare statement;
- the next day's rollup, once its runs have closed;
- then a month's report by show and allocation (accounting.usage.report.usage_report), median of
  --rounds, the rollups read.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

import django  # noqa: E402

django.setup()

from demo_sized import build_timed  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from accounting.models import SubscriptionTerm, UsageAboveSize, UsageRolledDay, UsageRollup, UsageWatermark  # noqa: E402
from accounting.usage import history, rollups  # noqa: E402
from accounting.usage.report import parse_query, usage_report  # noqa: E402
from accounting.usage.terms import record_terms, terms_between  # noqa: E402
from simulator.farm_builder import MAESTRO_PROOF  # noqa: E402
from simulator.farm_history import DAY, HistoryShape, demo_structure, settle_jobs, write_past  # noqa: E402

# Each run split into the site days it meets (UTC days here: the bench's settings), clipped to
# each, summed per day and key: the least a rollup of these rows must compute.
BARE_USED = f"""
SELECT d.lo, jh.pk_show, fh.pk_alloc, jh.pk_facility, jh.pk_dept, jh.str_user, jh.str_shot,
       CASE WHEN fh.int_exit_status = 0 THEN 'succeeded' ELSE 'failed' END,
       SUM(fh.int_cores::bigint * (LEAST(fh.int_ts_stopped, d.lo + {DAY}) - GREATEST(fh.int_ts_started, d.lo))),
       SUM(fh.int_gpus::bigint * (LEAST(fh.int_ts_stopped, d.lo + {DAY}) - GREATEST(fh.int_ts_started, d.lo)))
  FROM frame_history fh JOIN job_history jh ON jh.pk_job = fh.pk_job
 CROSS JOIN LATERAL generate_series(
        GREATEST(%(since)s, %(since)s + (fh.int_ts_started - %(since)s) / {DAY} * {DAY}),
        LEAST(%(until)s - {DAY}, %(since)s + (fh.int_ts_stopped - 1 - %(since)s) / {DAY} * {DAY}), {DAY}) AS d(lo)
 WHERE fh.int_ts_stopped > %(since)s AND fh.int_ts_stopped <= %(by)s AND fh.int_ts_started < %(until)s
 GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
"""


def moment(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def load(*, shape: HistoryShape, hosts: int) -> None:
    """Every day of the shape's runs, frame_history's indexes (Cuebot's) dropped meanwhile and
    its triggers (the day stamp and the key to job_history, both satisfied by construction) off."""
    structure = demo_structure()
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'frame_history'")
        indexes = [(name, sql) for name, sql in cursor.fetchall() if not name.endswith("_pk")]
        for name, _ in indexes:
            cursor.execute(f"DROP INDEX {name}")
        cursor.execute("SET session_replication_role = replica")
    started = time.perf_counter()
    try:
        for day in range(shape.days):
            with transaction.atomic():
                runs = range(day * shape.runs_per_day, (day + 1) * shape.runs_per_day)
                write_past(shape=shape, structure=structure, hosts=hosts, runs=runs, settle=False)
            print(f"  day {day + 1}/{shape.days}: {shape.runs_per_day:,} runs, {time.perf_counter() - started:.0f} s")
    finally:  # a load stopped half-way leaves Cuebot's indexes, or a rerun would find none to keep
        with connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = DEFAULT")
            for _, sql in indexes:
                cursor.execute(sql)
    print(f"  indexes built again, {time.perf_counter() - started:.0f} s")
    settle_jobs(shape=shape)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE frame_history")
        cursor.execute("VACUUM ANALYZE job_history")
    print(f"history: {shape.runs:,} runs of {shape.jobs:,} jobs in {time.perf_counter() - started:.0f} s")


def bare_used(*, since: int, until: int, by: int) -> tuple[float, list[tuple]]:
    """Seconds of the bare used aggregate over the month (BARE_USED), fetched, and its rows."""
    started = time.perf_counter()
    with history.reading_history() as cursor:
        cursor.execute(BARE_USED, {"since": since, "until": until, "by": by})
        rows = cursor.fetchall()
    return time.perf_counter() - started, rows


def rollups_from_bare(*, rows: list[tuple], since: int, month_end: int, rolled_at: datetime) -> None:
    """The state the first rollup leaves, written from the bare aggregate's rows (the same sums per
    day and key: the rolled-up figures equal the raw ones), where rolling the month takes too long
    to wait for: the new day's rollup and the report read it as they would read the rollup's. The
    time above size is left out (its rows are a few per day; the report reads them alike)."""
    forget_rollups()
    UsageRollup.objects.bulk_create(
        [
            UsageRollup(
                day=moment(lo).date(),
                **dict(zip(rollups.KEY_FIELDS, keys, strict=True)),
                outcome=outcome,
                centicore_seconds=ccs,
                gpu_seconds=gpu,
            )
            for lo, *keys, outcome, ccs, gpu in rows
        ],
        batch_size=5000,
    )
    UsageRolledDay.objects.bulk_create(
        [
            UsageRolledDay(day=moment(lo).date(), lo=lo, hi=lo + DAY, rolled_at=rolled_at)
            for lo in range(since, month_end, DAY)
        ]
    )
    UsageWatermark.objects.create(id=1, stopped_by=month_end)


def bare_above_one_day(*, lo: int, now: datetime) -> float:
    """Seconds of one day's bare time above size (history's statement, on its own): the rollup
    computes it once a day, so a month costs about as many times this."""
    terms = terms_between(since=moment(lo), until=moment(lo + DAY), now=now)
    started = time.perf_counter()
    with history.reading_history() as cursor:
        history.above_size(cursor=cursor, pieces=[history.Piece(lo, lo + DAY, 0)], terms=terms.terms, now=lo + DAY)
    return time.perf_counter() - started


def forget_rollups() -> None:
    for model in (UsageRollup, UsageAboveSize, UsageRolledDay, UsageWatermark):
        model.objects.all().delete()


def first_rollup(*, now: datetime) -> float:
    forget_rollups()
    started = time.perf_counter()
    rolled = rollups.roll_up(now=now)
    took = time.perf_counter() - started
    print(f"  first rollup: {rolled} days in {took:.2f} s")
    return took


def report_s(*, since: int, until: int, now: datetime, rounds: int) -> float:
    query = parse_query(since=moment(since).isoformat(), until=moment(until).isoformat(), by="show,allocation")
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        report = usage_report(query=query, now=now)
        samples.append(time.perf_counter() - started)
    print(
        f"  a month by show x allocation: {len(report.rows)} rows, median of {rounds} {statistics.median(samples):.3f} s"
    )
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs-per-day", type=int, default=480_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-load", action="store_true", help="the history is already there (a second run)")
    parser.add_argument(
        "--rollups-from-bare",
        action="store_true",
        help="no first rollup: the month's rollups written from the bare aggregate's rows (rollups_from_bare)",
    )
    parser.add_argument(
        "--keep-rollups", action="store_true", help="the month is rolled up already: measure from the bare aggregate on"
    )
    args = parser.parse_args()
    today = datetime.now(tz=timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    until = int(today.timestamp())
    # One day more than the month: the new day rolled up after it.
    shape = HistoryShape(until=until, days=args.days + 1, runs_per_day=args.runs_per_day, namespace="bench")
    if not args.skip_load:
        load(shape=shape, hosts=build_timed(size=MAESTRO_PROOF).hosts)
    if not SubscriptionTerm.objects.exists():
        record_terms(now=moment(shape.since - DAY))  # as if the service had watched every subscription all month
    month_end = shape.since + args.days * DAY
    print(f"{shape.runs:,} runs over {shape.days} days; the month is the first {args.days}")
    measure(
        since=shape.since,
        month_end=month_end,
        rounds=args.rounds,
        keep_rollups=args.keep_rollups,
        from_bare=args.rollups_from_bare,
    )


def measure(*, since: int, month_end: int, rounds: int, keep_rollups: bool, from_bare: bool) -> None:
    """The first rollup against the bare aggregate, the new day's rollup, then the month's report."""
    rolled_at = moment(month_end + rollups.LAG_SECONDS)
    ours = None if keep_rollups or from_bare else first_rollup(now=rolled_at)
    used_s, rows = bare_used(since=since, until=month_end, by=month_end)
    if from_bare:
        rollups_from_bare(rows=rows, since=since, month_end=month_end, rolled_at=rolled_at)
    above_s = bare_above_one_day(lo=month_end - DAY, now=rolled_at)
    days = (month_end - since) // DAY
    print(f"  bare: the used aggregate {used_s:.2f} s; one day's time above size {above_s:.2f} s")
    if ours is not None:
        print(
            f"  the first rollup {ours / used_s:.2f}x the used aggregate; "
            f"{ours / (used_s + days * above_s):.2f}x it and {days} days above size (estimated from one)"
        )
    started = time.perf_counter()
    next_day = moment(month_end + DAY + rollups.LAG_SECONDS)
    rolled = rollups.roll_up(now=next_day)
    print(f"  the new day's rollup: {rolled} day in {time.perf_counter() - started:.2f} s")
    # Read once the new day is rolled: every run of the table stopped by the watermark then, as on
    # a site, where no run stops after now (the month's report right after the first rollup would
    # find the new day's runs, written ahead of that `now`, after its watermark).
    report_s(since=since, until=month_end, now=next_day, rounds=rounds)


if __name__ == "__main__":
    main()
