"""The subscription gauges at /metrics: what each show holds on each allocation against its size
and burst, and each allocation's cores, so that a dashboard can say over time what CueGUI's
Subscriptions window says at the instant (docs/grafana.md, "Subscriptions").

Read at scrape time, one statement per scrape (accounting.usage.snapshot), rather than written by
a periodic task. Weighed on four counts:
- staleness: a scrape's values are the tables as the scrape reads them. A task's would be as old
  as its period, and stop with the task cluster;
- consistency: one statement is one snapshot, so a booking or a release is in every number of a
  scrape or in none. A task reading the same statement would be as consistent, but
- a renamed show or a deleted subscription leaves nothing behind: the series are made anew at
  each scrape, from the rows. Gauges written by a task into the processes' multiprocess files
  keep every label set they were ever given (prometheus_client cannot remove one there), so the
  old name would be scraped, at its last value, for as long as the files live;
- cost: one read per scrape, of the subscriptions, the shows and a sum over the hosts: a scrape of
  the 10x farm (200 shows, 400 subscriptions, 15,530 hosts) takes about 12 ms of server time, the
  statement 6 of them (bench/metrics_scrape.py). Prometheus's scrape interval sets the rate. No
  cache: a cache per process would bound neither the fleet's reads (each worker and instance has
  its own) nor anything this cheap, and would age every value by its lifetime.
Several instances scraped at once each export the same series, apart from their `instance`
label: the dashboard and the recording rules (deploy/prometheus/) take `max by (show,
allocation, facility)` (or by allocation), never a sum over instances, so nothing is doubled.

Units and names: cores (centicores / 100, exact to the hundredth), GPUs whole; named after
OpenCue's Subscription (`size`, `burst`, `reserved_cores`: what the show holds, booked) and
AllocationStats (`cores`, `idle_cores`, `gpus`, `idle_gpus`) messages; labels are names (`show`
spelled as Maestro's `cue_maestro_show_cores{show}` spells it, `allocation`, `facility`), never
ids, so the series grow with subscriptions, never with jobs, hosts or procs. A burst of -1 is
exported as -1, as the row holds it: Cuebot compares a subscription's burst as a number, so -1
lets nothing book there (no subscription is unlimited). A database error, or a read cut at its
timeout (a migration's lock on a table, accounting.usage.snapshot), leaves these series out of
that scrape, logged, and the rest of /metrics is served.
"""

import logging
from collections.abc import Callable, Iterator

from django.db import DatabaseError

from accounting.live.units import cores_number
from accounting.usage.snapshot import AllocationHosts, SubscriptionUse, Usage, read_usage
from infra.cuebot_database import read_cuebot, replay
from infra.metrics import gauge_text
from infra.outages import first_line

logger = logging.getLogger(__name__)


def _cores(centicores: int | None) -> float | None:
    return None if centicores is None else float(cores_number(centicores))


def _gpus(gpus: int | None) -> float | None:
    return None if gpus is None else float(gpus)


SUBSCRIPTION_GAUGES: tuple[tuple[str, str, Callable[[SubscriptionUse], float | None]], ...] = (
    (
        "cuebot_acct_subscription_reserved_cores",
        "Cores the show holds on the allocation, booked as the site's scheduler books against them: the "
        "subscription row (every show in the Maestro era, Cuebot's shows in the others), or the accounting "
        "Redis for a scheduler-managed show in the Redis and NOTIFY eras (absent where Redis holds none).",
        lambda sub: _cores(sub.booked),
    ),
    (
        "cuebot_acct_subscription_reserved_gpus",
        "GPUs the show holds on the allocation, from the same source as its reserved cores.",
        lambda sub: _gpus(sub.booked_gpus),
    ),
    (
        "cuebot_acct_subscription_size_cores",
        "Cores the show is promised on the allocation (subscription.int_size).",
        lambda sub: _cores(sub.size),
    ),
    (
        "cuebot_acct_subscription_burst_cores",
        "Cores the show may hold on the allocation at most (subscription.int_burst); -1 as stored, which "
        "Cuebot compares as a number: nothing books there.",
        lambda sub: _cores(sub.burst),
    ),
)
ALLOCATION_GAUGES: tuple[tuple[str, str, Callable[[AllocationHosts], float | None]], ...] = (
    ("cuebot_acct_allocation_cores", "Cores of the allocation's hosts.", lambda alloc: _cores(alloc.cores)),
    (
        "cuebot_acct_allocation_idle_cores",
        "Idle cores of the allocation's hosts (host.int_cores_idle).",
        lambda alloc: _cores(alloc.idle_cores),
    ),
    ("cuebot_acct_allocation_gpus", "GPUs of the allocation's hosts.", lambda alloc: _gpus(alloc.gpus)),
    (
        "cuebot_acct_allocation_idle_gpus",
        "Idle GPUs of the allocation's hosts (host.int_gpus_idle).",
        lambda alloc: _gpus(alloc.idle_gpus),
    ),
)
SCHEDULER_MANAGED = (
    "cuebot_acct_show_scheduler_managed",
    "1 while the show is flagged scheduler-managed (show.b_scheduler_managed), else 0: the dashboard marks "
    "each change, whoever made it (this service's toggle or cueadmin).",
)
REPLAY_LAG = (
    "cuebot_acct_cuebot_database_replay_lag_seconds",
    "Seconds Cuebot's tables, as this service reads them, are behind the primary: now minus the last "
    "transaction the standby named by CUEBOT_DATABASE_URL replayed, 0 once it has replayed all it received "
    "and 0 on a primary.",
)
NAMES = tuple(name for name, *_ in SUBSCRIPTION_GAUGES + ALLOCATION_GAUGES) + (SCHEDULER_MANAGED[0], REPLAY_LAG[0])


def _label_value(text: str) -> str:
    """A label's value in Prometheus's text format: backslash, double quote and line feed escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**names: str) -> str:
    return ",".join(f'{label}="{_label_value(value)}"' for label, value in names.items())


def _family(name: str, text: str, samples: Iterator[tuple[str, float | None]]) -> list[str]:
    lines = [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
    return lines + [f"{name}{{{labels}}} {value!r}" for labels, value in samples if value is not None]


def exposition(usage: Usage) -> bytes:
    """Every gauge of the snapshot in Prometheus's text format (version 0.0.4, what /metrics serves),
    one series per subscription, allocation or show. Written here rather than by prometheus_client's
    metric families and generate_latest, which took 1.6 times as long as the read itself for the 10x
    farm's 1,800 series, and 9 times as long as this (medians of 7 interleaved rounds); each
    subscription's labels are escaped once for its four gauges. `promtool check metrics` holds it."""
    subscriptions = [
        (_labels(show=sub.show, allocation=sub.allocation, facility=sub.facility), sub) for sub in usage.subscriptions
    ]
    allocations = [
        (_labels(allocation=alloc.allocation, facility=alloc.facility), alloc) for alloc in usage.allocations
    ]
    lines: list[str] = []
    for name, text, of_sub in SUBSCRIPTION_GAUGES:
        lines += _family(name, text, ((labels, of_sub(sub)) for labels, sub in subscriptions))
    for name, text, of_alloc in ALLOCATION_GAUGES:
        lines += _family(name, text, ((labels, of_alloc(alloc)) for labels, alloc in allocations))
    flags = ((_labels(show=show), float(managed)) for show, managed in usage.scheduler_managed.items())
    lines += _family(*SCHEDULER_MANAGED, flags)
    return ("\n".join(lines) + "\n").encode()


def scraped() -> bytes:
    """The gauges as they are now, for /metrics (metrics.render's `at_scrape`); nothing, logged, when
    Cuebot's tables cannot be read."""
    try:
        usage = read_usage()
    except DatabaseError as error:
        logger.warning(
            "subscription gauges: Cuebot's tables could not be read (%s); left out of this scrape", first_line(error)
        )
        return b""
    return exposition(usage)


def replay_lag() -> bytes:
    """The standby's replay lag as of this scrape (0 where Cuebot's tables are the service's own
    database's: no query then); nothing, logged, when it cannot be read."""
    try:
        lag = read_cuebot(replay, what="the replay lag").lag
    except DatabaseError as error:
        logger.warning(
            "replay lag: Cuebot's database could not be read (%s); left out of this scrape", first_line(error)
        )
        return b""
    name, text = REPLAY_LAG
    return gauge_text(name=name, text=text, value=lag)
