"""The role a Maestro-era run's service writes run as: made for the run with exactly the grants
docs/attaching.md gives the service (shows.attach.grant_statements) and the project's own tables
(which a site's role owns, having migrated them), taken by every connection of the threads whose
name starts with SERVICE_THREAD, and dropped, grants and all, when the run ends."""

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection, connections
from django.db.backends.signals import connection_created

from shows.attach import grant_statements
from shows.cuebot_schema import TABLES as CUEBOT_TABLES
from simulator.processes import ProcessRefused
from simulator.workers.maestro.play import SERVICE_THREAD


@contextmanager
def service_role(*, prefix: str = "sim_service") -> Iterator[tuple[str, str]]:
    """Yields (role, password) of a role made for the run; its connections take it (SET ROLE)."""
    role, password = f"{prefix}_{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    with connection.cursor() as cursor:
        create_role(cursor=cursor, role=role, password=password)

    def take_role(sender, connection, **kwargs) -> None:
        if threading.current_thread().name.startswith(SERVICE_THREAD):
            connection.connection.execute(f"SET ROLE {role}")

    connection_created.connect(take_role, dispatch_uid=f"simulator.maestro.{role}", weak=False)
    try:
        yield role, password
    finally:
        connection_created.disconnect(dispatch_uid=f"simulator.maestro.{role}")
        drop_role(role=role)


def create_role(*, cursor, role: str, password: str) -> None:
    try:
        cursor.execute(f"CREATE ROLE {role} LOGIN PASSWORD %s", [password])
    except DatabaseError as error:
        raise ProcessRefused(
            "simulate_farm --era maestro releases as a role it makes with the service's documented grants, "
            f"and this database user may not make one: {str(error).splitlines()[0]}"
        ) from None
    for statement in grant_statements(role=role):
        cursor.execute(statement)
    cursor.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND NOT tablename = ANY(%s)",
        [list(CUEBOT_TABLES)],
    )
    own = [row[0] for row in cursor.fetchall()]
    if own:
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(own)} TO {role}")
    cursor.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")


def drop_role(*, role: str) -> None:
    connections.close_all()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s AND pid <> pg_backend_pid()",
            [role],
        )
        cursor.execute(f"DROP OWNED BY {role}")
        cursor.execute(f"DROP ROLE {role}")


def role_url(*, role: str, password: str) -> str:
    db = connection.settings_dict
    return f"postgres://{role}:{password}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"
