"""When each fault fires: a schedule drawn from the run's seed, consumed by the workers.

The plan fixes, for each selected kind, how many times and at what offsets into the run
it becomes due. A worker that can inject that kind calls `take(kind)` at its natural
injection point; the first caller after an offset has passed gets True and injects it.
Thread timing still varies between runs; the schedule and every random choice do not.
"""

import random
import threading
import time
from collections.abc import Mapping

FAULT_KINDS = (
    "redis-restart",  # FLUSHDB of the accounting database and SCRIPT FLUSH: an empty Redis
    "publish-drop",  # one release publish fails as if Redis timed out
    "crash-after-lua",  # a booker dies between the booking script and the proc INSERT
    "pg-rollback",  # a release transaction rolls back after the proc DELETE
    "flag-flip",  # an operator switches a show between Cuebot and the scheduler
    "limit-change",  # an operator changes a burst, folder cap or job cap
    "slow-commit",  # a booking holds its INSERT transaction open before committing
    "job-kill",  # a job is killed: FINISHED first, its procs released 0.5-2.5 s later
    "redis-kill",  # the run's own accounting Redis is killed with SIGKILL and started again, empty
    "http-release",  # a release goes through the HTTP API of the web server as deployed (gunicorn)
    "release-stall",  # Cuebot stops between a release's commit and its publish until its in-flight entry expired
)

# Faults that need a topology the run does not build: named one by one, never part of "all".
TOPOLOGY_FAULTS = (
    "failover",  # SENTINEL FAILOVER: a replica is promoted (ACCOUNTING_REDIS_URL must be redis+sentinel://)
)

# Mean seconds between two firings of a kind; every selected kind fires at least once.
PERIOD_SECONDS = {
    "redis-restart": 30.0,
    "publish-drop": 2.0,
    "crash-after-lua": 2.0,
    "pg-rollback": 2.0,
    "flag-flip": 8.0,
    "limit-change": 2.0,
    "slow-commit": 0.5,
    "job-kill": 2.0,
    "redis-kill": 30.0,
    "http-release": 0.25,
    "release-stall": 4.0,
    "failover": 30.0,
}


def parse_faults(text: str) -> tuple[str, ...]:
    """'all', 'none', '' or a comma list of FAULT_KINDS; ValueError names the unknown ones."""
    text = text.strip()
    if text == "all":
        return FAULT_KINDS
    if text in ("", "none"):
        return ()
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in FAULT_KINDS + TOPOLOGY_FAULTS]
    if unknown:
        raise ValueError(
            f"unknown fault kind(s): {', '.join(unknown)}; choose from "
            f"{', '.join(FAULT_KINDS + TOPOLOGY_FAULTS)} or 'all' (which leaves out {', '.join(TOPOLOGY_FAULTS)})"
        )
    return kinds


class FaultPlan:
    """When each selected fault is due, drawn from the seed: every kind at least once, about one
    firing per period (`periods`: this module's for the Redis era, the Maestro era's its own)."""

    def __init__(
        self,
        *,
        kinds: tuple[str, ...],
        seconds: float,
        rng: random.Random,
        periods: Mapping[str, float] = PERIOD_SECONDS,
    ) -> None:
        self.kinds = kinds
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._due: dict[str, list[float]] = {}
        for kind in kinds:
            count = max(1, round(seconds / periods[kind]))
            # Leave the last fifth of the run free of new faults so every one can be
            # observed by the reconciler before the workers stop.
            self._due[kind] = sorted(rng.uniform(0.05 * seconds, 0.8 * seconds) for _ in range(count))

    def start(self) -> None:
        self._started = time.monotonic()

    def take(self, kind: str) -> bool:
        """True once per scheduled firing of `kind` whose time has come."""
        with self._lock:
            due = self._due.get(kind)
            if not due or time.monotonic() - self._started < due[0]:
                return False
            due.pop(0)
            return True

    def rearm(self, kind: str) -> None:
        """A taken firing that could not be injected (no candidate): due again at once."""
        with self._lock:
            self._due.setdefault(kind, []).insert(0, 0.0)

    def pending(self) -> dict[str, int]:
        with self._lock:
            return {kind: len(times) for kind, times in self._due.items() if times}
