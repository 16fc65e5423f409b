from django.core.management.base import BaseCommand

from accounting.tasks import apply_schedules


class Command(BaseCommand):
    help = "Create or update the django-q2 schedules (recalculate_subs, accounting_guardrail, ...) by name."

    def handle(self, *args, **options) -> None:
        for name, outcome in apply_schedules():
            self.stdout.write(f"{name}: {outcome}")
