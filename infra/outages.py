"""What counts as "a backing service is not answering", and a log filter that reports it in one
line (which service, at which address) instead of a traceback: an outage is a condition, not a
bug in the code, and dozens of library frames per periodic job would bury that one fact."""

import logging

import psycopg
import redis
from django.db import utils as django_db_errors

# SQLSTATE classes and codes that mean "the server is not there for us" rather than "this
# statement failed": connection exceptions (08xxx), and shutdown or start-up of the server.
CONNECTION_SQLSTATE_CLASS = "08"
SERVER_GOING_AWAY = {"57P01", "57P02", "57P03"}  # admin_shutdown, crash_shutdown, cannot_connect_now


def _causes(error: BaseException | None):
    """The error and what it was raised from or during (Django wraps psycopg's errors)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _server_gone(error: BaseException) -> str | None:
    """Which server `error` says could not be reached or went away: "postgresql", "redis" or None."""
    for cause in _causes(error):
        if isinstance(cause, (redis.ConnectionError, redis.TimeoutError)):
            return "redis"
        if isinstance(cause, psycopg.OperationalError):
            # A failed connect or a dropped connection carries no SQLSTATE from the server.
            state = cause.sqlstate
            gone = state is None or state.startswith(CONNECTION_SQLSTATE_CLASS) or state in SERVER_GOING_AWAY
            return "postgresql" if gone else None
        if isinstance(cause, django_db_errors.InterfaceError) and "closed" in str(cause):
            return "postgresql"  # "connection already closed": the server went away between two uses
    return None


def is_outage(error: BaseException) -> bool:
    """Whether `error` says a PostgreSQL or Redis server could not be reached or went away."""
    return _server_gone(error) is not None


def is_postgresql_outage(error: BaseException) -> bool:
    """Whether `error` says PostgreSQL could not be reached or the connection to it was lost (a
    restart, a terminated backend, a failover): the release's 503 (accounting.operators.release_api)."""
    return _server_gone(error) == "postgresql"


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# Any other exception keeps its traceback, including PostgreSQL errors that are not about the
# connection (a deadlock or a cancelled statement is an OperationalError too).
class OutageInOneLine(logging.Filter):
    """On a handler: a record whose exception is an outage loses its traceback and gains the
    error's first line, so one failed call is one log line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and is_outage(error):
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {first_line(error)})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True
