"""acct_usage_rollup: bring the usage rollups up to date now, or rebuild one day from the runs."""

from datetime import date

from django.core.management.base import CommandError
from django.utils import timezone

from accounting.management.commands._writes import DeclaredCommand
from accounting.usage.history import HistoryNotGranted
from accounting.usage.rollups import rebuild, roll_up


class Command(DeclaredCommand):
    help = (
        "Roll up the site days of Cuebot's runs that ended (what the acct-usage schedule does), or with "
        "--rebuild DAY recompute that rolled day from frame_history. Writes only the service's own tables."
    )
    writes = ()  # the rollups are the service's own tables

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rebuild", metavar="DAY", help="an ISO date (the site's day) to recompute")

    def handle(self, *args, rebuild: str | None, **options) -> None:
        now = timezone.now()
        try:
            if rebuild is None:
                self.stdout.write(f"{roll_up(now=now)} day(s) rolled up")
                return
            self._rebuild(text=rebuild, now=now)
        except HistoryNotGranted as refused:
            raise CommandError(str(refused)) from None

    def _rebuild(self, *, text: str, now) -> None:
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise CommandError(f"--rebuild {text!r} is not an ISO date (2026-11-01)", returncode=2) from None
        if not rebuild(day=day, now=now):
            raise CommandError(f"{day} is not rolled up yet: nothing to rebuild (nothing was changed)", returncode=2)
        self.stdout.write(f"{day} rebuilt from frame_history")
