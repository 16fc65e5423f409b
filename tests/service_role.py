"""The suite runs as the role docs/attaching.md tells a site to grant, not as a superuser.

A site's DBA gives the service's role exactly `shows.attach.grant_statements` on Cuebot's
tables (the list `accounting.E004` checks and the page prints), and the role owns the
project's own tables because it ran `migrate` itself. A suite that runs as a superuser
cannot see a path that needs more than that (a batch release's `FOR UPDATE OF p` needing
UPDATE on proc went unseen that way), so after the migrations this module makes such a
role on the test database and every Django connection to that database takes it on at
creation (`SET ROLE`, so that the same connection, in the same transaction, can still play
Cuebot for a moment: `as_cuebot()`).

What stays the superuser's:
- the fixtures that do Cuebot's work (building farms, inserting procs, deleting jobs,
  emptying Cuebot's tables), inside `as_cuebot()`, as Cuebot's own role would on a site;
- tests marked `superuser`, which play more than the service (the simulator books as the
  scheduler and kills backends; the attach tests stand up whole databases);
- the test database's creation and migration (pytest-django), like the Cuebot migrations
  that created a site's tables.

A second role is the observer a cautious site grants first (ACCOUNTING_WRITES=off): SELECT
alone on Cuebot's tables (`grant_statements(writes=False)`) and the project's own tables, which a
site's observer owns in its own schema; `as_observer()` and `observer_database()` run the code
under test as it.

The roles are named after the test database, so two suites on one server (other databases)
never share them, and they are dropped when the session ends.
"""

import re
import secrets
import threading
from contextlib import contextmanager
from urllib.parse import quote

from django.db import connection, connections
from django.db.backends.signals import connection_created
from psycopg import pq

from shows.attach import grant_statements
from shows.cuebot_schema import TABLES as CUEBOT_TABLES


class _State:
    """The session's role (None until the suite has made it) and whether a `superuser`
    test is running, in which case new connections keep the superuser."""

    role: str | None = None
    password: str = ""
    observer_password: str = ""
    database: str | None = None
    suspended: bool = False


STATE = _State()
# Nesting depth of as_cuebot() per thread: only the outermost one gives the role back.
_depth = threading.local()


def role_for(database: str, *, kind: str = "service") -> str:
    """A role name of the test database's own (PostgreSQL's 63-character limit kept)."""
    return re.sub(r"\W", "_", f"{database}_{kind}").lower()[:63]


def _login_role(cursor, role: str) -> str:
    """Make `role` (or take back one a killed session left) with a fresh password; returns it."""
    password = secrets.token_hex(16)
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
    verb = "CREATE" if cursor.fetchone() is None else "ALTER"
    cursor.execute(f"{verb} ROLE {role} LOGIN PASSWORD %s", [password])
    return password


def _take_role(sender, connection, **kwargs) -> None:
    """On every new connection to the test database: become the service's role. Sent on
    the psycopg connection itself, so that query logs and counts in tests never see it."""
    if STATE.role and not STATE.suspended and connection.settings_dict["NAME"] == STATE.database:
        connection.connection.execute(f"SET ROLE {STATE.role}")


def create_role(*, database: str) -> None:
    """Make the role on the (migrated) test database with exactly the documented grants, and
    give it the project's own tables, as a site's role owns those it migrated."""
    role, observer = role_for(database), role_for(database, kind="observer")
    with connection.cursor() as cursor:
        password = _login_role(cursor, role)
        STATE.observer_password = _login_role(cursor, observer)
        for statement in grant_statements(role=role) + grant_statements(role=observer, writes=False):
            cursor.execute(statement)
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND NOT tablename = ANY(%s)",
            [list(CUEBOT_TABLES)],
        )
        for (table,) in cursor.fetchall():
            cursor.execute(f'ALTER TABLE public."{table}" OWNER TO {role}')
            cursor.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON public."{table}" TO {observer}')
        # Cuebot's tables have no sequence: every one in the schema is an own table's id.
        cursor.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {observer}")
    STATE.role, STATE.password, STATE.database = role, password, database
    connection_created.connect(_take_role, dispatch_uid="tests.service_role")
    connections.close_all()  # the migrations' connection was the superuser's: reopen as the role


def drop_role() -> None:
    """Give the own tables back to the superuser, take every grant away, drop the role."""
    role = STATE.role
    connection_created.disconnect(dispatch_uid="tests.service_role")
    STATE.role = None
    connections.close_all()
    if role is None:
        return
    with connection.cursor() as cursor:
        for dropped in (role, role_for(STATE.database or "", kind="observer")):
            cursor.execute(f"REASSIGN OWNED BY {dropped} TO CURRENT_USER")
            cursor.execute(f"DROP OWNED BY {dropped}")
            cursor.execute(f"DROP ROLE {dropped}")
    connections.close_all()


def _set(role: str | None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {role}" if role else "RESET ROLE")


@contextmanager
def as_cuebot():
    """Inside, the test's connection is the superuser's, for what Cuebot (or its scheduler)
    writes on a site: rows the service's role may not insert, update or delete. Same
    connection, same transaction: what is written is there for the code under test."""
    depth = getattr(_depth, "value", 0)
    if STATE.role is None or STATE.suspended or depth:
        _depth.value = depth + 1
        try:
            yield
        finally:
            _depth.value = depth
        return
    _set(None)
    _depth.value = 1
    try:
        yield
    finally:
        _depth.value = 0
        # A failed statement inside leaves the transaction aborted; its rollback (to the
        # savepoint or the test's start) brings the role back by itself then.
        if (
            connection.connection is not None
            and connection.connection.info.transaction_status != pq.TransactionStatus.INERROR
        ):
            _set(STATE.role)


@contextmanager
def superuser():
    """For a `superuser` test: the connection open now and those it opens (threads too)
    keep the superuser until it ends."""
    if STATE.role is None:
        yield
        return
    STATE.suspended = True
    if connection.connection is not None:
        connection.connection.execute("RESET ROLE")
    try:
        yield
    finally:
        STATE.suspended = False
        open_connection = connection.connection
        # An aborted transaction's rollback brings the role back by itself.
        if (
            open_connection is not None
            and not open_connection.closed
            and (open_connection.info.transaction_status != pq.TransactionStatus.INERROR)
        ):
            open_connection.execute(f"SET ROLE {STATE.role}")


def service_database() -> dict[str, str]:
    """The environment a separate process (a command, gunicorn, qcluster) needs to run on the
    test database as a site runs: logged in as the service's role (its own password, so a
    server that asks for one works too), attached to Cuebot's tables (OPENCUE_TABLES=existing,
    so the start-up checks accounting.E001-E005 run, under that role)."""
    assert STATE.role, "the suite's role is made by the django_db_setup fixture (tests/conftest.py)"
    # Writes named: on a site's database (existing) they are off unless a site turns them on.
    return {"DATABASE_URL": _url(STATE.role, STATE.password), "OPENCUE_TABLES": "existing", "ACCOUNTING_WRITES": "on"}


def observer_database() -> dict[str, str]:
    """service_database(), as the observer: SELECT alone on Cuebot's tables, and
    ACCOUNTING_WRITES left unset, which on a site's database (existing) is off."""
    assert STATE.role, "the suite's roles are made by the django_db_setup fixture (tests/conftest.py)"
    observer = role_for(STATE.database or "", kind="observer")
    return {"DATABASE_URL": _url(observer, STATE.observer_password), "OPENCUE_TABLES": "existing"}


def _url(role: str, password: str) -> str:
    settings = connection.settings_dict
    host, port = settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
    return f"postgres://{role}:{quote(password, safe='')}@{host}:{port}/{settings['NAME']}"


@contextmanager
def as_observer():
    """Inside, the test's connection is the observer's (a new one too), as under
    observer_database(); the caller sets ACCOUNTING_WRITES off (the `observer` fixture does)."""
    assert STATE.role, "the suite's roles are made by the django_db_setup fixture (tests/conftest.py)"
    observer, service = role_for(STATE.database or "", kind="observer"), STATE.role
    STATE.role = observer
    _set(observer)
    try:
        yield
    finally:
        STATE.role = service
        if (
            connection.connection is not None
            and connection.connection.info.transaction_status != pq.TransactionStatus.INERROR
        ):
            _set(service)
