"""The per-request connection health check (infra.postgresql): no round trip on a live
connection, and a connection the server ended is replaced before a request uses it."""

import select
import tempfile

import psycopg
import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)


def ready_for_query_count(run) -> int:
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile() as trace:
        pgconn.trace(trace.fileno())
        try:
            run()
        finally:
            pgconn.untrace()
        trace.seek(0)
        return sum(1 for line in trace if b"ReadyForQuery" in line)


def start_of_request() -> None:
    """What Django does around each request: the check runs once, before the first query."""
    connection.close_if_unusable_or_obsolete()
    connection.close_if_health_check_failed()


def test_a_live_connection_is_checked_without_a_round_trip():
    # A new connection: one an earlier test opened may be past CONN_MAX_AGE, which Django closes.
    connection.close()
    connection.ensure_connection()
    assert connection.health_check_enabled
    assert ready_for_query_count(start_of_request) == 0
    assert connection.connection is not None


def test_a_connection_the_server_ended_is_replaced_before_the_request_uses_it():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        old_pid = cursor.fetchone()[0]
    with psycopg.connect(_dsn()) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [old_pid])
    # The server's goodbye on the idle socket is the event to await.
    assert select.select([connection.connection.pgconn.socket], [], [], 10)[0]
    start_of_request()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != old_pid


def _dsn() -> str:
    params = connection.get_connection_params()
    return psycopg.conninfo.make_conninfo(
        **{k: v for k, v in params.items() if k in ("dbname", "user", "host", "port", "password")}
    )
