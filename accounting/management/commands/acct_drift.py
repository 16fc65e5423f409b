import json

from django.core.management.base import BaseCommand, CommandError

from accounting.operators.selectors import field_label, key_labels, labelled_drift
from accounting.reconcile.drift import CLOSED, IN_FLIGHT, NOT_DRIFT, ROUNDING, SEEDED, drift_report
from shows.selectors import AmbiguousName, get_show_by_name

EXPLANATIONS = {
    ROUNDING: "differ only by the scheduler's sum-then-convert rounding",
    IN_FLIGHT: "differ by operations in flight",
    CLOSED: "differ on closed keys",
}


class Command(BaseCommand):
    help = (
        "Compare Redis with PostgreSQL for every key of the scheduler-managed shows: booked counters "
        "against SUM(proc) (per-proc conversion, in-flight operations included), limits against the "
        "tables. One row per differing key and field (named, with the raw Redis field in brackets; --json "
        "keeps it as `field` beside its `label`); exit 1 if anything drifted. Differences that are "
        "not drift are counted apart: the scheduler's own sum-then-convert rounding, operations in "
        "flight, and keys closed while Redis is not seeded, being rebuilt or owed a rebuild."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--show", metavar="NAME", help="one show")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, show: str | None, **options) -> None:
        show_ids = None
        if show is not None:
            try:
                found = get_show_by_name(name=show)
            except AmbiguousName as error:
                raise CommandError(f"{error}; nothing changed", returncode=2) from None
            if found is None:
                raise CommandError(f"unknown show {show!r}", returncode=2)
            show_ids = [found.id]
        report = drift_report(show_ids=show_ids)
        if options["json"]:
            self.stdout.write(json.dumps(labelled_drift(report=report.as_dict()), indent=2))
        else:
            labels = key_labels(redis_keys={row.key for row in report.rows})
            for row in report.rows:
                cause = f"\tcause: {row.cause}" if row.cause else ""
                field = f"{field_label(key=row.key, field=row.field)} ({row.field})"
                self.stdout.write(f"{labels.get(row.key, row.key)}\t{field}\tredis={row.redis}\tpg={row.pg}"
                                  f"\tdiff={row.difference:+d}{cause}\t{row.key}")
            if report.redis_state != SEEDED:
                self.stdout.write(f"the accounting Redis is {report.redis_state}: its keys are closed, nothing is drift")
            explained = "".join(f", {len(rows)} {EXPLANATIONS[cause]} (not drift)"
                                for cause in NOT_DRIFT if (rows := report.explained_by(cause)))
            self.stdout.write(
                f"{len(report.shows)} show(s), {report.fields_checked} fields checked, {len(report.rows)} drifted{explained}"
            )
        if report.drifted:
            raise SystemExit(1)

