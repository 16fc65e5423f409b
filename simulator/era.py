"""What one era's simulation gives the runner (simulator.runner), so that every era is played
the same way: its faults, the farm and processes it builds, the workers it starts, what its main
thread does while they run (faults that stop the world, samples), and its report, which judges
its invariants. The eras are simulator.eras.redis, .notify and .maestro."""

import threading
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class RunOptions:
    """A run as simulate_farm's options give it (the defaults are the command's)."""

    shows: int = 4
    hosts: int = 20
    jobs: int = 40
    seconds: float = 60.0
    bookers: int = 4
    releasers: int = 2
    faults: tuple[str, ...] = ()
    seed: int = 1
    existing: bool = False
    # Who reseeds in the Redis era: "project" (accounting.reconcile.reseed) or "scheduler" (the
    # reference design's reseed, no in-flight overlay; docs/redis-protocol.md).
    reseeder: str = "project"
    # Let the Redis era's redis-restart fault flush an accounting Redis holding other shows' keys.
    allow_flush_foreign_keys: bool = False
    # An API token allowed to release procs, for releases over HTTP (the caller makes it: tokens
    # belong to the operator faces, which the simulator does not import).
    http_token: str | None = None


class CountedStats(Protocol):
    """What the progress bar reads of a run's statistics where they count each event once."""

    bookings: int
    rejections: Counter
    releases: int
    faults: Counter


def progress_counts(stats: CountedStats) -> dict[str, int]:
    """An era's `counts` from statistics kept as simulator.report.Stats keeps them."""
    return {
        "booked": stats.bookings,
        "rejected": sum(stats.rejections.values()),
        "released": stats.releases,
        "faults": sum(stats.faults.values()),
    }


class Play(Protocol):
    """One era's run while it plays: the state its workers share; `stop` ends them."""

    stop: threading.Event


class RunReport(Protocol):
    """What a run counted and whether every invariant held."""

    @property
    def ok(self) -> bool: ...

    def as_dict(self) -> dict: ...

    def as_text(self) -> str: ...


@dataclass(frozen=True)
class Role:
    """`count` workers running `body(play, index)`, each in its own thread named after `name`."""

    name: str
    body: Callable[..., None]
    count: int = 1


class EraSimulation(Protocol):
    name: str
    fault_kinds: tuple[str, ...]  # what --faults all names

    def parse_faults(self, text: str) -> tuple[str, ...]:
        """'all', 'none' or a comma list; ValueError names the kinds this era does not know."""

    def refusal(self, options: RunOptions) -> str | None:
        """Why these options cannot run in this era (exit 2), before anything is written."""

    def wants_http_token(self, options: RunOptions) -> bool:
        """Whether the run releases over HTTP and so needs RunOptions.http_token."""

    def played(self, options: RunOptions) -> AbstractContextManager[Play]:
        """The era held, the farm built, the processes and seams of the run in place; all taken
        down when the block ends (the report is made inside it)."""

    def roles(self, play: Play) -> list[Role]:
        """The workers the run starts."""

    def begin(self, play: Play) -> None:
        """Just before the workers start: the fault clock set, what the report compares to read."""

    def stop_at(self, play: Play) -> float:
        """When the workers stop (time.monotonic()); it may move while they run."""

    def tick(self, play: Play) -> float:
        """The main thread's part while the workers run; returns how long to wait for the next."""

    def counts(self, play: Play) -> dict[str, int]:
        """For the progress bar: booked, rejected, released, faults."""

    def report(self, play: Play, *, seconds: float) -> RunReport:
        """Once the workers stopped: the final checks and the report."""
