"""A Django cursor over a psycopg cursor class of the caller's choosing.

The release path sends some statements through psycopg cursors Django does not make
(prepared server-side statements; several statements in one simple query). They still go
through Django's cursor wrapper, as every other statement does: the query log, execute
wrappers and Django's error translation (a deadlock raised as the OperationalError that
`infra.transactions` reruns).
"""

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections


def django_cursor(cursor_class: type[psycopg.Cursor]):
    """A Django cursor wrapper around `cursor_class` on the default connection (opened if need be)."""
    # The thread's connection looked up once: each attribute read through django.db.connection
    # looks it up again (asgiref's thread-local storage, 2-4 µs a read: docs/benchmarks.md).
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    raw = cursor_class(db.connection)
    # django-stubs type both methods as taking Django's wrapper; Django wraps the raw DB-API cursor.
    wrap = db.make_debug_cursor if db.queries_logged else db.make_cursor
    return wrap(raw)  # type: ignore[arg-type]
