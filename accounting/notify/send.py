"""Sending notifications on the caller's transaction.

`pg_notify` queues the notification on the transaction that runs it; PostgreSQL delivers it
to the listeners when, and only when, that transaction commits, and drops it with a
savepoint that rolls back. Nothing here runs after commit but the metric: there is no
after-commit step to lose and nothing to retry.
"""
from collections.abc import Sequence

from django.conf import settings
from django.db import transaction

from cuebot_acct.metrics import NOTIFICATIONS

_ONE = "SELECT pg_notify(%(channel)s, %(payload)s)"
_MANY = "SELECT pg_notify(%(channel)s, n.payload) FROM unnest(%(payloads)s::text[]) WITH ORDINALITY AS n(payload, i) ORDER BY n.i"


def enabled() -> bool:
    """ACCOUNTING_NOTIFY_ENABLED: Cuebot's accounting.notify.enabled."""
    return settings.ACCOUNTING_NOTIFY_ENABLED


def notify(*, cursor, channel: str, payloads: Sequence[str]) -> None:
    """Queue `payloads` on `channel` in the transaction `cursor` runs in (which must be an
    atomic block: outside one, each statement would commit, and notify, on its own)."""
    if not payloads:
        return
    if len(payloads) == 1:
        cursor.execute(_ONE, {"channel": channel, "payload": payloads[0]})
    else:
        cursor.execute(_MANY, {"channel": channel, "payloads": list(payloads)})
    count = len(payloads)
    transaction.on_commit(lambda: NOTIFICATIONS.labels(channel=channel).inc(count))
