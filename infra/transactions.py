"""Rerun a whole transaction that PostgreSQL rolled back as a deadlock victim (40P01) or a
serialization failure (40001), when the caller opened the outermost transaction."""

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connection
from redis.backoff import FullJitterBackoff

from infra import metrics

logger = logging.getLogger(__name__)

TRANSIENT_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
ATTEMPTS = 3
# Full jitter on a doubling cap: 0-20 ms, then 0-40 ms. Enough to let the winner of a
# deadlock commit; short, because a caller (Cuebot's dispatcher) is waiting.
BACKOFF_SECONDS = 0.02
# redis.backoff's full jitter, as the reseed's; the cap is the last rerun's bound, so it cuts nothing.
_BACKOFF = FullJitterBackoff(cap=BACKOFF_SECONDS * 2 ** (ATTEMPTS - 2), base=BACKOFF_SECONDS)

T = TypeVar("T")


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a Django database error (Django keeps psycopg's as the cause) or a psycopg one."""
    return getattr(error.__cause__, "sqlstate", None) or getattr(error, "sqlstate", None)


# Why a rerun is safe: PostgreSQL aborted the transaction whole, and every Redis write of a
# transaction runs in transaction.on_commit, which only the attempt that commits fires. The only
# trace an aborted release leaves is its acct:inflight entry, which adds the released amounts to
# a reseed while it lives and then expires (Redis high for at most the TTL, the safe direction).
# A rerun reads everything again (a proc released meanwhile is not found), so it is no resend of
# a release whose outcome is unknown, which stays forbidden. Inside a caller's transaction the
# abort took the caller's earlier work too, which only the caller can redo: the error propagates.
def retry_transient(fn: Callable[[], T], *, operation: str) -> T:
    """Run fn (which opens its own transaction.atomic()); rerun it on 40P01/40001, at most
    ATTEMPTS times in all, when it is the outermost transaction. Reruns are counted in
    cuebot_acct_transaction_retries_total{operation, sqlstate}; the last error propagates."""
    if connection.in_atomic_block:
        return fn()
    attempt = 1
    while True:
        try:
            return fn()
        except OperationalError as error:
            state = sqlstate(error)
            if state not in TRANSIENT_SQLSTATES or attempt == ATTEMPTS:
                raise
            metrics.TRANSACTION_RETRIES.labels(operation=operation, sqlstate=state).inc()
            logger.info(
                "%s rolled back by PostgreSQL (%s), attempt %d of %d; running it again",
                operation,
                state,
                attempt,
                ATTEMPTS,
            )
            time.sleep(_BACKOFF.compute(attempt - 1))
            attempt += 1
