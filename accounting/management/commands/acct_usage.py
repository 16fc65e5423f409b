"""acct_usage: core-hours and GPU-hours used over any period, from Cuebot's own history (docs/usage.md)."""

import csv
import io
import json

from django.core.management.base import CommandError

from accounting.management.commands._writes import DeclaredCommand
from accounting.usage.report import (
    KEYS,
    PERIODS,
    HistoryNotGranted,
    JobMismatch,
    UsageQueryError,
    parse_query,
    reconcile_jobs,
    report_csv,
    report_json,
    report_table,
    usage_report,
)

FORMATS = ("table", "csv", "json")
MISMATCH_COLUMNS = ("job", "show", "stopped", "core_seconds", "rounded_core_seconds", "job_history_core_seconds", "why")


class Command(DeclaredCommand):
    help = (
        "Core-hours and GPU-hours of every run of every frame over [--since, --until), clipped to the period "
        "(and each --per bucket) to the second, split into succeeded, failed and still running (counted to now), "
        "grouped by --by; grouped by show and allocation alone, also the promised core-hours and those above size. "
        "WHEN is an ISO 8601 date (midnight in TIME_ZONE) or a date-time with offset; --until is exclusive. "
        "--reconcile lists instead the jobs finished in the period whose runs differ from job_history's core time "
        "beyond Cuebot's per-frame rounding, and exits 1 when any do. Bad input: one line, exit 2."
    )
    writes = ()  # reads Cuebot's history; writes nothing

    def add_arguments(self, parser) -> None:
        parser.add_argument("--since", metavar="WHEN", help="the period's start (inclusive)")
        parser.add_argument("--until", metavar="WHEN", help="the period's end (exclusive)")
        parser.add_argument("--by", metavar="KEYS", default="show", help=f"a comma list of {', '.join(KEYS)}")
        parser.add_argument("--per", metavar="|".join(PERIODS), help="one row per day, week or month (TIME_ZONE)")
        parser.add_argument("--format", metavar="|".join(FORMATS), default="table", help="table (default), csv or json")
        parser.add_argument("--reconcile", action="store_true", help="the jobs whose runs differ from job_history")

    def handle(self, *args, since, until, by, per, format, reconcile, **options) -> None:
        if not since or not until:
            raise CommandError(
                "--since and --until are both required (WHEN: 2026-11-01 or 2026-11-01T06:00:00+00:00)", returncode=2
            )
        if format not in FORMATS:
            raise CommandError(f"unknown format {format!r}: table, csv or json", returncode=2)
        try:
            query = parse_query(since=since, until=until, by=by, per=per)
        except UsageQueryError as refused:
            raise CommandError(str(refused), returncode=2) from None
        try:
            if reconcile:
                self._reconcile(query=query, format=format)
                return
            report = usage_report(query=query)
        except HistoryNotGranted as refused:
            raise CommandError(str(refused)) from None
        written = {"csv": report_csv, "table": report_table}
        if format == "json":
            self.stdout.write(json.dumps(report_json(report), indent=2))
        else:
            self.stdout.write(written[format](report), ending="")

    def _reconcile(self, *, query, format: str) -> None:
        mismatches = reconcile_jobs(query=query)
        rows = [_mismatch_row(mismatch) for mismatch in mismatches]
        if format == "json":
            self.stdout.write(json.dumps({"jobs": rows}, indent=2))
        elif format == "csv":
            out = io.StringIO()
            writer = csv.DictWriter(out, fieldnames=MISMATCH_COLUMNS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
            self.stdout.write(out.getvalue(), ending="")
        else:
            for row in rows:
                self.stdout.write(
                    f"{row['show']} {row['job']} (stopped {row['stopped']}): runs {row['core_seconds']} core-seconds, "
                    f"{row['rounded_core_seconds']} as Cuebot rounds them, job_history {row['job_history_core_seconds']}: "
                    f"{row['why']}"
                )
            self.stdout.write(f"{len(rows)} job(s) finished in the period differ from job_history")
        if mismatches:
            raise SystemExit(1)


def _mismatch_row(mismatch: JobMismatch) -> dict[str, str]:
    return {
        "job": mismatch.job,
        "show": mismatch.show,
        "stopped": mismatch.stopped.isoformat(),
        "core_seconds": str(mismatch.core_seconds),
        "rounded_core_seconds": str(mismatch.rounded_core_seconds),
        "job_history_core_seconds": str(mismatch.job_history_core_seconds),
        "why": mismatch.why,
    }
