"""A NOTIFY-era run's shared state, and the loop every worker of it runs (`work`)."""

import logging
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db import connections

from shows.models import Show
from simulator.era import RunOptions
from simulator.farm import LayerRef, SimFarm
from simulator.workers.gate import Gate
from simulator.workers.notify.model import Store
from simulator.workers.notify.scheduler import Scheduler
from simulator.workers.notify.stats import NotifyStats

logger = logging.getLogger(__name__)


@dataclass
class NotifyPlay:
    farm: SimFarm
    store: Store
    stats: NotifyStats
    scheduler: Scheduler
    gate: Gate
    stop: threading.Event
    options: RunOptions
    rng: random.Random
    caps_expected: dict[tuple[str, str], dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    # Jobs the job-kill fault marked FINISHED, and when each one's procs go (time.monotonic()).
    killed_jobs: set[str] = field(default_factory=set)
    kill_releases: list[tuple[float, str]] = field(default_factory=list)
    started: float = 0.0
    faults_due: dict[str, float] = field(default_factory=dict)  # kind -> when it fires next
    next_sample: float = 0.0

    @property
    def faults(self) -> tuple[str, ...]:
        return self.options.faults

    def managed_layers(self) -> list[LayerRef]:
        """The layers the scheduler books: its shows' (no show changes owner in this era's run).
        Booking a Cuebot-managed show's, it booked keys it neither counts nor hears about."""
        managed = Show.objects.filter(pk__in=self.farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True)
        return [layer for show in managed for layer in self.farm.layers_by_show.get(show, [])]


def work(run: NotifyPlay, *, where: str, step: Callable[[], None], pause: float = 0.0) -> None:
    """Repeat `step` until the run stops, never inside a quiet sample. A lost connection (a
    restart ended it mid-step) is counted and replaced; any other error ends the worker and
    is a failed invariant (worker_errors), never silent."""
    try:
        while not run.stop.wait(pause):
            with run.gate.operation():
                try:
                    step()
                except (DjangoOperationalError, DjangoInterfaceError):
                    run.stats.count("transient_errors", where)
                    connections.close_all()  # a terminated connection is replaced on the next query
    except Exception as error:  # noqa: BLE001 - reported as worker_errors
        logger.exception("simulator %s died", where)
        with run.stats.lock:
            run.stats.worker_errors.append(f"{where}: {type(error).__name__}: {error}")
    finally:
        connections.close_all()
