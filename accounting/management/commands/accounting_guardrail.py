import sys

from django.core.management.base import BaseCommand

from accounting.ownership.guardrail import MESSAGE, era_names, run_guardrail


class Command(BaseCommand):
    help = ("Check the publish invariant across the live fleet: exit 1, naming every live instance that "
            "does not tell the scheduler of its releases the way the fleet does (Redis, NOTIFY or both), "
            "when scheduler-managed shows exist.")

    requires_system_checks = []  # accounting.W001 would say the same thing again, less precisely

    def handle(self, *args, **options) -> None:
        report = run_guardrail()
        if not report.misconfigured:
            self.stdout.write(f"ok: {report.managed_shows} scheduler-managed show(s); every live instance publishes "
                              f"on {era_names(report.fleet)}")
            return
        self.stderr.write(f"MISCONFIGURED: {MESSAGE} ({report.managed_shows} scheduler-managed show(s); "
                          f"the fleet publishes on {era_names(report.fleet)})")
        for culprit in report.culprits():
            self.stderr.write(f"  not publishing: {culprit}")
        sys.exit(1)
