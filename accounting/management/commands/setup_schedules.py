from accounting.management.commands._writes import DeclaredCommand
from accounting.tasks import apply_schedules


class Command(DeclaredCommand):
    help = "Create or update the django-q2 schedules (recalculate_subs, accounting_guardrail, ...) by name."
    writes = ()  # django-q's schedules, the service's own table

    def handle(self, *args, **options) -> None:
        for name, outcome in apply_schedules():
            self.stdout.write(f"{name}: {outcome}")
