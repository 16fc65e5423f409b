import sys

from accounting.management.commands._writes import DeclaredCommand
from accounting.ownership.guardrail import MESSAGE, era_names, run_guardrail


class Command(DeclaredCommand):
    help = (
        "Check the guardrail across the live fleet: exit 1 naming, with its fix, every scheduler-managed show "
        "that nothing books (waiting frames, no proc booked for ACCOUNTING_STRANDED_MINUTES) and, in the Redis "
        "and NOTIFY eras, every live instance that does not tell the scheduler of its releases the way the "
        "fleet does (Redis, NOTIFY or both)."
    )

    requires_system_checks = []  # accounting.W001 would say the same thing again, less precisely
    writes = ()

    def handle(self, *args, **options) -> None:
        report = run_guardrail()
        if not report.failing:
            if report.publishes:
                self.stdout.write(
                    f"ok: {report.managed_shows} scheduler-managed show(s); every live instance "
                    f"publishes on {era_names(report.fleet)}"
                )
            else:
                self.stdout.write(
                    f"ok: {report.managed_shows} scheduler-managed show(s), none stranded; Maestro era: "
                    "Cuebot keeps every show's accounting tables, nothing to publish"
                )
            return
        if report.misconfigured:
            self.stderr.write(
                f"MISCONFIGURED: {MESSAGE} ({report.managed_shows} scheduler-managed show(s); "
                f"the fleet publishes on {era_names(report.fleet)})"
            )
            for culprit in report.culprits():
                self.stderr.write(f"  not publishing: {culprit}")
        if report.stranded:
            self.stderr.write(
                f"STRANDED: {len(report.stranded)} scheduler-managed show(s) with waiting frames and "
                f"no proc booked for {report.stranded_minutes} minutes"
            )
            for fix in report.stranded_fixes():
                self.stderr.write(f"  {fix}")
        sys.exit(1)
