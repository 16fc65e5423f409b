"""Django's PostgreSQL backend with two changes for the release path's rate.

- The per-request health check costs no round trip. Django's CONN_HEALTH_CHECKS sends
  `SELECT 1` before the first query of every request; here the connection's own state
  answers instead: psycopg's status, then whether the server has written anything on the
  idle socket. A server that ends a connection (restart, pg_terminate_backend, an idle
  timeout) sends an error and closes the socket, which makes it readable: only then is
  `SELECT 1` sent, and the connection is replaced before the request uses it. What this
  cannot see (a peer gone silently, with no FIN) the first query reports as an error, as
  it would report a failure right after a `SELECT 1`.
- The query log (DEBUG, tests) names the release path's prepared statements too: psycopg
  keeps no query text for a prepared execution, so it is composed from the SQL given.
- Every error it raises says which alias raised it (`error.alias`): with Cuebot's tables read
  from a database apart (cuebot_acct.cuebot_database), a face names that database when it fails.
"""

import select
from functools import cached_property

from django.db import DatabaseError
from django.db.backends.postgresql import base, operations
from django.db.utils import DatabaseErrorWrapper
from psycopg import pq


class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor, sql, params):
        executed = super().last_executed_query(cursor, sql, params)
        return executed if executed is not None else self.compose_sql(sql, params)


class ErrorsNamingAlias(DatabaseErrorWrapper):
    """Django's translation of psycopg's errors, each marked with the alias of the connection."""

    def __exit__(self, exc_type, exc_value, traceback):
        if exc_type is None:
            return  # the statement's own path: nothing to translate, nothing more than Django's check
        try:
            super().__exit__(exc_type, exc_value, traceback)
        except DatabaseError as error:
            error.alias = self.wrapper.alias
            raise


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    @cached_property
    def wrap_database_errors(self):
        return ErrorsNamingAlias(self)

    def close_if_health_check_failed(self):
        if self.connection is None or not self.health_check_enabled or self.health_check_done or self.pool:
            return
        if not self.looks_alive() and not self.is_usable():
            self.close()
        self.health_check_done = True

    def looks_alive(self) -> bool:
        """True when the idle connection is open and the server has said nothing on it."""
        connection = self.connection
        if connection.closed or connection.pgconn.status != pq.ConnStatus.OK:
            return False
        readable, _, _ = select.select([connection.pgconn.socket], [], [], 0)
        return not readable
