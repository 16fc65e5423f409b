"""acct_drift: Cuebot's own tables against SUM(proc) in every era, and Redis against PostgreSQL in the redis era."""

import json

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils import timezone

from accounting.management.commands._show_arg import show_argument
from accounting.operators.drift_views import (
    aged_redis_drift,
    aged_table_drift,
    drift_sentence,
    redis_row_ages,
    table_repair,
    table_row_ages,
)
from accounting.operators.names import field_label, key_labels
from accounting.reconcile.cuebot_drift import TableDriftReport, cuebot_table_drift, signed_cores
from accounting.reconcile.drift import CLOSED, IN_FLIGHT, NOT_DRIFT, ROUNDING, SEEDED, DriftReport, drift_report
from accounting.reconcile.drift_history import redis_difference, table_difference

EXPLANATIONS = {
    ROUNDING: "differ only by the scheduler's sum-then-convert rounding",
    IN_FLIGHT: "differ by operations in flight",
    CLOSED: "differ on closed keys",
}


class Command(BaseCommand):
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

    def add_arguments(self, parser) -> None:
        parser.add_argument("--show", metavar="NAME", help="one show")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, show: str | None, **options) -> None:
        show_ids = None
        if show is not None:
            found = show_argument(name=show)
            show_ids = [found.id]
        now = timezone.now()
        tables = cuebot_table_drift(show_ids=show_ids)
        report = drift_report(show_ids=show_ids) if settings.ACCOUNTING_REDIS_ENABLED else None
        repair = table_repair(show=show)
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        **(aged_redis_drift(report=report, now=now) if report else {}),
                        "cuebot_tables": {**aged_table_drift(report=tables, now=now), "repair": repair},
                    },
                    indent=2,
                )
            )
        else:
            if report is not None:
                self._write_redis(report, now=now)
            self._write_tables(tables, repair=repair, now=now)
        if tables.drifted or (report is not None and report.drifted):
            raise SystemExit(1)

    def _write_tables(self, tables: TableDriftReport, *, repair: str, now) -> None:
        for row, age in zip(tables.rows, table_row_ages(rows=tables.rows, now=now), strict=True):
            cores = (
                f"cores stored={signed_cores(row.stored_cores)} true={signed_cores(row.true_cores)} "
                f"diff={signed_cores(row.cores_difference):+}"
            )
            gpus = f"gpus stored={row.stored_gpus} true={row.true_gpus} diff={row.gpus_difference:+d}"
            since = drift_sentence(difference=table_difference(row), age=age)
            self.stdout.write(f"{row.name}\t{row.table} ({row.columns})\t{cores}\t{gpus}\t{since}\t{row.pk}")
        advice = f"; repair: {repair}" if tables.drifted else ""
        self.stdout.write(
            f"Cuebot's tables against SUM(proc): {tables.shows} show(s), {len(tables.rows)} row(s) drifted{advice}"
        )

    def _write_redis(self, report: DriftReport, *, now) -> None:
        labels = key_labels(redis_keys={row.key for row in report.rows})
        for row, age in zip(report.rows, redis_row_ages(rows=report.rows, now=now), strict=True):
            cause = f"\tcause: {row.cause}" if row.cause else ""
            field = f"{field_label(key=row.key, field=row.field)} ({row.field})"
            since = drift_sentence(difference=redis_difference(row)[2], age=age)
            self.stdout.write(
                f"{labels.get(row.key, row.key)}\t{field}\tredis={row.redis}\tpg={row.pg}"
                f"\tdiff={row.difference:+d}{cause}\t{since}\t{row.key}"
            )
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
