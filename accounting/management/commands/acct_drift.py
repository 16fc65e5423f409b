"""acct_drift: Cuebot's own tables against SUM(proc) in every era, and Redis against PostgreSQL in the redis era."""

import json

from django.utils import timezone

from accounting.management.commands._show_arg import show_argument
from accounting.management.commands._writes import DeclaredCommand
from accounting.operators.drift_views import live_json, redis_shown, table_repair, table_shown
from accounting.reconcile.redis_against_pg import (
    CLOSED,
    IN_FLIGHT,
    NOT_DRIFT,
    ROUNDING,
    SEEDED,
    DriftReport,
    drift_report,
)
from accounting.reconcile.tables_against_procs import cuebot_table_drift
from infra.era import era

EXPLANATIONS = {
    ROUNDING: "differ only by the scheduler's sum-then-convert rounding",
    IN_FLIGHT: "differ by operations in flight",
    CLOSED: "differ on closed keys",
}


class Command(DeclaredCommand):
    help = (
        "Drift of the accounting, exit 1 if anything drifted. Always: Cuebot's five tables (subscription, "
        "layer_resource, job_resource, folder_resource, point) against SUM(proc), for the shows Cuebot owns "
        "(every show in the Maestro era, ACCOUNTING_SCHEDULER=maestro; the Cuebot-managed ones otherwise), one "
        "row per drifted row with stored and true cores and GPUs, and the command that repairs them (`manage.py "
        "acct_reseed`, with --cuebot-tables outside the Maestro era); in the Maestro era nothing else is read (no "
        "Redis). In the redis era also Redis against PostgreSQL for "
        "every key of the scheduler-managed shows: booked counters against SUM(proc) (per-proc conversion, "
        "in-flight operations included), limits against the tables. One row per differing key and field (named, "
        "with the raw Redis field in brackets; --json keeps it as `field` beside its `label`). Each drifted row or "
        "field says its difference in words and since when the periodic drift check (acct-drift-check) has seen it "
        'drifted, and for how long ("4.00 cores high since 03:12 UTC (2 h 5 min)"; --json: first_seen, age_seconds, '
        "since). Differences that "
        "are not drift are counted apart: the scheduler's own sum-then-convert rounding, operations in flight, "
        "and keys closed while Redis is not seeded, being rebuilt or owed a rebuild."
    )
    writes = ()

    def add_arguments(self, parser) -> None:
        parser.add_argument("--show", metavar="NAME", help="one show")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, show: str | None, **options) -> None:
        show_ids = None if show is None else [show_argument(name=show).id]
        now = timezone.now()
        tables = cuebot_table_drift(show_ids=show_ids)
        report = drift_report(show_ids=show_ids) if era().keeps_redis else None
        if options["json"]:
            self.stdout.write(json.dumps(live_json(tables=tables, redis=report, now=now, show=show), indent=2))
        else:
            if report is not None:
                self._write_redis(report, now=now)
            for entry in table_shown(tables, now=now):
                self.stdout.write(entry.line)
            advice = f"; repair: {table_repair(show=show)}" if tables.drifted else ""
            self.stdout.write(
                f"Cuebot's tables against SUM(proc): {tables.shows} show(s), {len(tables.rows)} row(s) drifted{advice}"
            )
        if tables.drifted or (report is not None and report.drifted):
            raise SystemExit(1)

    def _write_redis(self, report: DriftReport, *, now) -> None:
        for entry in redis_shown(report.rows, now=now):
            self.stdout.write(entry.line)
        if report.redis_state != SEEDED:
            self.stdout.write(f"the accounting Redis is {report.redis_state}: its keys are closed, nothing is drift")
        explained = "".join(
            f", {len(rows)} {EXPLANATIONS[cause]} (not drift)"
            for cause in NOT_DRIFT
            if (rows := report.explained_by(cause))
        )
        self.stdout.write(
            f"{len(report.shows)} show(s), {report.fields_checked} fields checked, {len(report.rows)} drifted{explained}"
        )
