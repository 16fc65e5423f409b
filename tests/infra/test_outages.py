"""Which errors count as an outage (logged in one line) and which keep their traceback, with
errors raised by the real servers, not built by hand."""

import logging

import psycopg
import pytest
import redis
from django.db import OperationalError, connection

from infra.outages import OutageInOneLine, is_outage
from tests.processes import closed_port


def raised(call) -> BaseException:
    with pytest.raises(Exception) as caught:
        call()
    return caught.value


def test_an_unreachable_postgresql_and_redis_are_outages():
    assert is_outage(
        raised(lambda: psycopg.connect(f"postgres://postgres@127.0.0.1:{closed_port()}/x", connect_timeout=2))
    )
    assert is_outage(raised(lambda: redis.Redis(port=closed_port(), socket_connect_timeout=2).ping()))


@pytest.mark.django_db
def test_a_cancelled_statement_is_not_an_outage_though_psycopg_calls_it_operational():
    def cancelled():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 10")
            cursor.execute("SELECT pg_sleep(1)")

    error = raised(cancelled)
    assert isinstance(error, OperationalError) and not is_outage(error)


def test_the_filter_keeps_the_record_and_drops_the_traceback_of_an_outage_only():
    outage = raised(lambda: redis.Redis(port=closed_port(), socket_connect_timeout=2).ping())
    bug = raised(lambda: 1 / 0)
    records = [
        logging.LogRecord("t", logging.WARNING, __file__, 1, "heartbeat (%s) failed", ("tasks",), (type(e), e, None))
        for e in (outage, bug)
    ]
    assert all(OutageInOneLine().filter(record) for record in records)
    assert records[0].exc_info is None and records[0].getMessage().startswith(
        "heartbeat (tasks) failed (ConnectionError: "
    )
    assert records[1].exc_info is not None and records[1].getMessage() == "heartbeat (tasks) failed"
