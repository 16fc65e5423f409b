"""Prometheus metrics of this service, exposed at /metrics.

When PROMETHEUS_MULTIPROC_DIR is set (make run sets it), gunicorn workers and the task
cluster write to it and /metrics aggregates them all. What is read at scrape time (the
subscription gauges, accounting.usage) is given to render() by the view that serves /metrics:
those series come from the database at each scrape, never from a process's file.
"""

import os
from collections.abc import Callable, Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from infra import __version__

# A metric created at import writes its file there at once, so the directory must exist
# before any command (migrate included) imports this module.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)


class BuildInfo(Collector):
    """cuebot_acct_build_info{version}: 1, labelled with the version the scraped process runs. Made at
    each scrape rather than kept in a process's file, so that the files a multiprocess directory keeps
    across an upgrade never show the version before it."""

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "cuebot_acct_build_info", "1, labelled with the version of cuebot-acct that answered.", labels=["version"]
        )
        family.add_metric([__version__], 1)
        yield family


BUILD_INFO = BuildInfo()
REGISTRY.register(BUILD_INFO)


def render(*, at_scrape: Iterable[Callable[[], bytes]] = ()) -> tuple[bytes, str]:
    """The exposition of every process's metrics, then what each of `at_scrape` reads now (in the
    same text format)."""
    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        registry.register(BUILD_INFO)
    return generate_latest(registry) + b"".join(read() for read in at_scrape), CONTENT_TYPE_LATEST


def gauge_text(*, name: str, text: str, value: float) -> bytes:
    """One gauge without labels in Prometheus's text format: what a reader of `render`'s
    `at_scrape` gives for a single value read at the scrape."""
    return f"# HELP {name} {text}\n# TYPE {name} gauge\n{name} {value!r}\n".encode()


# Release path (accounting.release.unbook.unbook_proc/unbook_procs, accounting.release.publish).

RELEASES = Counter("cuebot_acct_releases_total", "Procs released, counted at commit, by accounting branch.", ["branch"])
RELEASE_PUBLISH_FAILURES = Counter(
    "cuebot_acct_release_publish_failures_total",
    "Release publishes to Redis that failed and were dropped (Redis left counting high), by stage.",
    ["stage"],
)
RELEASE_PUBLISH_SECONDS = Histogram(
    "cuebot_acct_release_publish_seconds",
    "Time of one release script call to Redis, failed calls included.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
RELEASE_CLAMPED = Counter(
    "cuebot_acct_release_clamped_total",
    "Counters a release found below the amount it took off, kept at 0 by release.lua: Redis "
    "counted low before that release (a lost booking increment, a reseed that missed a proc); "
    "the next reseed heals it. Should stay at 0.",
)
RELEASE_PUBLISH_STALE = Counter(
    "cuebot_acct_release_publish_stale_total",
    "Release publishes that found their in-flight entry gone or expired and changed no counter "
    "(Redis left high until the next reseed).",
)
RELEASE_WITHHELD = Counter(
    "cuebot_acct_release_withheld_total",
    "Releases of scheduler-managed procs committed but deliberately not published, because a "
    "decrement could take a counter below SUM(proc) (Redis left high until the next reseed), by reason.",
    ["reason"],
)
RELEASE_UNRESOLVED = Counter(
    "cuebot_acct_release_job_gone_total",
    "Procs released after their job row was gone: their folder and point could not be resolved "
    "and keep counting them until the next recompute.",
    ["branch"],
)
RECOMPUTE_ROW_FAILURES = Counter(
    "cuebot_acct_recompute_row_failures_total",
    "Accounting rows a recompute (or recalculate_subs) could not set to SUM(proc); the other rows were set.",
    ["table"],
)
# The tables a recompute sets (accounting.reconcile.recompute_sql.TABLES): each series exists at 0 from
# the start, so the alert on its increase sees a table's first failure.
RECOMPUTED_TABLES = ("subscription", "layer_resource", "job_resource", "folder_resource", "point")
for _table in RECOMPUTED_TABLES:
    RECOMPUTE_ROW_FAILURES.labels(table=_table)
TABLE_REPAIRS = Counter(
    "cuebot_acct_table_repairs",
    "Repairs of Cuebot's five tables run by an operator (acct_reseed, the admin's repair) that set at least one "
    "row to SUM(proc); the dashboard marks each. A switch back and the Redis era's reconcile are not counted.",
)
RELEASE_SECONDS = Histogram(
    "cuebot_acct_release_seconds",
    "Time of one release call (unbook_proc, or unbook_procs of a batch), commit and publish included, failed calls too.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
RELEASE_BATCH_SIZE = Histogram(
    "cuebot_acct_release_batch_size",
    "Proc ids asked for per release call (unbook_proc counts as 1).",
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000),
)
# Series exist at 0 from the start, so alerts on their rate see the first failure.
for _branch in ("local", "scheduler", "cuebot"):
    RELEASES.labels(branch=_branch)
for _stage in ("prepare", "publish"):
    RELEASE_PUBLISH_FAILURES.labels(stage=_stage)


# --- Show ownership: switch seeding, the publish guardrail, recalculate_subs ---

SWITCH_SEED_FAILURES = Counter(
    "cuebot_acct_switch_seed_failures",
    "Seedings of a show's Redis keys after a switch to the scheduler that failed (each is retried).",
)
# Every process evaluates the same fleet-wide check, so the most recent value is the truth.
# The one name without the cuebot_acct_ prefix: Cuebot's own (its Redis-era guardrail),
# kept so dashboards and alerts written for Cuebot read this service too.
PUBLISH_MISCONFIGURED = Gauge(
    "cuebot_redis_publish_misconfigured",
    "1 while scheduler-managed shows exist and some live instance does not tell the scheduler of its "
    "releases on every era the fleet uses (Redis, NOTIFY).",
    multiprocess_mode="mostrecent",
)
RECALCULATE_SUBS_ROWS = Counter(
    "cuebot_acct_recalculate_subs_rows",
    "Subscription rows of Cuebot-managed shows corrected by recalculate_subs.",
)
RECALCULATE_SUBS_SKIPPED = Counter(
    "cuebot_acct_recalculate_subs_skipped",
    "recalculate_subs runs skipped because another instance held the lock.",
)


# Reconciliation (reseed, limit publishing, bootstrap).

RESEED_SKIPPED = Counter(
    "cuebot_acct_reseed_skipped_total",
    "Booked-counter reseed cycles given up after their write was refused on every attempt.",
    ["scope"],
)
RESEED_WRITES_REFUSED = Counter(
    "cuebot_acct_reseed_writes_refused_total",
    "Booked-counter reseed attempts whose write was refused: Redis restarted or failed over since "
    "the reseed began, its settle journal no longer reached back that far, or a rebuild lost Redis.",
)
RESEED_SECONDS = Histogram(
    "cuebot_acct_reseed_seconds",
    "Wall time of a reseed, by kind (booked, limits).",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
LIMIT_PUBLISH_FAILURES = Counter(
    "cuebot_acct_limit_publish_failures_total",
    "Limit changes committed in PostgreSQL whose Redis write failed (healed by the limit reseed).",
)
LIMIT_WRITES_REFUSED = Counter(
    "cuebot_acct_limit_writes_refused_total",
    "Limit changes committed in PostgreSQL whose Redis write was refused: the key was closed on a Redis not "
    "rebuilt since it came up (the rebuild writes them; acct_drift names them meanwhile).",
)
REDIS_FAILOVERS = Counter(
    "cuebot_acct_redis_failovers_total",
    "Times the accounting Redis was found to be a new master (a promoted replica): the managed keys were "
    "closed to booking and rebuilt from PostgreSQL.",
)
REBUILDS = Counter(
    "cuebot_acct_redis_rebuilds_total",
    "Rebuilds of the accounting Redis from PostgreSQL that finished (after an empty Redis or a failover).",
)
REDIS_MASTER = Gauge(
    "cuebot_acct_redis_master",
    "1 for the address of the accounting Redis master in use (0 for one used before a failover).",
    ["address"],
    multiprocess_mode="mostrecent",
)
_master_in_use: list[str] = []


def note_redis_master(*, address: str) -> None:
    if _master_in_use and _master_in_use[0] == address:
        return
    if _master_in_use:
        REDIS_MASTER.labels(address=_master_in_use.pop()).set(0)
    REDIS_MASTER.labels(address=address).set(1)
    _master_in_use.append(address)


def counter_total(name: str) -> float:
    """A counter's value, summed over this host's processes when they share PROMETHEUS_MULTIPROC_DIR."""
    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    return registry.get_sample_value(name) or 0.0


BOOTSTRAPS = Counter(
    "cuebot_acct_bootstrap_total",
    "Times an empty accounting Redis was detected and rebuilt.",
)


# Transactions rerun after PostgreSQL rolled them back whole (infra.transactions).

TRANSACTION_RETRIES = Counter(
    "cuebot_acct_transaction_retries_total",
    "Outermost transactions rerun after PostgreSQL aborted them (40P01 deadlock, 40001 serialization), "
    "by operation (release, recompute) and SQLSTATE.",
    ["operation", "sqlstate"],
)
for _operation in ("release", "recompute"):
    for _state in ("40P01", "40001"):
        TRANSACTION_RETRIES.labels(operation=_operation, sqlstate=_state)
SWITCH_RECOMPUTE_FAILURES = Counter(
    "cuebot_acct_switch_recompute_failures_total",
    "Recomputes of a show's PG accounting tables after its switch back to Cuebot that failed "
    "after their retries (the switch stands; the tables keep their old values until recomputed).",
)


# The periodic drift check (accounting.reconcile.drift_check), for alerts: set by the task cluster,
# read by whichever process is scraped, so the most recent write is the truth.

DRIFT_FIELDS = Gauge(
    "cuebot_acct_drift_fields",
    "Fields where Redis differs from PostgreSQL (rounding excluded), per scheduler-managed show, at the last drift check.",
    ["show"],
    multiprocess_mode="mostrecent",
)
DRIFT_LAST_CHECK = Gauge(
    "cuebot_acct_drift_last_check_timestamp_seconds",
    "Unix time of the last drift check that completed.",
    multiprocess_mode="mostrecent",
)
# Both checks (Redis and Cuebot's tables), by source; how long a row has drifted comes from the
# check's record of when it first saw it (accounting.reconcile.drift_history).
DRIFT_AGE = Gauge(
    "cuebot_acct_drift_age_seconds",
    "Seconds the show's oldest drifted row had been drifted at the last check, counted from the first check "
    "that saw it (0: nothing drifted), per show and source (cuebot_tables: Cuebot's five tables against "
    "SUM(proc); redis: the accounting Redis against PostgreSQL).",
    ["show", "source"],
    multiprocess_mode="mostrecent",
)


# The NOTIFY era (accounting.notify): what the scheduler is sent, counted at commit.

NOTIFICATIONS = Counter(
    "cuebot_acct_notifications_total",
    "pg_notify notifications sent from committed transactions, by channel (acct_release, acct_limit_change).",
    ["channel"],
)
NOTIFY_WITHHELD = Counter(
    "cuebot_acct_notify_withheld_total",
    "Releases of scheduler-managed procs committed without an acct_release notification, because the "
    "scheduler's recompute leaves such procs out and a decrement could take its store below SUM(proc), by reason.",
    ["reason"],
)
# One series per show the guardrail has named: 1 while stranded, 0 once it is not (a show seen
# stranded is remembered in the shared cache, so whichever process runs next clears it).
STRANDED_SHOW = Gauge(
    "cuebot_acct_stranded_show",
    "1 while a scheduler-managed show has waiting frames and no proc booked for ACCOUNTING_STRANDED_MINUTES: "
    "Cuebot's dispatcher skips flagged shows, so nothing books it.",
    ["show"],
    multiprocess_mode="mostrecent",
)


# The periodic check of Cuebot's own tables (accounting.reconcile.drift_check.run_check),
# in every era: rows of the five tables that differ from SUM(proc), for the shows Cuebot owns.

CUEBOT_TABLE_DRIFT_ROWS = Gauge(
    "cuebot_acct_cuebot_table_drift_rows",
    "Rows of Cuebot's five accounting tables that differ from SUM(proc), per show Cuebot owns (every show "
    "in the Maestro era), at the last check.",
    ["show"],
    multiprocess_mode="mostrecent",
)
CUEBOT_TABLE_DRIFT_LAST_CHECK = Gauge(
    "cuebot_acct_cuebot_table_drift_last_check_timestamp_seconds",
    "Unix time of the last check of Cuebot's tables against SUM(proc) that completed.",
    multiprocess_mode="mostrecent",
)
