"""The hot-path booking contract, as the Rust scheduler runs it: used by the simulator and
the tests to exercise the live view exactly the way production does.

A booking is two halves that land at different moments: `book` (the Lua, at once) and the
proc INSERT (a PG transaction, a little later). Pass an `op_id` and the booking is entered
in the in-flight registry (`acct:inflight`) until `settle` is called after the INSERT has
committed, so a reseed running in between counts it (docs/redis-protocol.md). If the
INSERT fails, `rollback` undoes the Redis half, but only while the entry is still live:
undoing a booking that a reseed may already have erased would push the counters low.
"""

from dataclasses import dataclass
from typing import cast

from django.conf import settings

from accounting.live import keys
from accounting.live.scripts import script
from accounting.live.units import cores_from_centicores
from infra.redis_factory import accounting_redis


@dataclass(frozen=True)
class BookingResult:
    ok: bool
    seq: int | None = None
    # On rejection: "subscription", "folder", "job", "failover" (a promoted replica not rebuilt
    # yet), or "acct:inflight" for a skipped rollback.
    table: str | None = None
    current: int | None = None
    limit: int | None = None
    # Which of the table's caps refused: "cores" or "gpus" (None for "failover" and "acct:inflight").
    unit: str | None = None


def _delta_cores(centicores: int) -> int:
    # Deltas may be negative (rollback); the conversion itself is defined on amounts.
    converted = cores_from_centicores(abs(centicores))
    return -converted if centicores < 0 else converted


def _run(*, ids: dict[str, str], cores: int, gpus: int, force: bool, op_id: str | None, op_mode: str) -> BookingResult:
    """booking.lua on the proc's five keys (`ids`: show_id to dept_id, as keys.of_proc takes them)."""
    ttl_ms = settings.ACCOUNTING_INFLIGHT_TTL_SECONDS * 1000
    # booking.lua returns a table on every path ({ok, seq} or {0, table, current, limit}): a list reply.
    reply = cast(
        list,
        script("booking").run(
            accounting_redis(),
            keys=[*keys.of_proc(**ids), keys.SEQ, keys.INFLIGHT, keys.MASTER],
            args=[cores, gpus, "1" if force else "0", op_id or "", op_mode, ttl_ms],
        ),
    )
    if int(reply[0]) == 1:
        return BookingResult(ok=True, seq=int(reply[1]))
    unit = _text(reply[4]) if len(reply) > 4 else None  # none on "failover" and "acct:inflight"
    return BookingResult(ok=False, table=_text(reply[1]), current=int(reply[2]), limit=int(reply[3]), unit=unit)


def _text(part: bytes | str) -> str:
    return part.decode() if isinstance(part, bytes) else part


def book(
    *,
    show_id: str,
    alloc_id: str,
    folder_id: str,
    job_id: str,
    layer_id: str,
    dept_id: str,
    cores: int,
    gpus: int,
    op_id: str | None = None,
    force: bool = False,
) -> BookingResult:
    """Check limits and apply `cores` (CENTICORES, converted here) and `gpus` to the five keys.

    With `op_id`, the booking stays registered as in flight until `settle(op_id=...)`.
    """
    if op_id is not None and (cores < 0 or gpus < 0):
        raise ValueError("an in-flight booking registers positive amounts; use rollback to undo one")
    ids = dict(
        show_id=show_id, alloc_id=alloc_id, folder_id=folder_id, job_id=job_id, layer_id=layer_id, dept_id=dept_id
    )
    return _run(
        ids=ids,
        cores=_delta_cores(cores),
        gpus=gpus,
        force=force,
        op_id=op_id,
        op_mode="register",
    )


def settle(*, op_id: str) -> None:
    """The booking's proc INSERT has committed: its in-flight entry moves to the settle journal
    (for a reseed under way), and acct:seq is bumped."""
    script("booking_settle").run(
        accounting_redis(), keys=[keys.INFLIGHT, keys.SEQ, keys.SETTLED_SEQ, keys.SETTLED], args=[op_id]
    )


def rollback(
    *,
    show_id: str,
    alloc_id: str,
    folder_id: str,
    job_id: str,
    layer_id: str,
    dept_id: str,
    cores: int,
    gpus: int,
    op_id: str | None,
) -> BookingResult:
    """Undo a booking whose proc INSERT failed: the forced booking of the negated amounts.

    `cores` and `gpus` are the amounts that were booked (positive, centicores). With an
    `op_id`, the undo applies only while the booking's in-flight entry is live, and removes
    it; otherwise the result is not ok and nothing changed (Redis left high, which is safe).
    """
    ids = dict(
        show_id=show_id, alloc_id=alloc_id, folder_id=folder_id, job_id=job_id, layer_id=layer_id, dept_id=dept_id
    )
    return _run(
        ids=ids,
        cores=-_delta_cores(cores),
        gpus=-gpus,
        force=True,
        op_id=op_id,
        op_mode="remove",
    )
