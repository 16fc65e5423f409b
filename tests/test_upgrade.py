"""Upgrade and roll back, as docs/upgrading.md tells a site to: the previous release's code
migrates a database Cuebot's migrations built (OPENCUE_TABLES=existing), runs with data in the
service's own tables (a token, a drift record, the schedules, the database cache), then the
working tree's `migrate` upgrades it, and migrating each app back to the previous release's last
migration rolls it back, after which the previous release's code finds nothing to migrate and
reads its data as it left it. No row of the service's own tables is lost on the way, and no row
or column of Cuebot's tables changes.

The previous release is a commit of this repository (git archive), run on this suite's
interpreter and packages: the runtime lock is the same on both sides.
"""

import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db.migrations.loader import MigrationLoader
from psycopg.sql import SQL, Identifier

from shows.cuebot_schema import HISTORY_SQL, TABLES_SQL, TRIGGERS_SQL
from shows.cuebot_schema import TABLES as CUEBOT_TABLES

ROOT = Path(__file__).resolve().parent.parent
# The last commit before the first versioned release (1.0.0, CHANGELOG.md): the release a site
# runs before this one. The next release names the tag of this one here.
PREVIOUS_RELEASE = "a97d411"
# The apps whose migrations are the service's own (the others come with the locked packages,
# the same on both sides).
OWN_APPS = ("accounting", "shows")

# What the previous release is given to hold, written through its own code (Cuebot's rows too, as
# the demo farm plays Cuebot), and what each side reads back: the previous release before the
# upgrade, the working tree after it, the previous release after the roll back, once it has found
# nothing left to migrate (`migrate --check` exits 1 otherwise).
PUT_DATA = """
import json
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import call_command
from django.utils import timezone
from accounting.models import DriftRecord
from accounting.operators.auth import issue_token
call_command("seed_demo_farm", shows=2, hosts=2, procs=8)
user = User.objects.create_superuser("upgrade", "upgrade@example.com", "not-a-password")
issue_token(user=user, name="upgrade probe")
DriftRecord.objects.create(source="cuebot_tables", identity="subscription:upgrade", show_id="s", show_name="upgrade",
    subject="upgrade.local", detail="subscription int_cores", cores_difference=400, gpus_difference=0,
    difference="4.00 cores high", first_seen=timezone.now())
call_command("setup_schedules", verbosity=0)
cache.set("upgrade-probe", {"kept": True}, None)
"""
CHECK_MIGRATIONS = """
from django.core.management import call_command
call_command("migrate", check_unapplied=True)
"""
READ_DATA = """
import json
from django.core.cache import cache
from django_q.models import Schedule
from accounting.models import ApiToken, DriftRecord
print(json.dumps({
    "tokens": sorted(ApiToken.objects.values_list("name", "prefix", "user__username")),
    "drift": sorted(DriftRecord.objects.values_list("identity", "difference")),
    "schedules": sorted(Schedule.objects.values_list("name", "func", "minutes")),
    "cache": cache.get("upgrade-probe"),
}, default=str))
"""


def server(dbname: str) -> psycopg.Connection:
    """The superuser's connection (the DBA's, and Cuebot's for its rows) to a database of the server."""
    test = settings.DATABASES["default"]
    return psycopg.connect(
        host=test["HOST"] or "127.0.0.1", port=test["PORT"] or 5432, user=test["USER"], dbname=dbname, autocommit=True
    )


@pytest.fixture
def site_database():
    """A database built by Cuebot's DDL alone (nothing of the service's), dropped afterwards."""
    name = f"{settings.DATABASES['default']['NAME']}_upgrade"
    with server("postgres") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    with server(name) as site:
        site.execute(TABLES_SQL)
        site.execute(TRIGGERS_SQL)
        site.execute(HISTORY_SQL)  # Cuebot's history, in every site's database since V1
    yield name
    with server("postgres") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def previous_release(tmp_path) -> Path:
    archive = subprocess.run(["git", "archive", PREVIOUS_RELEASE], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tmp_path / "previous", filter="data")
    return tmp_path / "previous"


def run(code: Path, *args: str, database: str) -> subprocess.CompletedProcess:
    """`manage.py ARGS` of the code at `code`, against `database`, as a Maestro site configures it."""
    test = settings.DATABASES["default"]
    keep = {name: value for name, value in os.environ.items() if not name.endswith("_REDIS_URL")}
    env = {
        **keep,
        "DJANGO_SETTINGS_MODULE": "settings",
        "DATABASE_URL": f"postgres://{test['USER']}@{test['HOST'] or '127.0.0.1'}:{test['PORT'] or 5432}/{database}",
        "OPENCUE_TABLES": "existing",
        "ACCOUNTING_SCHEDULER": "maestro",
        "ACCOUNTING_WRITES": "on",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=code, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{code.name}: manage.py {' '.join(args)}: {done.stderr}"
    return done


def read(code: Path, program: str, *, database: str) -> dict:
    """What `program` run by `manage.py shell` of the code at `code` prints last, as JSON."""
    return json.loads(run(code, "shell", "-c", program, database=database).stdout.splitlines()[-1])


def cuebot_tables(database: str) -> dict[str, str]:
    """Each of Cuebot's tables: a checksum of its rows, and of its columns as PostgreSQL describes them."""
    with server(database) as site:
        return {
            table: site.execute(
                f"SELECT md5(COALESCE(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {table} t"
            ).fetchone()[0]
            + site.execute(
                "SELECT md5(string_agg(column_name || data_type || is_nullable || COALESCE(column_default, ''), "
                "'|' ORDER BY ordinal_position)) FROM information_schema.columns WHERE table_name = %s",
                [table],
            ).fetchone()[0]
            for table in CUEBOT_TABLES
        }


def own_columns(database: str) -> dict[str, list[str]]:
    """The columns of every table that is not Cuebot's: the service's own tables, Django's, django-q2's."""
    with server(database) as site:
        rows = site.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
    columns: dict[str, list[str]] = {}
    for table, column in rows:
        if table not in CUEBOT_TABLES:
            columns.setdefault(table, []).append(column)
    return columns


def own_rows(database: str, columns: dict[str, list[str]]) -> dict[str, set[str]]:
    """Every row of these tables, as text of these columns (a column an upgrade adds is left out)."""
    with server(database) as site:
        row_text = SQL("SELECT ROW({})::text FROM {}")
        present = {name for (name,) in site.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        return {
            table: {
                row
                for (row,) in site.execute(row_text.format(SQL(", ").join(map(Identifier, names)), Identifier(table)))
            }
            for table, names in columns.items()
            if table in present
        }


def lost(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, set[str]]:
    """The rows of `before` that `after` no longer holds (a table gone loses them all)."""
    return {table: rows - after.get(table, set()) for table, rows in before.items() if rows - after.get(table, set())}


def rollback_targets(previous: Path) -> dict[str, str]:
    """For each of the service's apps the working tree migrates further than the previous release,
    the previous release's last migration: where `migrate APP NAME` takes it back."""
    leaves = MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes()
    targets = {}
    for app in OWN_APPS:
        before = sorted(path.stem for path in (previous / app / "migrations").glob("[0-9]*.py"))
        now = [name for leaf_app, name in leaves if leaf_app == app]
        if now != before[-1:]:
            targets[app] = before[-1] if before else "zero"
    return targets


@pytest.mark.slow
def test_upgrade_then_roll_back_keeps_the_services_data_and_touches_nothing_of_cuebots(site_database, previous_release):
    run(previous_release, "migrate", "--noinput", database=site_database)
    read_before = read(previous_release, PUT_DATA + READ_DATA, database=site_database)
    assert read_before["tokens"] and read_before["drift"] and read_before["schedules"] and read_before["cache"]
    columns = own_columns(site_database)
    cuebot, own = cuebot_tables(site_database), own_rows(site_database, columns)

    run(ROOT, "migrate", "--noinput", database=site_database)
    assert lost(own, own_rows(site_database, columns)) == {}
    assert cuebot_tables(site_database) == cuebot
    assert read(ROOT, READ_DATA, database=site_database) == read_before

    for app, migration in rollback_targets(previous_release).items():
        run(ROOT, "migrate", app, migration, "--noinput", database=site_database)
    assert read(previous_release, CHECK_MIGRATIONS + READ_DATA, database=site_database) == read_before
    assert lost(own, own_rows(site_database, columns)) == {}
    assert cuebot_tables(site_database) == cuebot


def test_every_migration_of_the_service_can_be_reversed():
    """A roll back runs each of the service's migrations backwards: none may lack its way back
    (a RunSQL without reverse_sql, a RunPython without reverse_code)."""
    migrations = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
    one_way = [
        f"{app}.{name}: {operation.describe()}"
        for (app, name), migration in migrations.items()
        if app in OWN_APPS
        for operation in migration.operations
        if not operation.reversible
    ]
    assert [name for app, name in migrations if app in OWN_APPS]  # the scan found the migrations
    assert one_way == []
