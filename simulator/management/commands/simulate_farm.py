import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from accounting.management.commands._limit_args import ascii_int
from accounting.management.commands._writes import refused_while_observing
from accounting.operators.auth import grant_permissions, issue_token
from infra.permissions import RELEASE_PROCS
from infra.writes import require_writes
from simulator.era import EraSimulation, RunOptions, RunReport
from simulator.eras.maestro import MaestroEra
from simulator.eras.notify import NotifyEra
from simulator.eras.redis import RedisEra
from simulator.farm import remove_sim_farm
from simulator.farm_rules import PLAYS_CUEBOT, FarmRefused, refuse_without_cuebots_rights
from simulator.processes import ProcessRefused
from simulator.runner import run
from simulator.stopping import RunFailed
from simulator.workers.redis.reseeding import RESEEDERS

ERAS: dict[str, EraSimulation] = {"redis": RedisEra(), "notify": NotifyEra(), "maestro": MaestroEra()}
# The options a run takes as they are (the others: --faults parsed, --json, --keep-farm, --era).
RUN_OPTIONS = ("shows", "hosts", "jobs", "seconds", "bookers", "releasers", "seed", "existing", "reseeder")


def at_least(minimum: int):
    def parse(value: str) -> int:
        number = ascii_int(value)
        if number < minimum:
            raise ValueError(value)
        return number

    parse.__name__ = f"integer >= {minimum}"
    return parse


class Command(BaseCommand):
    help = (
        "Run the farm simulator against the configured PostgreSQL and Redis: bookers (the scheduler), "
        "releasers (Cuebot), a reconciler and an operator, with the faults chosen by --faults (none by "
        "default); then reconcile and check the invariants (over cap, counters sampled low or "
        "negative, drift after the reconcile, in Redis and in Cuebot's tables; docs/simulator.md). "
        "Exit 0 only if all hold. It builds its own farm (names starting 'sim-', "
        "rebuilt every run) unless --existing is given. The redis-kill fault runs the whole run on a Redis "
        "of its own (redis-server on a free loopback port), which it kills with SIGKILL and starts again "
        "empty; http-release sends releases through the web server as deployed (gunicorn, started for the "
        "run, with an API token removed afterwards). The redis-restart fault empties the accounting Redis "
        "(FLUSHDB): without redis-kill, while that Redis holds keys of shows the simulator did not create "
        "it is refused, unless --allow-flush-foreign-keys."
    )

    def execute(self, *args, **options):
        try:
            return super().execute(*args, **options)
        except RunFailed as failed:
            # A run that could not go on, in one line (--traceback shows where); exit 1, as a failed invariant.
            raise CommandError(f"the simulation stopped: {failed}", returncode=1) from failed

    def add_arguments(self, parser) -> None:
        parser.add_argument("--shows", type=at_least(2), default=4, help="shows to build (default: %(default)s)")
        parser.add_argument("--hosts", type=at_least(2), default=20, help="hosts to build (default: %(default)s)")
        parser.add_argument("--jobs", type=at_least(1), default=40, help="jobs to build (default: %(default)s)")
        parser.add_argument(
            "--seconds", type=at_least(1), default=60, help="length of the run in seconds (default: %(default)s)"
        )
        parser.add_argument("--bookers", type=at_least(1), default=4, help="booker threads (default: %(default)s)")
        parser.add_argument("--releasers", type=at_least(1), default=2, help="releaser threads (default: %(default)s)")
        parser.add_argument(
            "--faults",
            default="none",
            help=f"'all', 'none' or a comma list of: {', '.join(RedisEra.fault_kinds)} (default: %(default)s)",
        )
        parser.add_argument(
            "--seed", type=ascii_int, default=1, help="seed of every random choice (default: %(default)s)"
        )
        self._add_what_and_how(parser)

    def _add_what_and_how(self, parser) -> None:
        """The report's form, the farm, the era and the reseeder."""
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--existing", action="store_true", help="play on the farm already in the database")
        parser.add_argument(
            "--keep-farm",
            action="store_true",
            help="keep the simulator's own farm (sim-* shows) after the run; by default it is removed, so "
            "it does not linger on the farm overview",
        )
        parser.add_argument(
            "--allow-flush-foreign-keys",
            action="store_true",
            help="let the redis-restart fault flush the accounting Redis even though it holds keys of "
            "shows the simulator did not create (they are lost)",
        )
        parser.add_argument(
            "--era",
            choices=["redis", "notify", "maestro"],
            default="redis",
            help="which OpenCue scheduler to play: the Redis era's (acct:* hashes), the NOTIFY era's "
            "(in-memory counters fed by LISTEN; faults: " + ", ".join(NotifyEra.fault_kinds) + ") or the Maestro "
            "era's (Cuebot owns the five tables for every show: Maestro's bookings and Cuebot's releases "
            "beside this service's, the tables equal to SUM(proc) in every snapshot; faults: "
            + ", ".join(MaestroEra.fault_kinds)
            + ") (default: %(default)s)",
        )
        parser.add_argument(
            "--reseeder",
            choices=RESEEDERS,
            default="project",
            help="who reseeds during the run: this project's reseed (in-flight overlay) or one like "
            "the scheduler's own recompute (compare-and-swap only) (default: %(default)s)",
        )

    @refused_while_observing
    def handle(self, *args, faults: str, json: bool, allow_flush_foreign_keys: bool, **options) -> None:
        require_writes(action="simulate_farm", grant=PLAYS_CUEBOT)
        era = ERAS[options["era"]]
        run_options = self._run_options(era, faults=faults, allow_flush=allow_flush_foreign_keys, options=options)
        with http_release_token(wanted=era.wants_http_token(run_options)) as token:
            report = self._run(era, replace(run_options, http_token=token))
        self.stdout.write(_json_dumps(report.as_dict()) if json else report.as_text())
        if not options["existing"]:
            self._remove_farm(keep=options["keep_farm"])
        if not report.ok:
            raise CommandError("an invariant does not hold", returncode=1)

    def _run_options(self, era: EraSimulation, *, faults: str, allow_flush: bool, options: dict) -> RunOptions:
        """The run the options name, or the refusal (exit 2) of a fault the era does not know, of
        a role that may not book, or of what the era refuses (simulator.era.EraSimulation.refusal)."""
        try:
            kinds = era.parse_faults(faults)
        except ValueError as error:
            raise CommandError(str(error), returncode=2) from None
        run_options = RunOptions(
            **{name: options[name] for name in RUN_OPTIONS}, faults=kinds, allow_flush_foreign_keys=allow_flush
        )
        self._refuse_without_cuebots_rights()
        refusal = era.refusal(run_options)
        if refusal:
            raise CommandError(refusal, returncode=2)
        return run_options

    def _run(self, era: EraSimulation, options: RunOptions) -> RunReport:
        with tqdm(
            total=options.seconds,
            desc="simulating",
            unit="s",
            file=self.stderr,
            bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s {postfix}",
        ) as bar:

            def progress(elapsed: float, counts: dict[str, int]) -> None:
                bar.n = min(elapsed, options.seconds)
                bar.set_postfix(**counts, refresh=False)
                bar.refresh()

            try:
                return run(era=era, options=options, progress=progress)
            except (FarmRefused, ProcessRefused, ValueError) as refused:
                raise CommandError(str(refused), returncode=2) from None

    def _refuse_without_cuebots_rights(self) -> None:
        """Before the progress bar, so that a role that may not book is refused in one line."""
        try:
            refuse_without_cuebots_rights(command="simulate_farm")
        except FarmRefused as refused:
            raise CommandError(str(refused), returncode=2) from None

    def _remove_farm(self, *, keep: bool) -> None:
        if keep:
            self.stderr.write(
                "the simulated farm (sim-* shows) is kept: the next run, or seed_demo_farm's checks, see it"
            )
            return
        remove_sim_farm()


@contextmanager
def http_release_token(*, wanted: bool) -> Iterator[str | None]:
    """For the http-release fault: a user that may release procs, and its token, for the length
    of the run (removed afterwards, token included)."""
    if not wanted:
        yield None
        return
    user = get_user_model().objects.create_user(username=f"sim-http-{uuid.uuid4().hex[:8]}")
    try:
        grant_permissions(user=user, permissions=[RELEASE_PROCS])
        yield issue_token(user=user, name="simulate_farm --faults http-release")
    finally:
        user.delete()


def _json_dumps(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=False)
