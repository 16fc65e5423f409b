"""seed_demo_farm: a farm to try the service on, built as Cuebot writes its rows, of any size up to Maestro's proof farm."""

import time
from datetime import datetime, timezone

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from accounting.management.commands._limit_args import ascii_int
from accounting.management.commands._writes import refused_while_observing
from accounting.models import SubscriptionTerm
from accounting.reconcile.reseed import ReseedSkipped, bootstrap_if_empty, reseed
from accounting.usage.terms import record_terms
from infra.era import era
from infra.writes import require_writes
from simulator.farm_builder import (
    MAESTRO_PROOF,
    DemoFarmSize,
    DemoFarmSummary,
    build_demo_farm,
    refuse_demo_farm_here,
)
from simulator.farm_history import HistoryShape, history_tables_here, write_history
from simulator.farm_rules import PLAYS_CUEBOT, FarmRefused


def positive(value: str) -> int:
    number = ascii_int(value)
    if number < 0:
        raise ValueError(value)
    return number


# What the demo's usage report has to show: the last three days, and what runs now.
HISTORY_DAYS = 3
TERMS_DAYS = 7


class Command(BaseCommand):
    help = (
        "Build the demo farm: shows (scheduler- and Cuebot-managed), subscriptions, folders, jobs, "
        "layers, hosts and running procs, with the accounting tables equal to SUM(proc). Re-running adds nothing twice."
    )

    def add_arguments(self, parser) -> None:
        # No defaults here: --maestro-size refuses to be mixed with a size given by hand.
        parser.add_argument("--shows", type=positive, help="default 4")
        parser.add_argument("--hosts", type=positive, help="default 20")
        parser.add_argument("--procs", type=positive, help="default 200")
        parser.add_argument(
            "--cores-per-host", type=positive, help="default 0: enough for any host's share of the procs"
        )
        parser.add_argument(
            "--history-days",
            type=positive,
            default=HISTORY_DAYS,
            help=f"days of Cuebot's history to write before now, as its triggers would (default {HISTORY_DAYS}; 0: none)",
        )
        parser.add_argument(
            "--maestro-size",
            action="store_true",
            help=(
                f"the size of OpenCue Maestro's proof farm: {MAESTRO_PROOF.shows} shows, {MAESTRO_PROOF.hosts} hosts "
                f"of {MAESTRO_PROOF.cores_per_host} cores, {MAESTRO_PROOF.procs} procs"
            ),
        )

    @refused_while_observing
    def handle(self, *args, maestro_size: bool, history_days: int, **options) -> None:
        require_writes(action="seed_demo_farm", grant=PLAYS_CUEBOT)
        size = self._size(maestro_size=maestro_size, options=options)
        try:
            refuse_demo_farm_here(size=size)  # before the progress bar, so that a refusal is one line
            started = time.monotonic()
            with tqdm(total=size.procs, desc="procs", unit="proc", disable=not size.procs, file=self.stderr) as bar:
                summary = build_demo_farm(size=size, progress=bar.update)
            took = time.monotonic() - started
        except FarmRefused as refused:
            raise CommandError(str(refused), returncode=2) from None
        self.stdout.write(
            f"demo farm: {summary.shows} shows ({len(summary.scheduler_managed_show_ids)} scheduler-managed), "
            f"{summary.hosts} hosts ({summary.host_cores // 100:,} cores), {summary.procs} procs "
            f"({summary.procs_added} new), built in {took:.1f} s"
        )
        if history_days:
            self._write_history(size=size, days=history_days)
        if not era().keeps_redis:
            self.stdout.write(
                f"redis: nothing to seed (ACCOUNTING_SCHEDULER={era().name}: "
                "no scheduler counts in the accounting Redis)"
            )
            return
        self._seed_redis(summary=summary)

    def _size(self, *, maestro_size: bool, options: dict) -> DemoFarmSize:
        """The size asked for, or the refusal (exit 2) of one the demo cannot be."""
        given = {name: options[name] for name in ("shows", "hosts", "procs", "cores_per_host")}
        if maestro_size and any(value is not None for value in given.values()):
            raise CommandError("--maestro-size is a whole size: give it alone or give the size by hand", returncode=2)
        size = (
            MAESTRO_PROOF
            if maestro_size
            else DemoFarmSize(**{name: value for name, value in given.items() if value is not None})
        )
        if size.procs and not size.hosts:
            raise CommandError("--procs needs at least one host", returncode=2)
        if size.shows < 2:
            raise CommandError("--shows must be at least 2 (one scheduler-managed, one Cuebot-managed)", returncode=2)
        return size

    def _seed_redis(self, *, summary: DemoFarmSummary) -> None:
        # The PG build bypasses the booking path: seed Redis for the managed shows from it.
        # An empty Redis is bootstrapped without the in-flight wait: the demo farm is built
        # before anything books on it (make run starts the server afterwards).
        try:
            bootstrap_if_empty(wait=lambda seconds: None)
        except ReseedSkipped as skipped:
            raise CommandError(
                "empty Redis not rebuilt (acct:seq kept changing); run manage.py acct_reseed", returncode=1
            ) from skipped
        report = reseed(show_ids=summary.scheduler_managed_show_ids)
        if not report.booked.written:
            raise CommandError(
                "Redis booked counters not seeded (acct:seq kept changing); run manage.py acct_reseed", returncode=1
            )
        self.stdout.write(f"redis: {report.booked.keys} booked keys and {report.limit_fields} limit fields seeded")

    def _write_history(self, *, size: DemoFarmSize, days: int) -> None:
        """frame_history and job_history over the last `days`, a run a proc an hour (one-hour frames),
        and the subscriptions' terms as if the service had recorded them for TERMS_DAYS (a service
        first started now would know no promise before now, and the admin's usage page opens on a week)."""
        if not history_tables_here():
            self.stdout.write("history: none written (this database has no frame_history and job_history)")
            return
        started = time.monotonic()
        shape = HistoryShape(until=int(time.time()), days=days, runs_per_day=24 * max(1, size.procs))
        written = write_history(shape=shape, hosts=size.hosts)
        if not SubscriptionTerm.objects.exists():
            watched = shape.until - TERMS_DAYS * 86_400
            record_terms(now=datetime.fromtimestamp(watched, tz=timezone.utc))
        self.stdout.write(
            f"history: {written.runs:,} runs of {written.jobs:,} finished jobs over {days} day{'s' if days != 1 else ''}, "
            f"{written.open_runs:,} running, written in {time.monotonic() - started:.1f} s"
        )
