"""acct_reseed: rebuild what the scheduler books against from PostgreSQL's record, in the era the site runs."""

from django.core.management.base import CommandError
from tqdm import tqdm

from accounting.live.leases import LockBusy
from accounting.management.commands._show_arg import show_argument
from accounting.management.commands._writes import DeclaredCommand
from accounting.reconcile.failover import check_master
from accounting.reconcile.recompute import TABLE_REPAIR, repair_pg_accounting
from accounting.reconcile.reseed import REDIS_RESEED, reseed
from accounting.reconcile.tables_against_procs import cuebot_owned_show_ids
from infra.era import era
from shows.models import Show


class Command(DeclaredCommand):
    help = (
        "Rebuild what each show is booked against from PostgreSQL's record, by who books it. A show Cuebot books "
        "(every show in the Maestro era, ACCOUNTING_SCHEDULER=maestro; a Cuebot-managed one in the other eras): "
        "Cuebot's five accounting tables recomputed from SUM(proc), in one transaction, in the release path's lock "
        "order, caps left as they were; no Redis is read or written, and --limits/--booked are refused (exit 2). Exit 1 if "
        "a row could not be set. A show the Redis-era scheduler books: its Redis live view rebuilt from PostgreSQL: "
        "booked counters (SUM(proc) plus the bookings in flight or settled since the reseed began, from the settle "
        "journal; no booking or release makes it retry) and limits (unconditionally), both by default; on a Redis "
        "that is a new master (a failover nothing noticed yet) the managed keys are closed and rebuilt first. "
        "Without --show: every show in the Maestro era; otherwise the scheduler-managed shows' Redis, or with "
        "--cuebot-tables the Cuebot-managed shows' tables. The notify era keeps no Redis view: there only "
        "Cuebot's tables are rebuilt (exit 2 otherwise)."
    )
    writes = (TABLE_REPAIR, REDIS_RESEED)

    def add_arguments(self, parser) -> None:
        parser.add_argument("--limits", action="store_true", help="write limit fields")
        parser.add_argument("--booked", action="store_true", help="write booked counters")
        parser.add_argument("--show", metavar="NAME", help="one show")
        parser.add_argument(
            "--cuebot-tables",
            action="store_true",
            help="outside the Maestro era: the five tables of every Cuebot-managed show (or --show's), no Redis",
        )

    def handle(self, *args, limits: bool, booked: bool, show: str | None, cuebot_tables: bool, **options) -> None:
        found = show_argument(name=show) if show is not None else None
        maestro = era().cuebot_owns_every_show
        if found is not None and found.b_scheduler_managed and cuebot_tables and not maestro:
            raise CommandError(
                f"show {show!r} is scheduler-managed: its tables are not Cuebot's in this era; nothing changed",
                returncode=2,
            )
        tables = maestro or cuebot_tables or (found is not None and not found.b_scheduler_managed)
        if tables and (limits or booked):
            raise CommandError(
                "--limits and --booked are Redis's; Cuebot's tables are recomputed whole; nothing changed", returncode=2
            )
        if tables:
            self._recompute_tables(show_ids=cuebot_owned_show_ids(show_ids=[found.id] if found else None))
            return
        if not era().keeps_redis:
            raise CommandError(
                "the notify era keeps no Redis live view: its scheduler recomputes its own counters from SUM(proc) "
                "and its limits from the tables; --cuebot-tables (or --show of a Cuebot-managed show) repairs "
                "Cuebot's tables; nothing changed",
                returncode=2,
            )
        self._reseed_redis(
            limits=limits or not booked, booked=booked or not limits, show_ids=[found.id] if found else None
        )

    def _reseed_redis(self, *, limits: bool, booked: bool, show_ids: list[str] | None) -> None:
        """The Redis era's rebuild of what the scheduler books against (both halves by default)."""
        REDIS_RESEED.require()  # before the master check, which closes a new master's keys
        try:
            # A new master not noticed yet (no task cluster running) is closed and rebuilt
            # first, as the task workers' watch would; its bookings stay refused until then.
            if check_master().failover:
                self.stdout.write("the accounting Redis is a new master: managed keys closed and rebuilt")
            with tqdm(desc="reseed", unit="key", file=self.stderr) as bar:
                report = reseed(limits=limits, booked=booked, show_ids=show_ids, progress=bar.update)
        except LockBusy as busy:
            raise CommandError(f"another reseed holds the lock {busy}; try again later", returncode=1) from busy
        if report.booked is not None and report.booked.written:
            self.stdout.write(f"booked: {report.booked.keys} keys written in {report.booked.attempts} attempt(s)")
        elif report.booked is not None:
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
        """The repair of the tables Cuebot writes: from proc, each row it found drifted named."""
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
