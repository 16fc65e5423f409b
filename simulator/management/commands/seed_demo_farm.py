from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from accounting.management.commands._limit_args import ascii_int
from accounting.reconcile.reseed import ReseedSkipped, bootstrap_if_empty, reseed
from simulator.farm_builder import (
    DemoFarmSize,
    FarmRefused,
    build_demo_farm,
    refuse_demo_farm_here,
)


def positive(value: str) -> int:
    number = ascii_int(value)
    if number < 0:
        raise ValueError(value)
    return number


class Command(BaseCommand):
    help = (
        "Build the demo farm: shows (scheduler- and Cuebot-managed), subscriptions, folders, jobs, "
        "layers, hosts and running procs, with the accounting tables equal to SUM(proc). Re-running adds nothing twice."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--shows", type=positive, default=4)
        parser.add_argument("--hosts", type=positive, default=20)
        parser.add_argument("--procs", type=positive, default=200)

    def handle(self, *args, shows: int, hosts: int, procs: int, **options) -> None:
        if procs and not hosts:
            raise CommandError("--procs needs at least one host", returncode=2)
        if shows < 2:
            raise CommandError("--shows must be at least 2 (one scheduler-managed, one Cuebot-managed)", returncode=2)
        size = DemoFarmSize(shows=shows, hosts=hosts, procs=procs)
        try:
            refuse_demo_farm_here(size=size)  # before the progress bar, so that a refusal is one line
            with tqdm(total=procs, desc="procs", unit="proc", disable=not procs, file=self.stderr) as bar:
                summary = build_demo_farm(size=size, progress=bar.update)
        except FarmRefused as refused:
            raise CommandError(str(refused), returncode=2) from None
        self.stdout.write(
            f"demo farm: {summary.shows} shows ({len(summary.scheduler_managed_show_ids)} scheduler-managed), "
            f"{summary.hosts} hosts, {summary.procs} procs ({summary.procs_added} new)"
        )
        if not settings.ACCOUNTING_REDIS_ENABLED:
            self.stdout.write(
                f"redis: nothing to seed (ACCOUNTING_SCHEDULER={settings.ACCOUNTING_SCHEDULER}: "
                "no scheduler counts in the accounting Redis)"
            )
            return
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
