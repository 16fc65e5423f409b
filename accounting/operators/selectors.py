"""Reads for the operator's pages: the farm overview, the drift check's results (and how long
each drifted row has drifted), names for Redis keys (`acct:folder:<uuid>` reads "demo01 / lighting") and their fields
(`int_cores` reads "cores booked"), and each booked number with its source and, where two
sources differ, why."""

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import F, Sum
from django.utils import timezone

from accounting.live import keys
from accounting.live.leases import held_locks
from accounting.live.units import centicores_from_cores, cores_text, format_cores
from accounting.models import DriftRecord, Instance, Proc, Subscription
from accounting.ownership.fleet import live_instances
from accounting.ownership.guardrail import GuardrailReport, evaluate
from accounting.reconcile.cuebot_drift import TableDrift, TableDriftReport
from accounting.reconcile.drift import DriftReport, DriftRow
from accounting.reconcile.drift_check import STATUS_KEY, TABLES_STATUS_KEY
from accounting.reconcile.drift_history import redis_difference, redis_identity, table_difference, table_identity
from accounting.reconcile.recalculate_subs import RECALCULATE_SUBS_LOCK, advisory_lock_holder
from accounting.release.types import Release
from cuebot_acct.redis_factory import accounting_redis
from cuebot_acct.schedulers import cuebot_owns_every_show
from shows.models import Alloc, Dept, Folder, Job, Layer, Show

# --- Redis keys by name ---------------------------------------------------------------


def key_labels(*, redis_keys: Iterable[str]) -> dict[str, str]:
    """A readable name per accounting key, in three queries at most whatever the number of keys."""
    by_kind: dict[str, list[list[str]]] = {}
    for key in redis_keys:
        _, kind, *ids = key.split(":")
        by_kind.setdefault(kind, []).append(ids)
    # acct:sub:<show>:<alloc> names its show first, acct:point:<dept>:<show> last.
    show_ids = {ids[0] for ids in by_kind.get("sub", [])} | {ids[1] for ids in by_kind.get("point", [])}
    shows = dict(Show.objects.filter(pk__in=show_ids).values_list("pk", "str_name"))
    allocs = dict(Alloc.objects.filter(pk__in={ids[1] for ids in by_kind.get("sub", [])}).values_list("pk", "str_name"))
    depts = dict(Dept.objects.filter(pk__in={ids[0] for ids in by_kind.get("point", [])}).values_list("pk", "str_name"))
    folders = {
        pk: f"{show} / {name}"
        for pk, show, name in Folder.objects.filter(pk__in={ids[0] for ids in by_kind.get("folder", [])}).values_list(
            "pk", "show__str_name", "str_name"
        )
    }
    jobs = {
        pk: f"{show} / {name}"
        for pk, show, name in Job.objects.filter(pk__in={ids[0] for ids in by_kind.get("job", [])}).values_list(
            "pk", "show__str_name", "str_name"
        )
    }
    layers = {
        pk: f"{show} / {job} / {name}"
        for pk, show, job, name in Layer.objects.filter(
            pk__in={ids[0] for ids in by_kind.get("layer", [])}
        ).values_list("pk", "job__show__str_name", "job__str_name", "str_name")
    }
    labels = {}
    for kind, entries in by_kind.items():
        for ids in entries:
            key = ":".join(["acct", kind, *ids])
            if kind == "sub":
                labels[key] = f"{shows.get(ids[0], 'show gone')} / {allocs.get(ids[1], 'allocation gone')}"
            elif kind == "point":
                labels[key] = f"{shows.get(ids[1], 'show gone')} / {depts.get(ids[0], 'department gone')}"
            else:
                found = {"folder": folders, "job": jobs, "layer": layers}.get(kind, {}).get(ids[0])
                labels[key] = f"{kind} {found}" if found else f"{kind} gone ({ids[0][:8]}…)"
    return labels


# What each field of each kind of key holds (docs/redis-protocol.md), in an operator's words.
# Every face that lists Redis fields (the drift page, acct_drift, the drift API) names them
# through field_label and keeps the raw field beside the name, for scripts and for HGET.
_BOOKED = {"int_cores": "cores booked", "int_gpus": "GPUs booked"}
FIELD_LABELS = {
    "sub": {**_BOOKED, "size": "size in cores", "burst": "burst in cores"},
    "folder": {
        **_BOOKED,
        "int_min_cores": "min cores",
        "int_max_cores": "max cores",
        "int_min_gpus": "min GPUs",
        "int_max_gpus": "max GPUs",
    },
    "job": {**_BOOKED, "int_max_cores": "max cores", "int_max_gpus": "max GPUs", "int_priority": "priority"},
    "layer": _BOOKED,
    "point": {**_BOOKED, "int_min_cores": "min cores", "int_min_gpus": "min GPUs"},
}


def field_label(*, key: str, field: str) -> str:
    """An operator's name for `field` of the accounting key `key`; a field its kind of key
    does not hold (a stray one someone wrote by hand) reads as itself."""
    kind = key.split(":")[1] if key.count(":") >= 2 else ""
    return FIELD_LABELS.get(kind, {}).get(field, field)


# --- Names beside ids in answers ------------------------------------------------------------

# A release answer names what it released. Names change rarely and a release client releases
# the procs of a few jobs over and over: each id's name is kept for a minute, so the release
# path pays a query only for ids it has not seen lately.
NAME_SECONDS = 60.0
_names: dict[tuple[str, str], tuple[float, str]] = {}
_NAMED = {"show": Show, "alloc": Alloc, "folder": Folder, "job": Job, "layer": Layer, "dept": Dept}


def names_of(*, wanted: Iterable[tuple[str, str | None]]) -> dict[tuple[str, str], str]:
    """(kind, id) -> name for kinds show, alloc, folder, job, layer, dept; "gone" where no row."""
    now = time.monotonic()
    found: dict[tuple[str, str], str] = {}
    missing: dict[str, set[str]] = {}
    for kind, id in wanted:
        if id is None:
            continue
        hit = _names.get((kind, id))
        if hit and hit[0] > now:
            found[(kind, id)] = hit[1]
        else:
            missing.setdefault(kind, set()).add(id)
    if not missing:
        return found
    rows = _names_by_kind(missing=missing)
    for kind, ids in missing.items():
        for id in ids:
            found[(kind, id)] = name = rows.get((kind, id), "gone")
            _names[(kind, id)] = (now + NAME_SECONDS, name)
    return found


def _names_by_kind(*, missing: dict[str, set[str]]) -> dict[tuple[str, str], str]:
    """(kind, id) -> name for ids not in the memo, in one round trip whatever the kinds: a
    release of a job not seen lately misses its job and layer, often its folder too, and a
    query per kind made that first answer pay up to six (issue 35)."""
    parts: list[str] = []
    params: list[str | list[str]] = []
    for kind, ids in missing.items():
        meta = _NAMED[kind]._meta
        table, pk = connection.ops.quote_name(meta.db_table), connection.ops.quote_name(meta.pk.column)
        parts.append(f"SELECT %s::text, {pk}, str_name FROM {table} WHERE {pk} = ANY(%s)")
        params += [kind, list(ids)]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        return {(kind, id): name for kind, id, name in cursor.fetchall()}


# The ids a release answer names, as Release holds them side by side (show_id to dept_id), in
# _NAMED's order: sliced out of each release at once. Refused at import if Release's fields move.
_NAME_IDS = slice(Release._fields.index("show_id"), Release._fields.index("dept_id") + 1)
if Release._fields[_NAME_IDS] != tuple(f"{kind}_id" for kind in _NAMED):
    raise TypeError(f"accounting.operators.selectors: Release's fields {Release._fields} no longer hold _NAMED's ids")


def release_names(*, releases: Iterable[Release]) -> dict[str, dict[str, str | None]]:
    """proc id -> {show, alloc, folder, job, layer, dept: name} for these releases.

    Named once per distinct set of ids, and that dict shared by its releases: the procs of a
    batch come from a few layers (a batch of 100 named proc by proc spent a quarter of its
    request's CPU here, issue 35)."""
    releases = list(releases)
    # tuples: mypy types a named tuple's slice by a non-literal slice as one of its fields
    ids_of = [cast(tuple, r[_NAME_IDS]) for r in releases]
    distinct = dict.fromkeys(ids_of)
    known = names_of(wanted=[(kind, id) for ids in distinct for kind, id in zip(_NAMED, ids, strict=True)])
    named = {ids: {kind: known.get((kind, id)) for kind, id in zip(_NAMED, ids, strict=True)} for ids in distinct}
    return {r.proc_id: named[ids] for r, ids in zip(releases, ids_of, strict=True)}


def labelled_drift(*, report: dict) -> dict:
    """A drift report's dict with each row's key named (show / allocation, folder, job, ...) and
    its field labelled (`"field": "int_cores", "label": "cores booked"`), in every list of rows."""
    lists = ("rows", "rounding_only", "explained")
    labels = key_labels(redis_keys={row["key"] for name in lists for row in report[name]})
    return {
        **report,
        **{
            name: [
                {**row, "names": labels.get(row["key"]), "label": field_label(key=row["key"], field=row["field"])}
                for row in report[name]
            ]
            for name in lists
        },
    }


# --- The drift check's last results (accounting.reconcile.drift_check) -----------------------------


@dataclass(frozen=True)
class ShowDrift:
    fields: int
    checked: int


@dataclass(frozen=True)
class DriftStatus:
    checked_at: datetime | None
    shows: dict[str, ShowDrift]  # by show id
    error: str | None = None
    failed_at: datetime | None = None


def _time(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def drift_status() -> DriftStatus:
    stored = cache.get(STATUS_KEY) or {}
    return DriftStatus(
        checked_at=_time(stored.get("checked_at")),
        shows={pk: ShowDrift(fields=e["fields"], checked=e["checked"]) for pk, e in stored.get("shows", {}).items()},
        error=stored.get("error"),
        failed_at=_time(stored.get("failed_at")),
    )


@dataclass(frozen=True)
class TableDriftStatus:
    checked_at: datetime | None
    shows: dict[str, int]  # show id -> rows of Cuebot's tables drifted, every show Cuebot owns


def table_drift_status() -> TableDriftStatus:
    """The last check of Cuebot's own tables (accounting.reconcile.drift_check.run_table_drift_check)."""
    stored = cache.get(TABLES_STATUS_KEY) or {}
    return TableDriftStatus(
        checked_at=_time(stored.get("checked_at")), shows={pk: e["rows"] for pk, e in stored.get("shows", {}).items()}
    )


# --- How long each drifted row has drifted (accounting.reconcile.drift_history) -------------------


@dataclass(frozen=True)
class DriftAge:
    """A drifted row's time drifted: from the first check that saw it drifted to `seen`, the last
    time it was seen so (now, on a face that has just read the row drifted; the last check that
    saw it, on one that lists the check's records)."""

    first_seen: datetime
    seen: datetime

    @property
    def seconds(self) -> int:
        return max(0, int((self.seen - self.first_seen).total_seconds()))

    @property
    def since(self) -> str:
        """The first sighting as a clock reads it in UTC, with its date when not `seen`'s day."""
        first = self.first_seen.astimezone(UTC)
        same_day = first.date() == self.seen.astimezone(UTC).date()
        return f"{first:%H:%M} UTC" if same_day else f"{first:%Y-%m-%d %H:%M} UTC"

    @property
    def age(self) -> str:
        return age_text(self.seconds)

    def sentence(self, *, difference: str) -> str:
        return f"{difference} since {self.since} ({self.age})"


NOT_SEEN_YET = "not seen drifted by the periodic check yet"


def age_text(seconds: int) -> str:
    """A duration as an operator reads it: '45 s', '12 min', '2 h 5 min', '3 d 4 h'."""
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 60:
        return f"{seconds} s"
    if hours == 0:
        return f"{minutes} min"
    if days == 0:
        return f"{hours} h {minutes % 60} min"
    return f"{days} d {hours % 24} h"


def drift_sentence(*, difference: str, age: DriftAge | None) -> str:
    """'4.00 cores high since 03:12 UTC (2 h 5 min)', the words every face says of a drifted row."""
    return age.sentence(difference=difference) if age else f"{difference}, {NOT_SEEN_YET}"


def drift_age_fields(*, difference: str, age: DriftAge | None) -> dict:
    """What the API and acct_drift --json add to a drifted row (nulls: no check has seen it yet)."""
    return {
        "first_seen": age.first_seen.isoformat() if age else None,
        "age_seconds": age.seconds if age else None,
        "since": drift_sentence(difference=difference, age=age),
    }


def _ages(*, source: str, identities: list[str], now: datetime) -> list[DriftAge | None]:
    """Per identity, in order, its time drifted up to `now` if the periodic check has recorded it."""
    first = (
        dict(DriftRecord.objects.filter(source=source, identity__in=identities).values_list("identity", "first_seen"))
        if identities
        else {}
    )
    return [DriftAge(first_seen=first[i], seen=now) if i in first else None for i in identities]


def table_row_ages(*, rows: Sequence[TableDrift], now: datetime) -> list[DriftAge | None]:
    """For rows of Cuebot's tables read drifted at `now`: how long each has drifted (None: no check saw it yet)."""
    return _ages(source=DriftRecord.Source.CUEBOT_TABLES, identities=[table_identity(r) for r in rows], now=now)


def redis_row_ages(*, rows: Sequence[DriftRow], now: datetime) -> list[DriftAge | None]:
    """The same for Redis fields read drifted at `now`."""
    identities = [redis_identity(key=r.key, field=r.field) for r in rows]
    return _ages(source=DriftRecord.Source.REDIS, identities=identities, now=now)


def aged_table_drift(*, report: TableDriftReport, now: datetime) -> dict:
    """A live report of Cuebot's tables as the API and acct_drift --json give it: each row with its
    first sighting, its age and the sentence every face says."""
    ages = table_row_ages(rows=report.rows, now=now)
    return {
        **report.as_dict(),
        "rows": [
            {**row.as_dict(), **drift_age_fields(difference=table_difference(row), age=age)}
            for row, age in zip(report.rows, ages, strict=True)
        ],
    }


def aged_redis_drift(*, report: DriftReport, now: datetime) -> dict:
    """labelled_drift of a live Redis report, each drifted row with its first sighting and age."""
    labelled = labelled_drift(report=report.as_dict())
    ages = redis_row_ages(rows=report.rows, now=now)
    labelled["rows"] = [
        {**entry, **drift_age_fields(difference=redis_difference(row)[2], age=age)}
        for entry, row, age in zip(labelled["rows"], report.rows, ages, strict=True)
    ]
    return labelled


@dataclass(frozen=True)
class RecordedDrift:
    """A row the last check found drifted, named for people (Redis keys and fields labelled)."""

    source: str
    show: str
    show_id: str
    subject: str
    detail: str
    difference: str
    age: DriftAge

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "show": self.show,
            "show_id": self.show_id,
            "name": self.subject,
            "what": self.detail,
            "difference": self.difference,
            **drift_age_fields(difference=self.difference, age=self.age),
            "checked_at": self.age.seen.isoformat(),
        }


def recorded_drift() -> list[RecordedDrift]:
    """Every row the last checks found drifted, oldest first, its age as of the last check of its
    source (which saw it drifted; now if the cache has lost when that was)."""
    now = timezone.now()
    checked = {
        DriftRecord.Source.CUEBOT_TABLES: table_drift_status().checked_at or now,
        DriftRecord.Source.REDIS: drift_status().checked_at or now,
    }
    records = list(DriftRecord.objects.order_by("first_seen", "show_name", "subject", "detail"))
    redis = [r for r in records if r.source == DriftRecord.Source.REDIS]
    labels = key_labels(redis_keys={r.subject for r in redis})
    found = []
    for record in records:
        is_redis = record.source == DriftRecord.Source.REDIS
        found.append(
            RecordedDrift(
                source=record.source,
                show=record.show_name,
                show_id=record.show_id,
                subject=labels.get(record.subject, record.subject) if is_redis else record.subject,
                detail=f"{field_label(key=record.subject, field=record.detail)} ({record.detail})"
                if is_redis
                else record.detail,
                difference=record.difference,
                age=DriftAge(first_seen=record.first_seen, seen=checked[DriftRecord.Source(record.source)]),
            )
        )
    return found


@dataclass(frozen=True)
class NamedLock:
    name: str
    owner: str
    ttl_ms: int | None  # None: no expiry, it ends with its holder's transaction


def named_locks() -> list[NamedLock]:
    """Every named lock held now: the Redis leases (where there is an accounting Redis) and
    recalculate_subs's PostgreSQL lock (where there is none)."""
    leases = held_locks() if settings.ACCOUNTING_REDIS_ENABLED else []
    found = [NamedLock(name=lease.name, owner=lease.owner, ttl_ms=lease.ttl_ms) for lease in leases]
    if (pid := advisory_lock_holder()) is not None:
        found.append(NamedLock(name=RECALCULATE_SUBS_LOCK, owner=f"PostgreSQL backend {pid}", ttl_ms=None))
    return sorted(found, key=lambda lock: lock.name)


def table_repair(*, show: str | None) -> str:
    """What repairs drift of Cuebot's tables in this era, as a command to type; every face says the
    same, and on an observer that it needs writes on first."""
    if show:
        command = f"manage.py acct_reseed --show {show}"
    else:
        # Outside the Maestro era acct_reseed alone rebuilds the scheduler-managed shows' Redis.
        command = "manage.py acct_reseed" if cuebot_owns_every_show() else "manage.py acct_reseed --cuebot-tables"
    return command if settings.ACCOUNTING_WRITES else f"{command} (where ACCOUNTING_WRITES is on)"


# --- Booked cores: where each number comes from ------------------------------------------
#
# A subscription's booked cores can be read in three places, which legitimately differ:
# Redis (what the scheduler books against, for a scheduler-managed show: whole cores, each
# proc truncated), the PostgreSQL row (Cuebot's own count for a Cuebot-managed show; for a
# scheduler-managed one only as fresh as the last recompute) and SUM(proc) (the truth, now).
# Every page labels its numbers with these names, and where it shows two that differ it
# says which of rounding, recompute lag and drift makes the difference.

REDIS_LIVE = "Redis live"
PG_ROW = "PostgreSQL row"
PROC_NOW = "SUM(proc) now"

ROUNDING = "rounding"
RECOMPUTE_LAG = "recompute lag"
DRIFT = "drift"


@dataclass(frozen=True)
class BookedReason:
    kind: str  # ROUNDING, RECOMPUTE_LAG or DRIFT
    text: str
    short: str  # the same numbers in a few words, for a list's cell (the text goes in its tooltip)


@dataclass(frozen=True)
class BookedSources:
    """One subscription's booked cores from each source, in centicores. `redis` is None where
    Redis holds nothing for it (a Cuebot-managed show), has no value, or could not be read;
    `proc_exact`/`proc_per_proc` (SUM(proc) now, and summed after truncating each proc as
    Redis counts) are read only where Redis and the row differ, to say why."""

    managed: bool
    pg_row: int
    redis: int | None
    proc_exact: int | None = None
    proc_per_proc: int | None = None

    @property
    def pg_row_source(self) -> str:
        return f"{PG_ROW}, as of the last recompute" if self.managed else f"{PG_ROW} (Cuebot's count)"

    @property
    def differ(self) -> bool:
        return self.managed and self.redis is not None and self.redis != self.pg_row

    @property
    def reasons(self) -> list[BookedReason]:
        """Why Redis and the row differ, each part in cores; [] where they agree."""
        if not self.differ or self.proc_exact is None or self.proc_per_proc is None:
            return []
        reasons = []
        if self.proc_exact != self.proc_per_proc:
            reasons.append(
                BookedReason(
                    ROUNDING,
                    (
                        f"Redis truncates each proc's cores to whole cores: the procs reserve {format_cores(self.proc_exact)}, "
                        f"which Redis counts as {format_cores(self.proc_per_proc)}"
                    ),
                    f"{format_cores(self.proc_exact)} reserved, Redis counts {cores_text(self.proc_per_proc)}",
                )
            )
        if self.pg_row != self.proc_exact:
            reasons.append(
                BookedReason(
                    RECOMPUTE_LAG,
                    (
                        f"the PostgreSQL row ({format_cores(self.pg_row)}) is as of the last recompute; "
                        f"{PROC_NOW} is {format_cores(self.proc_exact)}"
                    ),
                    f"row {format_cores(self.pg_row)}, {PROC_NOW} {cores_text(self.proc_exact)}",
                )
            )
        if self.redis != self.proc_per_proc:
            assert self.redis is not None  # differ (checked above) holds only where Redis has a value
            off = self.redis - self.proc_per_proc
            reasons.append(
                BookedReason(
                    DRIFT,
                    (
                        f"Redis is {format_cores(abs(off))} {'above' if off > 0 else 'below'} {PROC_NOW} counted per proc: "
                        f"an operation in flight, or drift (the drift page tells which)"
                    ),
                    f"Redis {format_cores(abs(off))} {'above' if off > 0 else 'below'} {PROC_NOW}",
                )
            )
        return reasons


def _proc_sums(subscriptions: Sequence[Subscription]) -> dict[tuple[str, str], tuple[int, int]]:
    """(show, alloc) -> (SUM(proc) in centicores, the same summed per proc in whole cores x 100),
    counting as the subscription does: non-local procs, by their host's allocation."""
    if not subscriptions:
        return {}
    rows = (
        Proc.objects.filter(show_id__in={s.show_id for s in subscriptions}, b_local=False)
        .values("show_id", "host__alloc_id")
        .annotate(exact=Sum("int_cores_reserved"), per_proc=Sum(F("int_cores_reserved") / 100))
    )
    return {(r["show_id"], r["host__alloc_id"]): (int(r["exact"]), int(r["per_proc"]) * 100) for r in rows}


def booked_sources(*, subscriptions: Sequence[Subscription]) -> tuple[dict[str, BookedSources], str | None]:
    """Per subscription id, its booked cores by source; and the Redis error, if Redis could not
    be read. One Redis pipeline for the scheduler-managed ones; one PostgreSQL aggregate for
    those whose Redis value and row differ (to say why), none when none differs."""
    managed = [s for s in subscriptions if s.show.b_scheduler_managed]
    from_redis, error = _redis_booked(managed)
    sources = {}
    for sub in subscriptions:
        cores = from_redis.get(sub.pk)
        sources[sub.pk] = BookedSources(
            managed=sub.show.b_scheduler_managed,
            pg_row=sub.int_cores,
            redis=None if cores is None else centicores_from_cores(cores),
        )
    differing = [s for s in subscriptions if sources[s.pk].differ]
    sums = _proc_sums(differing)
    for sub in differing:
        exact, per_proc = sums.get((sub.show_id, sub.alloc_id), (0, 0))
        sources[sub.pk] = BookedSources(
            managed=True, pg_row=sub.int_cores, redis=sources[sub.pk].redis, proc_exact=exact, proc_per_proc=per_proc
        )
    return sources, error


# --- The farm overview -----------------------------------------------------------------


@dataclass(frozen=True)
class AllocationUse:
    """Booked against size and burst, all in centicores (Redis's whole cores times 100);
    `booked` is None when Redis has no value."""

    alloc: str
    booked: int | None
    size: int
    burst: int
    # Every source of this subscription's booked cores, for the second number and the why.
    sources: BookedSources | None = None

    @property
    def pg_row_cores(self) -> str | None:
        return None if self.sources is None else cores_text(self.sources.pg_row)

    @property
    def scale(self) -> int:
        return max(self.size, self.burst, self.booked or 0, 1)

    def percent(self, value: int | None) -> float:
        return round(100 * max(0, value or 0) / self.scale, 1)

    @property
    def booked_pct(self) -> float:
        return self.percent(self.booked)

    @property
    def size_pct(self) -> float:
        return self.percent(self.size)

    @property
    def burst_pct(self) -> float:
        return self.percent(self.burst)

    @property
    def booked_cores(self) -> str | None:
        return None if self.booked is None else cores_text(self.booked)

    @property
    def size_cores(self) -> str:
        return cores_text(self.size)

    @property
    def burst_cores(self) -> str:
        return cores_text(self.burst)

    @property
    def over(self) -> str:
        """'burst' or 'size' when booked is beyond it, else ''."""
        if self.booked is None:
            return ""
        return "burst" if self.booked > self.burst else "size" if self.booked > self.size else ""


@dataclass(frozen=True)
class ShowOverview:
    show: Show
    owner: str  # who plans and counts it: Cuebot, Maestro (Maestro era, flagged) or Scheduler
    source: str  # where `booked` comes from
    allocations: list[AllocationUse]
    drift: ShowDrift | None  # Redis against PostgreSQL; None: not checked (Cuebot counts it, or not yet)
    # Rows of Cuebot's tables off SUM(proc) at the last check, where Cuebot counts the show; None: not checked.
    table_drift: int | None = None

    @property
    def counted_by_cuebot(self) -> bool:
        return self.source != REDIS_LIVE

    @property
    def attention(self) -> tuple[int, int, int, int, float]:
        """How much the show wants an operator's eye, compared as a tuple (the overview lists the
        most first): rows or fields drifted at the last check, allocations missing in Redis,
        beyond their burst, beyond their size; then its fullest allocation's share of its bar."""
        uses = self.allocations
        return (
            (self.table_drift or 0) + (self.drift.fields if self.drift else 0),
            sum(a.booked is None for a in uses),
            sum(a.over == "burst" for a in uses),
            sum(a.over == "size" for a in uses),
            max((a.booked_pct for a in uses), default=0.0),
        )

    @property
    def needs_attention(self) -> bool:
        """Drifted, missing in Redis, or beyond a size or a burst."""
        return any(self.attention[:4])


@dataclass(frozen=True)
class FarmOverview:
    shows: list[ShowOverview]
    drift: DriftStatus
    guardrail: GuardrailReport
    instances: list[Instance]
    redis_error: str | None = None
    tables_checked_at: datetime | None = None  # the last check of Cuebot's own tables
    counts_in_redis: bool = True  # whether any show's counters live in Redis (not in the Maestro era)


def _redis_booked(subscriptions: list[Subscription]) -> tuple[dict[str, int | None], str | None]:
    """int_cores of each managed subscription's key, one pipeline; ({}, error) if Redis fails."""
    if not subscriptions:
        return {}, None
    try:
        pipe = accounting_redis().pipeline(transaction=False)
        for sub in subscriptions:
            pipe.hget(keys.sub(show_id=sub.show_id, alloc_id=sub.alloc_id), "int_cores")
        values = pipe.execute()
    except (redis.RedisError, OSError) as error:
        return {}, f"{type(error).__name__}: {error}"
    return {sub.pk: None if v is None else int(v) for sub, v in zip(subscriptions, values, strict=True)}, None


def farm_overview() -> FarmOverview:
    """Per show: owner, booked against size and burst per allocation (Redis live for
    scheduler-managed shows, the PostgreSQL row for Cuebot's; both, and why they differ, for
    the former), drift; the guardrail and the fleet. The shows that need attention come first,
    then the fullest (ShowOverview.attention), by name within a tie."""
    subscriptions = list(
        Subscription.objects.select_related("show", "alloc").order_by("show__str_name", "alloc__str_name")
    )
    # In the Maestro era Cuebot counts every show in its tables and no Redis holds any of them.
    maestro = cuebot_owns_every_show()
    sources, redis_error = booked_sources(subscriptions=[] if maestro else subscriptions)
    sources |= {
        sub.pk: BookedSources(managed=False, pg_row=sub.int_cores, redis=None)
        for sub in subscriptions
        if sub.pk not in sources
    }
    status, tables = drift_status(), table_drift_status()
    per_show: dict[str, list[AllocationUse]] = {}
    for sub in subscriptions:
        source = sources[sub.pk]
        booked = source.redis if sub.show.b_scheduler_managed and not maestro else source.pg_row
        # A burst of -1 is no "unlimited" (Cuebot compares it as a number): nothing books beyond 0.
        per_show.setdefault(sub.show_id, []).append(
            AllocationUse(
                alloc=sub.alloc.str_name, booked=booked, size=sub.int_size, burst=max(sub.int_burst, 0), sources=source
            )
        )
    shows = []
    for show in Show.objects.order_by("str_name"):
        by_scheduler = show.b_scheduler_managed and not maestro
        shows.append(
            ShowOverview(
                show=show,
                owner="Scheduler" if by_scheduler else "Maestro" if show.b_scheduler_managed else "Cuebot",
                source=REDIS_LIVE if by_scheduler else f"{PG_ROW} (Cuebot's count)",
                allocations=per_show.get(show.pk, []),
                drift=status.shows.get(show.pk) if by_scheduler else None,
                table_drift=None if by_scheduler else tables.shows.get(show.pk),
            )
        )
    shows.sort(key=lambda entry: entry.attention, reverse=True)  # stable: by name within a tie
    return FarmOverview(
        shows=shows,
        drift=status,
        guardrail=evaluate(),
        instances=live_instances(),
        redis_error=redis_error,
        tables_checked_at=tables.checked_at,
        counts_in_redis=not maestro,
    )
