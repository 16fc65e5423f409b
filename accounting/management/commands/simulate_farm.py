import json

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from accounting.simulation.faults import parse_faults
from accounting.simulation.runner import SimConfig, run_simulation
from accounting.simulation.workers import RESEEDERS
from shows.farm import FarmRefused


def at_least(minimum: int):
    def parse(value: str) -> int:
        number = int(value)
        if number < minimum:
            raise ValueError(value)
        return number
    parse.__name__ = f"integer >= {minimum}"
    return parse


class Command(BaseCommand):
    help = (
        "Run the farm simulator against the configured PostgreSQL and Redis: bookers (the scheduler), "
        "releasers (Cuebot), a reconciler and an operator, under injected faults; then reconcile and check "
        "the invariants over_cap, drift_after_reconcile and negative_counters. Exit 0 only if all hold. "
        "It builds its own farm (names starting 'sim-', rebuilt every run) unless --existing is given."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--shows", type=at_least(2), default=4)
        parser.add_argument("--hosts", type=at_least(2), default=20)
        parser.add_argument("--jobs", type=at_least(1), default=40)
        parser.add_argument("--seconds", type=at_least(1), default=60)
        parser.add_argument("--bookers", type=at_least(1), default=4)
        parser.add_argument("--releasers", type=at_least(1), default=2)
        parser.add_argument("--faults", default="none", help="'all', 'none' or a comma list of fault kinds")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--existing", action="store_true", help="play on the farm already in the database")
        parser.add_argument("--reseeder", choices=RESEEDERS, default="project",
                            help="who reseeds during the run: this project's reseed (in-flight overlay) or one like "
                                 "the scheduler's own recompute (compare-and-swap only)")

    def handle(self, *args, faults: str, json: bool, **options) -> None:
        try:
            kinds = parse_faults(faults)
        except ValueError as error:
            raise CommandError(str(error), returncode=2) from None
        config = SimConfig(
            shows=options["shows"], hosts=options["hosts"], jobs=options["jobs"], seconds=options["seconds"],
            bookers=options["bookers"], releasers=options["releasers"], faults=kinds, seed=options["seed"],
            existing=options["existing"], reseeder=options["reseeder"],
        )
        with tqdm(total=config.seconds, desc="simulating", unit="s", file=self.stderr, bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s {postfix}") as bar:
            def progress(elapsed, stats) -> None:
                bar.n = min(elapsed, config.seconds)
                bar.set_postfix(booked=stats.bookings, rejected=sum(stats.rejections.values()), released=stats.releases,
                                faults=sum(stats.faults.values()), refresh=False)
                bar.refresh()
            try:
                report = run_simulation(config=config, progress=progress)
            except (FarmRefused, ValueError) as refused:
                raise CommandError(str(refused), returncode=2) from None
        self.stdout.write(_json_dumps(report.as_dict()) if json else report.as_table())
        if not report.ok:
            raise CommandError("an invariant does not hold", returncode=1)


def _json_dumps(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=False)
