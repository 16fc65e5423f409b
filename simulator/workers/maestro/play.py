"""A Maestro-era run's shared state (`MaestroPlay`), and how each of its threads meets a
transaction's outcome: a deadlock victim was rolled back whole and is run again, counted; a lost
connection leaves the outcome unknown, so nothing is retried blindly.
"""

import random
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg
from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db import connections

from infra.transactions import sqlstate
from simulator.era import RunOptions
from simulator.farm import LayerRef, SimFarm
from simulator.faults import FaultPlan
from simulator.processes import WebServer

MAESTRO_FAULTS = ("job-kill", "pg-restart", "release-rollback", "booking-rollback", "deadlock-order", "flag-flip")
# Mean seconds between two firings over the whole run (simulator.faults.FaultPlan: every selected
# kind fires at least once, none in the last fifth).
FAULT_PERIOD_SECONDS = {
    "job-kill": 3.75,
    "pg-restart": 7.5,
    "release-rollback": 1.25,
    "booking-rollback": 1.25,
    "deadlock-order": 6.25,
    "flag-flip": 2.5,
}
REPAIR_SECONDS = 2.0
DEADLOCK_ATTEMPTS = 10  # a deadlock victim rolled back whole: run again, up to this many times in all
SERVICE_THREAD = "sim-maestro-service"  # threads whose connections take the service's role

T = TypeVar("T")


def parse_maestro_faults(*, text: str) -> tuple[str, ...]:
    if text == "all":
        return MAESTRO_FAULTS
    if text in ("", "none"):
        return ()
    kinds = tuple(dict.fromkeys(kind.strip() for kind in text.split(",") if kind.strip()))
    unknown = [kind for kind in kinds if kind not in MAESTRO_FAULTS]
    if unknown:
        raise ValueError(
            f"unknown fault(s) for --era maestro: {', '.join(unknown)}; one of {', '.join(MAESTRO_FAULTS)}"
        )
    return kinds


@dataclass
class MaestroStats:
    bookings: Counter = field(default_factory=Counter)  # by planner: maestro, dispatcher, local
    chunks: int = 0
    rejections: Counter = field(default_factory=Counter)  # by cap kind (cuebot_rows.CAP_KINDS)
    releases: Counter = field(default_factory=Counter)  # procs released, by kind of releaser
    release_requests: int = 0
    release_answers: Counter = field(default_factory=Counter)  # by outcome
    release_unknown: int = 0  # procs of requests whose connection was lost: outcome unknown
    faults: Counter = field(default_factory=Counter)
    samples: int = 0
    deadlocks: Counter = field(default_factory=Counter)  # 40P01 seen by this run's own workers, by where
    retries: Counter = field(default_factory=Counter)  # transactions run again after a deadlock
    lost_connections: Counter = field(default_factory=Counter)
    bookings_resolved: int = 0  # chunks whose commit was cut off, looked up afterwards
    repairs: int = 0
    cap_changes: Counter = field(default_factory=Counter)
    flag_flips: int = 0
    violations: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    deadlock_details: list[str] = field(default_factory=list)
    answers_by_request: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, counter: str, key: str, n: int = 1) -> None:
        with self.lock:
            getattr(self, counter)[key] += n

    def add(self, **amounts: int) -> None:
        with self.lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def record(self, invariant: str, item: object) -> None:
        with self.lock:
            self.violations[invariant].append(item)

    def note_deadlock(self, text: str) -> None:
        """The first few deadlocks' own words (PostgreSQL names both sides' waits), for the report."""
        with self.lock:
            if len(self.deadlock_details) < 5:
                self.deadlock_details.append(" ".join(text.split()))

    def request(self) -> int:
        with self.lock:
            self.release_requests += 1
            return self.release_requests

    def answer(self, request: int, *, outcome: str) -> None:
        with self.lock:
            self.answers_by_request[request] += 1
            self.release_answers[outcome] += 1


@dataclass
class MaestroPlay:
    options: RunOptions
    farm: SimFarm
    stats: MaestroStats
    faults: FaultPlan
    web: WebServer | None = None
    repair_seconds: float = REPAIR_SECONDS  # between two of the operator's repairs
    restarted_at: float = float("-inf")  # the last pg-restart (time.monotonic())
    stop: threading.Event = field(default_factory=threading.Event)
    killed_jobs: set[str] = field(default_factory=set)
    kills_due: list[tuple[float, str]] = field(default_factory=list)  # (when its procs go, job id)
    reservations: dict[str, list[str]] = field(default_factory=dict)  # host id -> jobs reserved on it
    layers_by_job: dict[str, list[LayerRef]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # What the report compares with, read before the workers start; the main thread's clock.
    procs_before: int = 0
    retries_before: float = 0.0
    http_retries_before: float = 0.0
    started: float = 0.0
    next_sample: float = 0.0
    role: str = ""  # the service's role for the run

    @property
    def seed(self) -> int:
        return self.options.seed

    def rng(self, role: str, index: int = 0) -> random.Random:
        return random.Random(f"{self.seed}:{role}:{index}")

    def layers(self) -> list[LayerRef]:
        return [layer for show in self.farm.show_ids for layer in self.farm.layers_by_show.get(show, [])]


# --- Outcomes of a transaction ---------------------------------------------------------------


class Lost(Exception):
    """The connection went away mid-transaction (a PostgreSQL restart): the outcome is unknown,
    so nothing is retried blindly; the caller looks up what committed, where it can."""


def lost(*, error: BaseException) -> bool:
    """A terminated session (57P01 and kin), a closed socket, a connection Django already gave up."""
    if isinstance(error, DjangoInterfaceError | psycopg.InterfaceError):
        return True
    if isinstance(error, DjangoOperationalError | psycopg.OperationalError):
        state = sqlstate(error)
        return state is None or state.startswith(("57P", "08"))
    return False


def attempt(*, run: MaestroPlay, where: str, body: Callable[[], T]) -> T:
    """Run `body` (it opens its own transaction). A deadlock victim was rolled back whole, so
    running it again is safe and it is, counted; a lost connection is raised as Lost."""
    attempts = 1
    while True:
        try:
            return body()
        except (DjangoOperationalError, psycopg.OperationalError) as error:
            if sqlstate(error) != "40P01":
                if lost(error=error):
                    raise Lost(where) from error
                raise
            run.stats.count("deadlocks", where)
            run.stats.note_deadlock(f"{where}: {error.__cause__ or error}")
            if attempts == DEADLOCK_ATTEMPTS:
                run.stats.record("deadlocks_not_retried", where)
                raise
            run.stats.count("retries", where)
            attempts += 1
        except DjangoInterfaceError as error:
            raise Lost(where) from error


def reconnect(*, run: MaestroPlay, where: str) -> None:
    run.stats.count("lost_connections", where)
    connections.close_all()


def worker(*, name: str, body: Callable[..., None]) -> Callable[..., None]:
    """Run a worker's loop, `body(run=, index=)`; an unexpected exception is a failed invariant,
    never silent."""

    def run_worker(run: MaestroPlay, index: int) -> None:
        try:
            body(run=run, index=index)
        except Exception as error:  # noqa: BLE001 - reported as worker_errors
            run.stats.record("worker_errors", f"{name} {index}: {type(error).__name__}: {error}")
        finally:
            connections.close_all()

    return run_worker
