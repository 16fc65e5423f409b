"""A Redis-era run's shared state (`RedisPlay`), and how its workers meet what goes wrong: an
unexpected exception ends the worker and is counted (worker_errors), a Redis error is counted
where a fault of the run causes them, a transaction PostgreSQL rolled back whole is counted."""

import logging
import random
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from django.db import OperationalError, connections

from accounting.ownership.switching import SwitchRefused
from infra.transactions import TRANSIENT_SQLSTATES, sqlstate
from simulator.era import RunOptions
from simulator.farm import SimFarm
from simulator.faults import FaultPlan
from simulator.processes import PrivateRedis, WebServer
from simulator.report import Stats
from simulator.workers.gate import Gate
from simulator.workers.redis.publishing import PublishDrop, StalledPublishes

logger = logging.getLogger(__name__)


@dataclass
class RedisPlay:
    options: RunOptions
    farm: SimFarm
    stats: Stats
    plan: FaultPlan
    reconcile_interval: float
    inflight_ttl_seconds: int
    stop: threading.Event = field(default_factory=threading.Event)
    publish_drop: PublishDrop | None = None
    stalls: StalledPublishes | None = None
    # Held by a fault that empties or replaces the accounting Redis (redis-restart, redis-kill,
    # failover) and by the stalled publishes' check, which reads counters before and after.
    redis_faults: threading.Lock = field(default_factory=threading.Lock)
    gate: Gate = field(default_factory=Gate)
    # Jobs the job-kill fault marked FINISHED: the scheduler books no more frames of them.
    killed_jobs: set[str] = field(default_factory=set)
    # The run's own accounting Redis (redis-kill) and web server (http-release), when started.
    redis_server: PrivateRedis | None = None
    web: WebServer | None = None
    # When the workers started, when the reconciler runs its last reseed (four fifths into the
    # run) and when it finished, None until it has (the workers go on after that: stop_at).
    started: float = 0.0
    last_reseed_at: float = float("inf")
    last_reseed_done_at: float | None = None
    # When the job-kill fault last killed a job (time.monotonic()).
    last_kill_at: float = float("-inf")
    clamped_before: float = 0.0  # cuebot_acct_release_clamped_total when the run began

    @property
    def seed(self) -> int:
        return self.options.seed

    @property
    def reseeder(self) -> str:
        return self.options.reseeder

    def rng(self, role: str, index: int = 0) -> random.Random:
        return random.Random(f"{self.seed}:{role}:{index}")


def worker(name: str):
    """Run a worker body, count any unexpected exception, and close this thread's connections."""

    def decorate(body):
        def run(play: RedisPlay, index: int) -> None:
            try:
                body(play, index)
            except Exception as error:  # noqa: BLE001 - reported as a failed invariant, never silent
                logger.exception("simulator %s %d died", name, index)
                play.stats.count("errors", f"{name}: {type(error).__name__}: {error}")
            finally:
                connections.close_all()

        run.__name__ = name
        return run

    return decorate


@contextmanager
def redis_errors_counted(play: RedisPlay, label: str):
    """A Redis call the scheduler makes fails (no master during a failover, no server while a
    killed one restarts; a switch to the scheduler refused because its keys could not be
    closed): counted, and the caller goes on, as a scheduler would; every such
    failure leaves Redis high. Only in a run with the failover or redis-kill fault: anywhere
    else a Redis error ends the worker (worker_errors)."""
    try:
        yield
    except (redis.exceptions.RedisError, SwitchRefused) as error:
        if not set(play.plan.kinds) & {"failover", "redis-kill"}:
            raise
        play.stats.count("redis_errors", f"{label}: {type(error).__name__}")


@contextmanager
def transient(play: RedisPlay, label: str):
    """Count a transaction PostgreSQL rolled back whole (the service's transient errors:
    deadlock, serialization failure) instead of ending the worker: the caller (Cuebot, the
    operator) sees the error and does it again later, as these loops will. Anything else
    still ends the worker."""
    try:
        yield
    except OperationalError as error:
        state = sqlstate(error)
        if state not in TRANSIENT_SQLSTATES:
            raise
        play.stats.count("transient_errors", f"{label} {state}")
