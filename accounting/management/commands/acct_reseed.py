"""acct_reseed: rebuild what the scheduler books against from PostgreSQL's record, in the era the site runs."""

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from accounting.live.leases import LockBusy
from accounting.management.commands._show_arg import show_argument
from accounting.reconcile.failover import check_master
from accounting.reconcile.recompute import repair_pg_accounting
from accounting.reconcile.reseed import reseed
from cuebot_acct.schedulers import cuebot_owns_every_show
from shows.models import Show


class Command(BaseCommand):
    help = (
        "Maestro era (ACCOUNTING_SCHEDULER=maestro): recompute Cuebot's five accounting tables of every show "
        "(or --show) from SUM(proc), in one transaction, in the release path's lock order; no Redis is read or "
        "written, and --limits/--booked do not apply. Exit 1 if a row could not be set. Other eras: rebuild the Redis live view of scheduler-managed shows from PostgreSQL: booked counters "
        "(SUM(proc) plus the bookings in flight or settled since the reseed began, from the settle journal; "
        "no booking or release makes it retry) and limits (unconditionally). Both by default. "
        "On a Redis that is a new master (a failover nothing noticed yet) the managed keys are closed and "
        "rebuilt first."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--limits", action="store_true", help="write limit fields")
        parser.add_argument("--booked", action="store_true", help="write booked counters")
        parser.add_argument(
            "--show", metavar="NAME", help="one show (outside the Maestro era: a scheduler-managed one)"
        )

    def handle(self, *args, limits: bool, booked: bool, show: str | None, **options) -> None:
        if not limits and not booked:
            limits = booked = True
        show_ids = None
        if show is not None:
            found = show_argument(name=show)
            if not found.b_scheduler_managed and not cuebot_owns_every_show():
                raise CommandError(f"show {show!r} is Cuebot-managed; Redis holds nothing for it", returncode=2)
            show_ids = [found.id]
        if cuebot_owns_every_show():
            self._recompute_tables(show_ids=show_ids)
            return
        try:
            # A new master not noticed yet (no task cluster running) is closed and rebuilt
            # first, as the task workers' watch would; its bookings stay refused until then.
            if check_master().failover:
                self.stdout.write("the accounting Redis is a new master: managed keys closed and rebuilt")
            with tqdm(desc="reseed", unit="key", file=self.stderr) as bar:
                report = reseed(limits=limits, booked=booked, show_ids=show_ids, progress=bar.update)
        except LockBusy as busy:
            raise CommandError(f"another reseed holds the lock {busy}; try again later", returncode=1) from busy
        if report.booked is not None:
            if report.booked.written:
                self.stdout.write(f"booked: {report.booked.keys} keys written in {report.booked.attempts} attempt(s)")
            else:
                self.stdout.write(
                    f"booked: SKIPPED, the write was refused on each of {report.booked.attempts} attempts "
                    "(Redis restarted or failed over meanwhile; see the service log)"
                )
        if report.limit_fields is not None:
            self.stdout.write(f"limits: {report.limit_fields} fields written")
        self.stdout.write(f"shows: {report.shows}")
        if report.booked is not None and not report.booked.written:
            raise CommandError("booked reseed skipped", returncode=1)

    def _recompute_tables(self, *, show_ids: list[str] | None) -> None:
        """The Maestro era's repair: Cuebot's tables from proc, each row it found drifted named."""
        shows = show_ids if show_ids is not None else list(Show.objects.order_by("pk").values_list("pk", flat=True))
        repair = repair_pg_accounting(show_ids=shows)
        for row in repair.drifted:
            self.stdout.write(f"recomputed {row.name}\t{row.table} ({row.columns})")
        for failure in repair.failures:
            self.stderr.write(f"{failure.table} {failure.pk} left as it was: {failure.error}")
        self.stdout.write(
            f"Cuebot's tables of {len(shows)} show(s) recomputed from SUM(proc): "
            f"{len(repair.drifted)} row(s) had drifted, {len(repair.failures)} differ now"
        )
        if repair.failures:
            raise CommandError(f"{len(repair.failures)} row(s) could not be set to SUM(proc)", returncode=1)
