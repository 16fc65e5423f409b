"""The periodic drift check: every source of the era checked, recorded and gauged by one path.

The sources: Cuebot's tables against SUM(proc) in every era, for the shows Cuebot owns (CUEBOT_TABLES),
and in the redis era the scheduler-managed shows' Redis fields (REDIS_FIELDS). It runs on its own
schedule (`acct-drift-check`), whether or not this service reconciles: drift is worth an alert
whoever heals it. Read-only on Cuebot's tables and on Redis (it writes its own record of drift
only), so it takes no reseed lock.

Each check of a source sets its gauge per show (0 for a show it no longer checks, so no series
keeps a stale count), its last-check time and per show the age of its oldest drifted row (for an
alert on drift that outlives a repair), records the rows (accounting.reconcile.drift_history) and
the result in the shared cache, which every web process reads. A source that cannot be read
records the error and leaves its time and its records as they were: a check that did not happen
must not look recent. Drift in many shows is logged as the worst few and their count.
"""

import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from django.core.cache import cache

from accounting.reconcile.drift_history import forget_drift, record_drift
from accounting.reconcile.redis_against_pg import REDIS_FIELDS, RedisFields
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES, CuebotTables
from infra import metrics
from infra.era import era

logger = logging.getLogger(__name__)

# The shows a check's log line names; `manage.py acct_drift` names the rest.
WORST_NAMED = 5


# A source: the DriftRecord.Source it is, what drift means for it and what it counts (for the log),
# its gauges, the read errors it records as a failed check; the shows it checks (id -> name), their
# drifted rows with per show how many it compared (where it counts them). The faces name the rows
# (accounting.operators.drift_views.NAMED).
DriftSource = CuebotTables | RedisFields


def status_key(source: DriftSource) -> str:
    return f"acct-drift-status:{source.source}"


SOURCES: dict[str, DriftSource] = {source.source: source for source in (CUEBOT_TABLES, REDIS_FIELDS)}


def era_sources() -> list[DriftSource]:
    """What the checks read in the site's era (infra.era.Era.drift_sources)."""
    return [SOURCES[name] for name in era().drift_sources]


@dataclass(frozen=True)
class DriftCheck:
    checked_at: float
    drifted: dict[str, int]  # show name -> rows drifted, every show the source checks
    error: str | None = None


def run_check(source: DriftSource) -> DriftCheck:
    """One check of `source`: read, recorded, gauged, kept for the faces, logged."""
    started = time.time()
    previous = cache.get(status_key(source)) or {}
    try:
        shows = source.shows()
        rows, checked = source.read(show_ids=list(shows))
    except source.unreadable as error:
        logger.warning("drift check: %s could not be read: %s: %s", source.source, type(error).__name__, error)
        failed = {**previous, "error": f"{type(error).__name__}: {error}", "failed_at": started}
        cache.set(status_key(source), failed, timeout=None)
        return DriftCheck(checked_at=started, drifted={}, error=str(error))
    at = datetime.fromtimestamp(started, UTC)
    ages = record_drift(source=source.source, rows=rows, show_names=shows, checked_at=at)
    drifted = Counter(row.show_id for row in rows)
    status = {pk: {"name": name, "drifted": drifted[pk], "checked": checked.get(pk)} for pk, name in shows.items()}
    for entry in (entry for pk, entry in previous.get("shows", {}).items() if pk not in status):
        source.gauge.labels(show=entry["name"]).set(0)
        metrics.DRIFT_AGE.labels(show=entry["name"], source=source.source).set(0)
    for pk, name in shows.items():
        source.gauge.labels(show=name).set(drifted[pk])
        metrics.DRIFT_AGE.labels(show=name, source=source.source).set(ages.get(pk, 0))
    source.last_check.set(started)
    cache.set(status_key(source), {"checked_at": started, "shows": status}, timeout=None)
    counts = {name: drifted[pk] for pk, name in shows.items()}
    _log(source, counts=counts)
    return DriftCheck(checked_at=started, drifted=counts)


def _log(source: DriftSource, *, counts: dict[str, int]) -> None:
    """One line whatever the number of shows drifted: the worst few, and how many there are."""
    worst = sorted(((n, name) for name, n in counts.items() if n), key=lambda entry: (-entry[0], entry[1]))
    if not worst:
        return
    named = ", ".join(f"{name} ({n} {source.unit})" for n, name in worst[:WORST_NAMED])
    more = f" and {len(worst) - WORST_NAMED} more" if len(worst) > WORST_NAMED else ""
    logger.warning(
        "drift check: %s in %d show(s): %s%s (manage.py acct_drift names the rows)",
        source.differs,
        len(worst),
        named,
        more,
    )


def run_drift_checks() -> int:
    """Every source of the era checked; the records of a source no check reads any more (Redis's,
    out of the redis era) forgotten, or they would stay listed for good. Shows with drift found."""
    shows: set[str] = set()
    checked = era_sources()
    for source in SOURCES.values():
        if source in checked:
            shows |= {name for name, n in run_check(source).drifted.items() if n}
        else:
            forget_drift(source=source.source)
    return len(shows)


@dataclass(frozen=True)
class ShowCount:
    drifted: int  # rows (fields, in Redis) drifted at the last check
    checked: int | None  # how many it compared, where the source counts them


@dataclass(frozen=True)
class CheckStatus:
    """A source's last check as the faces read it."""

    checked_at: datetime | None
    shows: dict[str, ShowCount]  # by show id, every show the check read
    error: str | None = None
    failed_at: datetime | None = None

    def drifted(self, show_id: str) -> int | None:
        """The show's rows drifted at the last check; None: not checked."""
        found = self.shows.get(show_id)
        return None if found is None else found.drifted


def check_status(source: DriftSource) -> CheckStatus:
    stored = cache.get(status_key(source)) or {}
    at = {name: datetime.fromtimestamp(stored[name], tz=UTC) for name in ("checked_at", "failed_at") if name in stored}
    return CheckStatus(
        checked_at=at.get("checked_at"),
        shows={pk: ShowCount(drifted=e["drifted"], checked=e["checked"]) for pk, e in stored.get("shows", {}).items()},
        error=stored.get("error"),
        failed_at=at.get("failed_at"),
    )
