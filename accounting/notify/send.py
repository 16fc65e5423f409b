"""Sending notifications on the caller's transaction.

`pg_notify` queues the notification on the transaction that runs it; PostgreSQL delivers it
to the listeners when, and only when, that transaction commits, and drops it with a
savepoint that rolls back. Nothing here runs after commit but the metric: there is no
after-commit step to lose and nothing to retry.
"""

from collections.abc import Sequence

import psycopg
from django.db import transaction

from infra.cursors import django_cursor
from infra.metrics import NOTIFICATIONS

_ONE = "SELECT pg_notify(%(channel)s, %(payload)s)"
_MANY = "SELECT pg_notify(%(channel)s, n.payload) FROM unnest(%(payloads)s::text[]) WITH ORDINALITY AS n(payload, i) ORDER BY n.i"


def notify(*, cursor, channel: str, payloads: Sequence[str]) -> None:
    """Queue `payloads` on `channel` in the transaction `cursor` runs in (which must be an
    atomic block: outside one, each statement would commit, and notify, on its own)."""
    if not payloads:
        return
    cursor.execute(*_statement(channel=channel, payloads=payloads))
    _count_at_commit(channel=channel, count=len(payloads))


def notify_and_commit(*, channel: str, payloads: Sequence[str]) -> None:
    """The same as notify(), for the outermost transaction when the notifications are the last
    thing it sends: they and the COMMIT go as one simple query, one round trip.

    The statements are bound client-side (a simple query may hold several; the pg_notify
    SELECT has nothing to plan ahead). PostgreSQL runs them in order and skips the COMMIT if a
    notification fails; a COMMIT that fails is raised here like any failed statement, so the
    atomic block around rolls back and runs no on_commit callback. When that block then
    commits, the transaction is over already and psycopg sends nothing. With nothing to send,
    nothing is sent: the block's own COMMIT ends the transaction.
    """
    if not payloads:
        return
    sql, params = _statement(channel=channel, payloads=payloads)
    # Client-side binding: a simple query may hold several statements.
    with django_cursor(psycopg.ClientCursor) as cursor:
        cursor.execute(f"{sql}; COMMIT", params)
    _count_at_commit(channel=channel, count=len(payloads))


def _statement(*, channel: str, payloads: Sequence[str]) -> tuple[str, dict]:
    if len(payloads) == 1:
        return _ONE, {"channel": channel, "payload": payloads[0]}
    return _MANY, {"channel": channel, "payloads": list(payloads)}


def _count_at_commit(*, channel: str, count: int) -> None:
    transaction.on_commit(lambda: NOTIFICATIONS.labels(channel=channel).inc(count))
