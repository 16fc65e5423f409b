"""Attaching to a site's Cuebot database (OPENCUE_TABLES=existing), and refusing one in `create` mode.

Each test stands up a database of its own holding Cuebot's tables, built from the same
DDL the project's `create` migration runs, runs the DBA's SQL of docs/attaching.md there as
written (the service's role, its schema, its grants), and drives `manage.py` against it in a
separate process as that role, as an operator would.
"""

import re
import secrets
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from shows.cuebot_schema import HISTORY_SQL, TABLES, TABLES_SQL, TRIGGERS_SQL
from tests.processes import manage

OWN_SCHEMA = "cuebot_acct"
DOC = Path(__file__).resolve().parents[2] / "docs" / "attaching.md"

# Everything PostgreSQL knows about the public schema: a change to any of it shows.
FINGERPRINT = """
SELECT 'column', table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || COALESCE(column_default, '')
  FROM information_schema.columns WHERE table_schema = 'public'
UNION ALL SELECT 'constraint', conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = 'public'::regnamespace
UNION ALL SELECT 'index', indexdef FROM pg_indexes WHERE schemaname = 'public'
UNION ALL SELECT 'trigger', tgrelid::regclass::text || ' ' || tgname FROM pg_trigger WHERE NOT tgisinternal
UNION ALL SELECT 'function', proname || ' ' || md5(prosrc) FROM pg_proc WHERE pronamespace = 'public'::regnamespace
ORDER BY 1, 2
"""


def server(dbname: str = "postgres") -> psycopg.Connection:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**{**params, "dbname": dbname}, autocommit=True)


def dba_sql(*, role: str, password: str) -> str:
    """docs/attaching.md's SQL blocks as a DBA would paste them, for a role of this test's own
    (roles are the server's, not the database's) with a real password: the observer's, then the
    writer's grants a site gives when it lets the service write (as the tests here run it)."""
    blocks = "\n".join(re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S))
    blocks = blocks.replace("PASSWORD '...'", f"PASSWORD '{password}'")
    return re.sub(r"(ROLE|TO|AUTHORIZATION) cuebot_acct\b", rf"\1 {role}", blocks)


@pytest.fixture
def cuebot_database(request):
    """A database that Cuebot's migrations built (its tables, nothing of ours) and its DBA
    prepared for the service as docs/attaching.md says. Yields its name, the URL of the
    service's role and the superuser's (the DBA's, and Cuebot's for the demo's rows)."""
    name = f"{connection.settings_dict['NAME']}_{request.node.name[:20]}".lower()
    role, password = f"{name}_svc", secrets.token_hex(12)
    with server() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f"DROP ROLE IF EXISTS {role}")  # left by a run that was killed
        admin.execute(f'CREATE DATABASE "{name}"')
    with server(name) as site:
        site.execute(TABLES_SQL)
        site.execute(TRIGGERS_SQL)
        site.execute(HISTORY_SQL)
        site.execute(dba_sql(role=role, password=password))
    settings = connection.settings_dict
    address = f"{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{name}"
    yield name, f"postgres://{role}:{password}@{address}", f"postgres://{settings['USER']}@{address}"
    with server() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f"DROP ROLE IF EXISTS {role}")


def fingerprint(name: str) -> list[tuple]:
    with server(name) as site:
        return site.execute(FINGERPRINT).fetchall()


def tables_by_schema(name: str) -> dict[str, set[str]]:
    with server(name) as site:
        rows = site.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname IN ('public', %s)", [OWN_SCHEMA]
        ).fetchall()
    schemas: dict[str, set[str]] = {"public": set(), OWN_SCHEMA: set()}
    for schema, table in rows:
        schemas[schema].add(table)
    return schemas


def attached(url: str) -> dict[str, str]:
    """A site's database, as the writer (ACCOUNTING_WRITES=on) unless a test says otherwise."""
    return {
        "DATABASE_URL": url,
        "OPENCUE_TABLES": "existing",
        "ACCOUNTING_WRITES": "on",
        "OWN_TABLES_SCHEMA": OWN_SCHEMA,
        "settings": "settings.test",
    }


@pytest.mark.django_db
def test_migrate_on_a_cuebot_database_creates_only_the_projects_own_tables_in_their_schema(cuebot_database):
    name, url, superuser = cuebot_database
    before = fingerprint(name)

    migrated = manage("migrate", "--noinput", **attached(url))

    assert migrated.returncode == 0, migrated.stderr
    assert fingerprint(name) == before  # not one column, constraint, index, trigger or function of Cuebot's changed
    schemas = tables_by_schema(name)
    assert schemas["public"] == set(TABLES)
    assert {
        "django_migrations",
        "acct_api_token",
        "acct_instance",
        "auth_user",
        "django_q_task",
        "django_session",
    } <= schemas[OWN_SCHEMA]
    checked = manage("check", "--database", "default", **attached(url))
    assert checked.returncode == 0, checked.stderr
    assert "no issues" in checked.stdout


@pytest.mark.django_db
def test_the_check_names_a_missing_column_and_why_and_the_service_refuses_to_start(cuebot_database):
    name, url, superuser = cuebot_database
    assert manage("migrate", "--noinput", **attached(url)).returncode == 0
    with server(name) as site:  # a site whose Cuebot predates V45
        site.execute("ALTER TABLE show DROP COLUMN b_scheduler_managed")

    checked = manage("check", "--database", "default", **attached(url))
    started = manage("check_services", **attached(url))

    assert checked.returncode == 1
    assert "accounting.E002" in checked.stderr
    assert "column show.b_scheduler_managed is missing: Cuebot's migration V45" in checked.stderr
    assert started.returncode == 1
    assert "show.b_scheduler_managed is missing" in started.stderr


@pytest.mark.django_db
def test_the_check_names_a_missing_table_function_and_privilege(cuebot_database):
    name, url, superuser = cuebot_database
    assert manage("migrate", "--noinput", **attached(url)).returncode == 0
    with server(name) as site:
        site.execute("DROP TABLE host_local")
        site.execute("DROP FUNCTION tier")
        site.execute("CREATE ROLE cuebot_acct_reader LOGIN")
        site.execute(f"GRANT USAGE, CREATE ON SCHEMA {OWN_SCHEMA} TO cuebot_acct_reader")
        site.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public, {OWN_SCHEMA} TO cuebot_acct_reader")
    reader = attached(superuser.replace("postgres@", "cuebot_acct_reader@"))
    try:
        checked = manage("check", "--database", "default", **reader)
        observing = manage("check", "--database", "default", **{**reader, "ACCOUNTING_WRITES": "off"})
    finally:
        with server(name) as site:
            site.execute("DROP OWNED BY cuebot_acct_reader")
            site.execute("DROP ROLE cuebot_acct_reader")

    assert checked.returncode == 1
    assert "accounting.E001" in checked.stderr and "Cuebot table 'host_local' is missing" in checked.stderr
    assert "the database role may not DELETE on proc" in checked.stderr
    assert "the database role may not UPDATE on subscription" in checked.stderr
    assert "accounting.E005" in checked.stderr and "tier(numeric, numeric) is missing" in checked.stderr
    assert observing.returncode == 1 and "Cuebot table 'host_local' is missing" in observing.stderr
    assert "accounting.E004" not in observing.stderr


@pytest.mark.django_db
def test_create_mode_refuses_a_cuebot_database_in_one_line_and_changes_nothing(cuebot_database):
    name, url, superuser = cuebot_database
    before = fingerprint(name)

    migrated = manage("migrate", "--noinput", DATABASE_URL=superuser, OPENCUE_TABLES="create", settings="settings.test")

    assert migrated.returncode == 1
    assert migrated.stderr.strip().count("\n") == 0, migrated.stderr
    assert "OPENCUE_TABLES=existing" in migrated.stderr
    assert fingerprint(name) == before
    assert tables_by_schema(name)["public"] == set(TABLES)  # not even django_migrations


@pytest.mark.django_db
def test_demo_and_simulator_fill_only_a_cuebot_database_without_shows(cuebot_database):
    name, url, superuser = cuebot_database
    assert manage("migrate", "--noinput", **attached(url)).returncode == 0

    # The demo's seed writes Cuebot's rows, as Cuebot's role (here the superuser) would; the
    # service's role is refused in one line.
    as_service = manage("seed_demo_farm", "--procs", "20", "--hosts", "4", **attached(url))
    seeded = manage("seed_demo_farm", "--procs", "20", "--hosts", "4", **attached(superuser))
    again = manage("seed_demo_farm", "--procs", "20", "--hosts", "4", **attached(superuser))
    # The operator's commands work there, on the attached tables, as the service's role.
    operated = [
        manage(*command, **attached(url))
        for command in (
            ("acct_drift",),
            ("recalculate_subs",),
            ("set_scheduler_managed", "demo02", "true"),
            ("set_subscription", "demo02", "demo.general", "--burst", "500"),
            ("acct_reseed",),
            ("setup_schedules",),
        )
    ]
    with server(name) as site:
        site.execute(
            "INSERT INTO show (pk_show, str_name) VALUES ('00000000-0000-0000-0000-00000000cafe', 'site-show')"
        )
        frames, procs = site.execute("SELECT (SELECT count(*) FROM frame), (SELECT count(*) FROM proc)").fetchone()
    refused_seed = manage("seed_demo_farm", **attached(superuser))
    refused_sim = manage("simulate_farm", "--seconds", "1", **attached(superuser))
    sim_as_service = manage("simulate_farm", "--seconds", "1", "--existing", **attached(url))

    assert as_service.returncode == 2 and as_service.stderr.strip().count("\n") == 0, as_service.stderr
    assert "seed_demo_farm refuses: it writes Cuebot's own rows" in as_service.stderr
    assert seeded.returncode == 0, seeded.stderr
    assert again.returncode == 0, again.stderr
    assert (frames, procs) == (20, 20)
    assert [(result.args[2:], result.returncode) for result in operated] == [
        (result.args[2:], 0) for result in operated
    ], [result.stderr for result in operated if result.returncode]
    assert refused_seed.returncode == 2 and "holds 1 show(s) it did not create" in refused_seed.stderr
    assert refused_seed.stderr.strip().count("\n") == 0, refused_seed.stderr
    assert refused_sim.returncode == 2 and "holds 5 show(s) it did not create" in refused_sim.stderr  # the demo's too
    assert sim_as_service.returncode == 2 and sim_as_service.stderr.strip().count("\n") == 0, sim_as_service.stderr
    assert "simulate_farm refuses: it writes Cuebot's own rows" in sim_as_service.stderr
