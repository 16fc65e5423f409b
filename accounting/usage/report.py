"""Usage over any period, exact, from Cuebot's own history: the contract the command
(`manage.py acct_usage`), the API and the admin page share (docs/usage.md).

A query names a period [since, until), the keys to group by and optionally a bucket (day, week,
month in the site's time zone). The report sums every run of every frame clipped to the period
and its buckets, to the second, split by outcome as Cuebot splits a job's core time (exit status
0 succeeded, any other failed) and running (open runs, counted to `now`). Grouped by show and
allocation and nothing finer, it adds what each subscription was promised (size x time, from the
service's own record of sizes, accounting.usage.terms) and the time its runs held more than the
size then in force. Figures are kept as integers (centicore-seconds) and leave as Decimal hours.
"""

import csv
import io
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from accounting.usage import history, rollups
from accounting.usage.history import HistoryNotGranted
from accounting.usage.job_totals import JobMismatch, reconcile_jobs
from accounting.usage.periods import PERIODS, Bucket, buckets, epoch
from accounting.usage.query import KEYS, UsageQuery, UsageQueryError, parse_query
from accounting.usage.terms import Terms, terms_between

__all__ = [
    "KEYS",
    "PERIODS",
    "HistoryNotGranted",
    "JobMismatch",
    "UnknownPromise",
    "UsageQuery",
    "UsageQueryError",
    "UsageReport",
    "history_health",
    "parse_query",
    "reconcile_jobs",
    "report_csv",
    "report_json",
    "report_table",
    "usage_report",
]

FIGURES = ("core_hours", "core_hours_succeeded", "core_hours_failed", "core_hours_running", "gpu_hours")
PROMISE_FIGURES = ("promised_core_hours", "core_hours_above_size")
# The rollups' field for each key.
ID_FIELDS = {
    "show": "show_id",
    "allocation": "alloc_id",
    "facility": "facility_id",
    "department": "dept_id",
    "user": "user",
    "shot": "shot",
}
CENTICORE_SECONDS_PER_CORE_HOUR = 360_000
SIX_PLACES = Decimal("0.000001")


def promise_applies(*, by: tuple[str, ...]) -> bool:
    """Promises are per subscription: they add up over shows and allocations, not finer keys."""
    return set(by) <= {"show", "allocation"}


@dataclass(frozen=True)
class UnknownPromise:
    """No size was recorded for this subscription over [since, until): its promise is unknown."""

    show: str
    allocation: str
    since: datetime
    until: datetime


@dataclass
class UsageReport:
    query: UsageQuery
    columns: tuple[str, ...]
    rows: list[dict[str, str | Decimal | None]]
    as_of: datetime
    # Set when open runs are in the figures: counted to this instant.
    running_to: datetime | None = None
    unknown_promises: list[UnknownPromise] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def columns_for(*, query: UsageQuery) -> tuple[str, ...]:
    promise = PROMISE_FIGURES if promise_applies(by=query.by) else ()
    return (*query.by, *(("period",) if query.per else ()), *FIGURES, *promise)


def hours(centicore_seconds: int, *, per_hour: int = CENTICORE_SECONDS_PER_CORE_HOUR) -> Decimal:
    return (Decimal(centicore_seconds) / per_hour).quantize(SIX_PLACES)


OUTCOMES = ("succeeded", "failed", "running")


@dataclass
class Tally:
    """A period's figures at the ids' level, before names and hours."""

    buckets: list[Bucket]
    fetched: tuple[str, ...]
    now_s: int
    used: dict[tuple, list[int]] = field(default_factory=dict)
    above: dict[tuple, int] = field(default_factory=dict)
    terms: Terms | None = None
    names: dict[tuple[str, str], str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add_used(self, rows: list[tuple]) -> None:
        """(bucket, *ids, outcome, centicore-seconds, GPU-seconds) rows into the tallies."""
        for *where, outcome, centicore_seconds, gpu_seconds in rows:
            figures = self.used.setdefault(tuple(where), [0, 0, 0, 0])
            figures[OUTCOMES.index(outcome)] += int(centicore_seconds)
            figures[3] += int(gpu_seconds)

    def add_above(self, rows: list[tuple]) -> None:
        for bucket, show_id, alloc_id, centicore_seconds in rows:
            key = (bucket, show_id, alloc_id)
            self.above[key] = self.above.get(key, 0) + int(centicore_seconds)


def tally(*, query: UsageQuery, now: datetime, use_rollups: bool = True) -> Tally:
    """Every figure of the report by ids: rollups and raw runs read under the rollups' shared lock,
    so a roll-up never lands between reading the watermark and the rows it covers."""
    promise = promise_applies(by=query.by)
    found = Tally(
        buckets=buckets(since=query.since, until=query.until, per=query.per),
        fetched=("show", "allocation") if promise else query.by,
        now_s=epoch(moment=now),
    )
    now_s = found.now_s
    with transaction.atomic():
        rollups.lock_rollups(shared=True)
        plan = rollups.plan(buckets=found.buckets, use_rollups=use_rollups)
        found.add_used(rollups.rolled_used(rolled=plan.rolled, fields=tuple(ID_FIELDS[k] for k in found.fetched)))
        if promise:
            found.terms = terms_between(since=query.since, until=query.until, now=now)
            found.add_above(rollups.rolled_above(rolled=plan.rolled))
        with history.reading_history() as cursor:
            found.add_used(history.used(cursor=cursor, pieces=plan.raw, keys=found.fetched, now=now_s))
            if found.terms is not None:
                found.add_above(
                    history.above_size(cursor=cursor, pieces=plan.above_raw, terms=found.terms.terms, now=now_s)
                )
            found.names = history.names(cursor=cursor, ids=_ids(found))
            found.problems = _health_lines(cursor=cursor)
    return found


def _ids(found: Tally) -> dict[str, set[str]]:
    ids: dict[str, set[str]] = {}
    for where in found.used:
        for key, value in zip(found.fetched, where[1:], strict=True):
            ids.setdefault(key, set()).add(value)
    if found.terms is not None:
        for show_id, alloc_id in found.terms.names:
            ids.setdefault("show", set()).add(show_id)
            ids.setdefault("allocation", set()).add(alloc_id)
    return ids


def _health_lines(*, cursor) -> list[str]:
    disabled, stale_open, unrecorded = history.health(cursor=cursor)
    lines = []
    if disabled:
        lines.append(
            "DISABLE_HISTORY is set in Cuebot's config table: Cuebot records no runs while it is, "
            "so the figures miss whatever ran meanwhile"
        )
    if stale_open:
        lines.append(
            f"{stale_open} open run(s) in frame_history belong to frames no longer running: "
            "they are counted as running to now until Cuebot closes them"
        )
    if unrecorded:
        lines.append(
            f"{unrecorded} proc(s) booked now run frames with no open run in frame_history: "
            "their time is not in the figures"
        )
    return lines


def _name(found: Tally, key: str, value: str | None) -> str | None:
    if value is None or key in ("user", "shot"):
        return value
    return found.names.get((key, value), value)


def _pair_name(found: Tally, show_id: str, alloc_id: str) -> tuple[str, str]:
    recorded = found.terms.names.get((show_id, alloc_id), (show_id, alloc_id)) if found.terms else (show_id, alloc_id)
    return (
        found.names.get(("show", show_id), recorded[0]),
        found.names.get(("allocation", alloc_id), recorded[1]),
    )


@dataclass
class Group:
    """One row being summed: [succeeded, failed, running, GPU] and, with promises, the promise
    (None once any of its subscriptions' is unknown in the bucket) and the time above size."""

    figures: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    promised: int | None = 0
    above: int = 0


def _groups(found: Tally, *, query: UsageQuery, now_s: int) -> dict[tuple, Group]:
    groups: dict[tuple, Group] = {}
    for (bucket, *ids), figures in found.used.items():
        named = dict(zip(found.fetched, ids, strict=True))
        display = (bucket, *(_name(found, key, named[key]) for key in query.by))
        group = groups.setdefault(display, Group())
        group.figures = [a + b for a, b in zip(group.figures, figures, strict=True)]
    if found.terms is not None:
        for bucket, show_id, alloc_id in _pairs(found):
            names = dict(zip(("show", "allocation"), _pair_name(found, show_id, alloc_id), strict=True))
            group = groups.setdefault((bucket, *(names[key] for key in query.by)), Group())
            promised = _promised(found, bucket=bucket, pair=(show_id, alloc_id), now_s=now_s)
            group.promised = None if promised is None or group.promised is None else group.promised + promised
            group.above += found.above.get((bucket, show_id, alloc_id), 0)
    return groups


def _pairs(found: Tally) -> set[tuple[int, str, str]]:
    """(bucket, show id, alloc id) of every subscription that ran or was promised in the bucket."""
    pairs = {(bucket, show_id, alloc_id) for bucket, show_id, alloc_id in found.used}
    assert found.terms is not None
    for index, bucket in enumerate(found.buckets):
        for term in found.terms.terms:
            if term.lo < min(bucket.hi, found.now_s) and term.hi > bucket.lo:
                pairs.add((index, term.show_id, term.alloc_id))
    return pairs


def _promised(found: Tally, *, bucket: int, pair: tuple[str, str], now_s: int) -> int | None:
    """size x time over the bucket up to now, in centicore-seconds; None where a part of the
    bucket came before the service first saw the subscription."""
    assert found.terms is not None
    edges = found.buckets[bucket]
    first = found.terms.first_seen.get(pair)
    if first is None or epoch(moment=first) > edges.lo:
        return None
    end = min(edges.hi, now_s)
    return sum(
        term.size * max(0, min(term.hi, end) - max(term.lo, edges.lo))
        for term in found.terms.terms
        if (term.show_id, term.alloc_id) == pair
    )


def _row(found: Tally, *, query: UsageQuery, display: tuple, group: Group) -> dict[str, str | Decimal | None]:
    bucket, *names = display
    succeeded, failed, running, gpu = group.figures
    row: dict[str, str | Decimal | None] = dict(zip(query.by, names, strict=True))
    if query.per:
        row["period"] = found.buckets[bucket].start.isoformat()
    row.update(
        core_hours=hours(succeeded + failed + running),
        core_hours_succeeded=hours(succeeded),
        core_hours_failed=hours(failed),
        core_hours_running=hours(running),
        gpu_hours=hours(gpu, per_hour=3600),
    )
    if found.terms is not None:
        row["promised_core_hours"] = None if group.promised is None else hours(group.promised)
        row["core_hours_above_size"] = None if group.promised is None else hours(group.above)
    return row


def _unknown_promises(found: Tally, *, query: UsageQuery) -> list[UnknownPromise]:
    """Per subscription in the report, the part of the period before the service first saw it."""
    if found.terms is None:
        return []
    unknown = []
    for show_id, alloc_id in sorted({(show, alloc) for _, show, alloc in _pairs(found)}, key=str):
        first = found.terms.first_seen.get((show_id, alloc_id))
        if first is None or first > query.since:
            show, allocation = _pair_name(found, show_id, alloc_id)
            until = query.until if first is None else min(query.until, first)
            unknown.append(UnknownPromise(show=show, allocation=allocation, since=query.since, until=until))
    return unknown


def _sort_key(display: tuple) -> tuple:
    return (display[0], *("" if value is None else str(value) for value in display[1:]))


def usage_report(*, query: UsageQuery, now: datetime | None = None) -> UsageReport:
    """The report of `query` as of `now` (open runs counted to it). Raises HistoryNotGranted
    (one line naming the GRANT) where the role may not read Cuebot's history."""
    now = now or timezone.now()
    found = tally(query=query, now=now)
    groups = _groups(found, query=query, now_s=epoch(moment=now))
    rows = [
        _row(found, query=query, display=display, group=groups[display]) for display in sorted(groups, key=_sort_key)
    ]
    running = any(figures[2] for figures in found.used.values())
    return UsageReport(
        query=query,
        columns=columns_for(query=query),
        rows=rows,
        as_of=now,
        running_to=now if running else None,
        unknown_promises=_unknown_promises(found, query=query),
        problems=found.problems,
    )


def _text(value: str | Decimal | None) -> str:
    return "" if value is None else str(value)


def report_csv(report: UsageReport) -> str:
    """The header row, then a row per group (and bucket); an unknown promise is an empty cell."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(report.columns)
    for row in report.rows:
        writer.writerow([_text(row[column]) for column in report.columns])
    return out.getvalue()


def report_json(report: UsageReport) -> dict:
    """The same rows as the CSV (figures as exact decimal strings), and the notes."""
    query = report.query
    return {
        "since": query.since.isoformat(),
        "until": query.until.isoformat(),
        "by": list(query.by),
        "per": query.per,
        "as_of": report.as_of.isoformat(),
        "running_counted_to": report.running_to.isoformat() if report.running_to else None,
        "columns": list(report.columns),
        "rows": [
            {column: (None if row[column] is None else str(row[column])) for column in report.columns}
            for row in report.rows
        ],
        "promise_unknown": [
            {"show": u.show, "allocation": u.allocation, "from": u.since.isoformat(), "until": u.until.isoformat()}
            for u in report.unknown_promises
        ],
        "problems": list(report.problems),
    }


def notes(report: UsageReport) -> list[str]:
    """The notes a person reads under the table."""
    lines = [f"as of {report.as_of.isoformat()}"]
    if report.running_to:
        lines.append(f"core_hours_running: runs still open, counted to {report.running_to.isoformat()}")
    lines += [
        f"promise unknown for {u.show} / {u.allocation} from {u.since.isoformat()} to {u.until.isoformat()} "
        "(before the service first saw the subscription)"
        for u in report.unknown_promises
    ]
    return lines + [f"history: {problem}" for problem in report.problems]


def report_table(report: UsageReport) -> str:
    """Columns aligned for a terminal, then the notes."""
    cells = [list(report.columns)] + [[_text(row[c]) for c in report.columns] for row in report.rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(report.columns))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in cells]
    return "\n".join(lines + [""] + notes(report)) + "\n"


def history_health() -> list[str]:
    """One line per problem of Cuebot's history now (the GRANT's line where it may not be read)."""
    try:
        with history.reading_history() as cursor:
            return _health_lines(cursor=cursor)
    except HistoryNotGranted as refused:
        return [str(refused)]
