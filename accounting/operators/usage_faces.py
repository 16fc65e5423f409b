"""The usage report as the API and the admin page ask for it: the query's words checked, the report
read, and a refusal in one line (bad input, or history tables this role may not read yet) rather
than a traceback. The chart's bars of the page are drawn from the report's rows here too."""

from dataclasses import dataclass
from decimal import Decimal

from accounting.usage.report import (
    HistoryNotGranted,
    UsageQueryError,
    UsageReport,
    notes,
    parse_query,
    usage_report,
)

FORMATS = ("json", "csv")


@dataclass(frozen=True)
class Refusal:
    """Why no report was read, in one line: 400 for the query's words, 403 for the history
    tables this role may not read yet (the line names the GRANT)."""

    status: int
    detail: str


def usage_or_refusal(*, since: str | None, until: str | None, by: str, per: str | None) -> UsageReport | Refusal:
    """The report of `[since, until)` grouped `by`, optionally `per` bucket, or why not."""
    for name, value in (("since", since), ("until", until)):
        if not value:
            return Refusal(400, f"{name} is required: an ISO 8601 date (2026-11-01) or a date-time with its offset")
    assert since is not None and until is not None  # checked just above
    try:
        query = parse_query(since=since, until=until, by=by, per=per or None)
    except UsageQueryError as error:
        return Refusal(400, str(error))
    try:
        return usage_report(query=query)
    except HistoryNotGranted as refused:
        return Refusal(403, str(refused))


@dataclass(frozen=True)
class Note:
    text: str
    warn: bool


def report_notes(*, report: UsageReport) -> list[Note]:
    """The report's notes as the command prints them, its history's problems marked to stand out."""
    problems = {f"history: {problem}" for problem in report.problems}
    return [Note(text=line, warn=line in problems) for line in notes(report)]


@dataclass(frozen=True)
class Bar:
    """One bar of the page's chart: a show's (or an allocation's) core-hours used against promised,
    each as a share of the chart's widest figure (`*_pct`, 0-100)."""

    name: str
    used: Decimal
    promised: Decimal | None
    used_pct: float
    promised_pct: float | None


CHARTED = ("show", "allocation")


def chart_key(*, by: list[str]) -> str | None:
    """What the chart draws a bar for: the show when the rows are grouped by it, else the allocation."""
    return next((key for key in CHARTED if key in by), None)


def chart_bars(*, rows: list[dict], key: str) -> list[Bar]:
    """Per value of `key`, its rows summed (every period, every finer group): used, and promised where
    every one of its rows knows its promise (None otherwise: the promise is not summed over a gap)."""
    used: dict[str, Decimal] = {}
    promised: dict[str, Decimal | None] = {}
    for row in rows:
        name = str(row[key])
        used[name] = used.get(name, Decimal(0)) + _number(row.get("core_hours"))
        known = row.get("promised_core_hours")
        before = promised.get(name, Decimal(0))
        promised[name] = None if known in (None, "") or before is None else before + _number(known)
    widest = max([*used.values(), *(p for p in promised.values() if p is not None), Decimal(0)])
    scale = widest or Decimal(1)
    return [
        Bar(
            name=name,
            used=used[name],
            promised=promised[name],
            used_pct=_pct(used[name], scale),
            promised_pct=None if promised[name] is None else _pct(promised[name], scale),
        )
        for name in sorted(used, key=lambda name: (-used[name], name))
    ]


def _number(value) -> Decimal:
    return Decimal(0) if value in (None, "") else Decimal(str(value))


def _pct(value: Decimal | None, scale: Decimal) -> float:
    return round(float(100 * (value or 0) / scale), 1)
