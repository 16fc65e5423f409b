"""Redis against PostgreSQL: every field of the scheduler-managed shows' keys, compared.

Booked counters are compared with what a reseed would write at this moment: SUM(proc)
converted per proc (accounting.reconcile.snapshot.BOOKED) plus the live in-flight amounts, so an
operation caught between its two halves is not reported. A missing booked field reads as
0 (the booking script does the same); a missing limit field is drift whatever its PG value,
since the booking script rejects on a missing burst. Both sides are streamed in chunks.

Rounding is not drift. This project converts each proc to whole cores before summing (a
release must take off exactly what the booking added), so two 2.5-core procs count 4; the
scheduler's own recompute sums centicores and converts once, and writes 5. A booked
int_cores that differs from the per-proc value but equals the summed-first one is reported
apart, as rounding only, so a site running the scheduler's recompute is not told that every
fractional key drifted.

Neither are two other states, each named as such and never counted as drift:
- closed keys: a Redis not seeded since it came up (restart), being rebuilt, or owed a rebuild
  after a failover has its keys closed to booking (no limit fields) until the rebuild writes
  them; whatever they read then is not what the scheduler books against;
- operations in flight: a booked value anywhere between SUM(proc) and SUM(proc) plus the live
  in-flight amounts is right (a booking before its proc commits, a release before its
  decrement lands, an aborted release whose entry has not expired yet); only a value outside
  that range is drift.
"""

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import cast

import redis

from accounting.live import keys
from accounting.live.scripts import script
from accounting.live.units import UNLIMITED
from accounting.models import DriftRecord
from accounting.reconcile.drift_history import Drifted, cores_words, direction, gpus_words
from accounting.reconcile.snapshot import booked_rows, chunked, limit_rows, managed_show_ids
from infra import metrics
from infra.redis_factory import accounting_redis
from shows.models import Show

CHUNK = 2000


ROUNDING = "rounding"
IN_FLIGHT = "in flight"
CLOSED = "closed"
# Causes that explain a difference away: such a row is reported apart, never as drift.
NOT_DRIFT = (ROUNDING, IN_FLIGHT, CLOSED)

# The state of the accounting Redis as a whole, by its markers (accounting.reconcile.reseed).
SEEDED = "seeded"
NOT_SEEDED = "not seeded since it came up (keys closed until the rebuild)"
REBUILDING = "rebuild in progress (keys closed until it ends)"
REBUILD_OWED = "rebuild owed after a failover (keys closed until it ends)"

BOOKED_FIELDS = ("int_cores", "int_gpus")
LAYER_KEY_PREFIX = keys.layer(layer_id="")
# A limit change whose Redis write was refused (the key was closed on a Redis not rebuilt yet).
LIMIT_WRITE_REFUSED = (
    "limit write refused (its key closed: Redis not rebuilt since it came up, or its show not seeded since its switch)"
)


@dataclass(frozen=True)
class DriftRow:
    key: str
    field: str
    redis: int | None
    pg: int
    difference: int
    # ROUNDING, IN_FLIGHT, CLOSED: explained, not drift; LIMIT_WRITE_REFUSED: drift whose
    # cause is known; None: drift.
    cause: str | None = None


@dataclass(frozen=True)
class DriftReport:
    shows: list[str]
    fields_checked: int
    rows: list[DriftRow]
    # Differences explained away (rounding, in flight, closed keys): reported apart, not drift.
    explained: list[DriftRow] = field(default_factory=list)
    redis_state: str = SEEDED

    @property
    def drifted(self) -> bool:
        return bool(self.rows)

    @property
    def rounding_only(self) -> list[DriftRow]:
        return self.explained_by(ROUNDING)

    def explained_by(self, cause: str) -> list[DriftRow]:
        return [row for row in self.explained if row.cause == cause]

    def as_dict(self) -> dict:
        return {
            "shows": self.shows,
            "redis_state": self.redis_state,
            "fields_checked": self.fields_checked,
            "fields_drifted": len(self.rows),
            "rows": [asdict(row) for row in self.rows],
            "fields_rounding_only": len(self.rounding_only),
            "rounding_only": [asdict(row) for row in self.rounding_only],
            "fields_explained": {cause: len(self.explained_by(cause)) for cause in NOT_DRIFT},
            "explained": [asdict(row) for row in self.explained],
        }


def live_inflight_amounts() -> dict[str, tuple[int, int]]:
    """Per key, the (cores, gpus) of unexpired in-flight operations (the reseed adds these), summed
    by inflight_read.lua, which reads the entries and Redis's clock as every script does."""
    reply = cast(list, script("inflight_read").run(accounting_redis(), keys=[keys.INFLIGHT], args=[]))
    # the accounting client does not decode: the keys are bytes
    return {reply[i].decode(): (int(reply[i + 1]), int(reply[i + 2])) for i in range(0, len(reply), 3)}


def _as_int(raw: bytes | str | None) -> int | None:
    return None if raw is None else int(raw)


def _compare(*, mode: str, triples: list[tuple[str, str, int]]) -> list[DriftRow]:
    """Differing (key, field) among the triples, compared inside Redis (drift_read.lua)."""
    # drift_read.lua returns its flat table on every path: a list reply.
    reply = cast(
        list, script("drift_read").run(accounting_redis(), keys=[], args=[mode, *(p for t in triples for p in t)])
    )
    rows = []
    for i in range(0, len(reply), 2):
        key, field, pg = triples[int(reply[i]) - 1]
        redis_value = _as_int(reply[i + 1])
        rows.append(DriftRow(key=key, field=field, redis=redis_value, pg=pg, difference=(redis_value or 0) - pg))
    return rows


def _booked_drift(
    *, show_ids: Sequence[str], inflight: dict[str, tuple[int, int]]
) -> Iterator[tuple[int, list[DriftRow]]]:
    for chunk in chunked(booked_rows(show_ids=show_ids), CHUNK):
        triples, summed_first = [], {}
        for key, cores, gpus, cores_summed_first in chunk:
            add_cores, add_gpus = inflight.get(key, (0, 0))
            triples += [(key, "int_cores", cores + add_cores), (key, "int_gpus", gpus + add_gpus)]
            summed_first[key] = cores_summed_first + add_cores
        yield (
            len(triples),
            [
                _booked_cause(row, inflight=inflight, summed_first=summed_first)
                for row in _compare(mode="booked", triples=triples)
            ],
        )


def _booked_cause(row: DriftRow, *, inflight: dict[str, tuple[int, int]], summed_first: dict[str, int]) -> DriftRow:
    if row.field == "int_cores" and row.redis == summed_first[row.key]:
        return replace(row, cause=ROUNDING)
    in_flight = inflight.get(row.key, (0, 0))[0 if row.field == "int_cores" else 1]
    if in_flight and row.pg - in_flight <= (row.redis or 0) <= row.pg:
        return replace(row, cause=IN_FLIGHT)
    return row


def _limit_drift(*, show_ids: Sequence[str], fields_per_key: Counter) -> Iterator[tuple[int, list[DriftRow]]]:
    # the accounting client does not decode responses: the fields are bytes
    refused = {cast(bytes, key).decode() for key in accounting_redis().hkeys(keys.LIMITS_REFUSED)}
    numeric = ((key, name, value) for key, name, value in limit_rows(show_ids=show_ids) if name != "show_id")
    for chunk in chunked(numeric, 2 * CHUNK):
        fields_per_key.update(key for key, _, _ in chunk)
        yield (
            len(chunk),
            [
                replace(row, cause=LIMIT_WRITE_REFUSED) if row.key in refused else row
                for row in _compare(mode="limits", triples=chunk)
            ],
        )


def _closed_explained(rows: list[DriftRow], *, fields_per_key: Counter) -> list[DriftRow]:
    """On a Redis whose markers say it is not rebuilt, a key without any of its limit fields
    is closed (the booking script refuses it); a layer key (it has no limit fields) is closed
    when every key with limits is. A key that carries limit fields was opened by some rebuild
    (the scheduler's own bootstrap sets no marker) and is compared as usual; a row whose
    cause is known already keeps it."""
    missing = Counter(row.key for row in rows if row.redis is None and row.field not in BOOKED_FIELDS)
    closed = {key for key, count in fields_per_key.items() if missing[key] == count}
    all_closed = closed == set(fields_per_key)
    return [
        replace(row, cause=CLOSED)
        if row.cause is None and (row.key in closed or (all_closed and row.key.startswith(LAYER_KEY_PREFIX)))
        else row
        for row in rows
    ]


def redis_state() -> str:
    """Whether the keys are open (seeded), or closed and why, read from Redis's markers."""
    client = accounting_redis()
    seeded, rebuilding, owed = (
        bool(n)
        for n in (client.exists(keys.SEEDED), client.exists(keys.BOOTSTRAPPING), client.exists(keys.REBUILD_OWED))
    )
    if owed:
        return REBUILD_OWED
    if rebuilding:
        return REBUILDING
    return SEEDED if seeded else NOT_SEEDED


def drift_report(*, show_ids: Sequence[str] | None = None) -> DriftReport:
    """Every differing (key, field) of these shows (default: all scheduler-managed shows)."""
    shows = list(show_ids) if show_ids is not None else managed_show_ids()
    state = redis_state()
    inflight = live_inflight_amounts()
    checked = 0
    found: list[DriftRow] = []
    fields_per_key: Counter[str] = Counter()
    for part in (
        _booked_drift(show_ids=shows, inflight=inflight),
        _limit_drift(show_ids=shows, fields_per_key=fields_per_key),
    ):
        for count, rows in part:
            checked += count
            found += rows
    if state != SEEDED:
        found = _closed_explained(found, fields_per_key=fields_per_key)
    return DriftReport(
        shows=shows,
        fields_checked=checked,
        rows=[r for r in found if r.cause not in NOT_DRIFT],
        explained=[r for r in found if r.cause in NOT_DRIFT],
        redis_state=state,
    )


# The Redis era's drift source (accounting.reconcile.drift_check).

# The fields that hold cores (whole cores: Redis's unit) and those that hold GPUs; any other (a
# job's priority) is a plain number.
REDIS_CORE_FIELDS = frozenset({"int_cores", "size", "burst", "int_min_cores", "int_max_cores"})
REDIS_GPU_FIELDS = frozenset({"int_gpus", "int_min_gpus", "int_max_gpus"})


def _limit(value: int) -> str:
    return "unlimited" if value == UNLIMITED else str(value)


def drifted_field(row: DriftRow, *, show_id: str) -> Drifted:
    """A field that differs, as every face and the record take it: its difference in centicores if
    it holds cores, in GPUs if it holds GPUs, and in words."""
    cores, gpus = None, None
    if row.redis is None:
        words = f"missing from Redis (PostgreSQL {row.pg})"
    elif UNLIMITED in (row.redis, row.pg) and row.field not in BOOKED_FIELDS:
        words = f"Redis {_limit(row.redis)}, PostgreSQL {_limit(row.pg)}"  # no difference in cores
    elif row.field in REDIS_CORE_FIELDS:
        cores, words = row.difference * 100, cores_words(row.difference * 100)
    elif row.field in REDIS_GPU_FIELDS:
        gpus, words = row.difference, gpus_words(row.difference)
    else:
        words = f"{abs(row.difference)} {direction(row.difference)}"
    return Drifted(
        source=DriftRecord.Source.REDIS,
        identity=f"{row.key} {row.field}",
        show_id=show_id,
        subject=row.key,
        detail=row.field,
        cores_difference=cores,
        gpus_difference=gpus,
        difference=words,
        raw=row,
    )


class RedisFields:
    """The Redis era's drift source: every field of the scheduler-managed shows' keys against
    PostgreSQL, a show at a time (its fields compared counted)."""

    source: str = DriftRecord.Source.REDIS
    differs = "Redis differs from PostgreSQL"
    unit = "fields"
    gauge = metrics.DRIFT_FIELDS
    last_check = metrics.DRIFT_LAST_CHECK
    unreadable: tuple[type[Exception], ...] = (redis.RedisError, OSError)

    def shows(self) -> dict[str, str]:
        managed = Show.objects.filter(b_scheduler_managed=True).order_by("str_name")
        return dict(managed.values_list("pk", "str_name"))

    def read(self, *, show_ids: list[str]) -> tuple[list[Drifted], dict[str, int]]:
        rows, checked = [], {}
        for show_id in show_ids:
            report = drift_report(show_ids=[show_id])
            rows += [drifted_field(row, show_id=show_id) for row in report.rows]
            checked[show_id] = report.fields_checked
        return rows, checked


REDIS_FIELDS = RedisFields()
