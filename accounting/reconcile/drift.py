"""Drift inspector: Redis against PostgreSQL for every key of the scheduler-managed shows.

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

from accounting.live import keys
from accounting.live.scripts import script
from accounting.live.units import cores_from_centicores
from accounting.models import Subscription
from accounting.reconcile.snapshot import (
    booked_rows,
    chunked,
    limit_rows,
    managed_show_ids,
)
from cuebot_acct.redis_factory import accounting_redis
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
    """Per key, the (cores, gpus) of unexpired in-flight operations (the reseed adds these)."""
    client = accounting_redis()
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    amounts: dict[str, tuple[int, int]] = {}
    for value in client.hvals(keys.INFLIGHT):
        parts = cast(bytes, value).decode().split("|")  # the accounting client does not decode: bytes
        if int(parts[0]) <= now_ms:
            continue
        for i in range(1, len(parts) - 2, 3):
            cores, gpus = amounts.get(parts[i], (0, 0))
            amounts[parts[i]] = (cores + int(parts[i + 1]), gpus + int(parts[i + 2]))
    return amounts


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


@dataclass(frozen=True)
class SubscriptionBar:
    alloc: str
    booked_redis: int | None
    booked_pg: int
    size: int
    burst: int


def subscription_bars(*, show: Show) -> list[SubscriptionBar]:
    """Per subscription of the show: booked (Redis and PG, cores) against size and burst."""
    booked = {key: cores for key, cores, _, _ in booked_rows(show_ids=[show.id]) if key.startswith("acct:sub:")}
    inflight = live_inflight_amounts()
    client = accounting_redis()
    bars = []
    for sub in Subscription.objects.filter(show=show).select_related("alloc").order_by("alloc__str_name"):
        key = keys.sub(show_id=show.id, alloc_id=sub.alloc_id)
        bars.append(
            SubscriptionBar(
                alloc=sub.alloc.str_name,
                booked_redis=_as_int(client.hget(key, "int_cores")),
                booked_pg=booked.get(key, 0) + inflight.get(key, (0, 0))[0],
                size=cores_from_centicores(sub.int_size),
                burst=cores_from_centicores(sub.int_burst),
            )
        )
    return bars
