"""Django's PostgreSQL backend with two changes for the release path's rate: the per-request
health check costs no round trip, and the query log names prepared statements too."""

import select

from django.db.backends.postgresql import base, operations
from psycopg import pq


# psycopg keeps no query text for a prepared execution: the query log (DEBUG, tests) composes it
# from the SQL given.
class DatabaseOperations(operations.DatabaseOperations):
    def last_executed_query(self, cursor, sql, params):
        executed = super().last_executed_query(cursor, sql, params)
        return executed if executed is not None else self.compose_sql(sql, params)


# Django's CONN_HEALTH_CHECKS sends `SELECT 1` before the first query of every request; here the
# connection's own state answers: psycopg's status, then whether the server has written anything
# on the idle socket. A server that ends a connection (restart, pg_terminate_backend, an idle
# timeout) sends an error and closes the socket, which makes it readable: only then is `SELECT 1`
# sent, and the connection replaced before the request uses it. A peer gone silently (no FIN) is
# reported by the first query, as it would be right after a `SELECT 1`.
class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

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
