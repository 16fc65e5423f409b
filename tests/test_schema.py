"""The migrated schema (OPENCUE_TABLES=create) is Cuebot's, as docs/cuebot-schema.md states it.

Every comparison goes both ways: nothing the page lists is missing from the database, and
nothing the database has for these tables is missing from the page.
"""

import re
from pathlib import Path

import pytest
from django.db import connection

# The page describes the schema as its owner sees it: information_schema lists a table's
# constraints and triggers only to roles that own it or may write it, which the service's
# role is not for most of Cuebot's tables.
pytestmark = pytest.mark.superuser

DOC = (Path(__file__).resolve().parent.parent / "docs" / "cuebot-schema.md").read_text()

DATA_TYPES = {
    "varchar": "character varying",
    "int": "integer",
    "bigint": "bigint",
    "smallint": "smallint",
    "bool": "boolean",
    "numeric": "numeric",
    "timestamptz": "timestamp with time zone",
    "timestamp": "timestamp without time zone",
    "date": "date",
    "bytea": "bytea",
}


def block(name: str) -> list[str]:
    match = re.search(rf"^```{name}\n(.*?)^```", DOC, flags=re.MULTILINE | re.DOTALL)
    assert match, f"docs/cuebot-schema.md has no ```{name} block"
    return [line for line in match.group(1).splitlines() if line.strip()]


def documented_columns() -> dict[str, dict[str, tuple]]:
    """table -> column -> (data type, length, nullable, default) as the page writes them."""
    tables = {}
    for line in block("columns"):
        table, columns = line.split(": ", 1)
        tables[table] = {}
        for spec in columns.split("; "):
            match = re.fullmatch(r"(\w+) (\w+)(?:\((\d+)(?:,\d+)?\))?( NN)?(?:=(.*))?", spec)
            assert match, f"cannot read {spec!r} of {table}"
            name, kind, length, not_null, default = match.groups()
            if kind == "varchar":
                length = int(length or 36)
            else:
                length = None
            # The page writes an empty string as '' and "no default" as null, as PostgreSQL stores them.
            default = {"''": "", "null": None}.get(default, default)
            tables[table][name] = (DATA_TYPES[kind], length, not not_null, default)
    return tables


DOCUMENTED = documented_columns()


def normalised_default(default: str | None) -> str | None:
    """PostgreSQL's spelling of a default, in the page's: 'none'::character varying -> none."""
    if default is None:
        return None
    if default == "CURRENT_TIMESTAMP":
        return "now"
    value = re.sub(r"::[a-z ]+$", "", default)
    if value.startswith("'") and value.endswith("'"):
        value = value[1:-1]
    return value


def query(sql: str, params=None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


@pytest.mark.django_db
def test_the_documented_tables_are_the_migrated_cuebot_tables():
    from shows.cuebot_schema import TABLES

    assert set(DOCUMENTED) == set(TABLES)
    present = {name for (name,) in query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert set(TABLES) <= present


@pytest.mark.django_db
@pytest.mark.parametrize("table", sorted(DOCUMENTED))
def test_columns_match_the_schema_document(table):
    rows = query(
        "SELECT column_name, data_type, character_maximum_length, is_nullable = 'YES', column_default "
        "FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
        [table],
    )
    actual = {
        name: (kind, length, nullable, normalised_default(default)) for name, kind, length, nullable, default in rows
    }
    assert actual == DOCUMENTED[table]
    assert [name for name, *_ in rows] == list(DOCUMENTED[table]), "columns in Cuebot's order"


@pytest.mark.django_db
def test_numeric_tier_columns_are_16_2():
    rows = query(
        "SELECT table_name, numeric_precision, numeric_scale FROM information_schema.columns "
        "WHERE table_schema = 'public' AND column_name = 'float_tier'"
    )
    assert {(t, p, s) for t, p, s in rows} == {
        (t, 16, 2) for t in ("subscription", "folder_resource", "job_resource", "point", "host_local")
    }


@pytest.mark.django_db
def test_primary_keys_are_the_pk_columns_with_cuebots_names():
    rows = query(
        "SELECT tc.table_name, kcu.column_name, tc.constraint_name FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name) "
        "WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_name = ANY(%s)",
        [list(DOCUMENTED)],
    )
    # job_history's key is its job's (Cuebot's V1).
    assert {table: column for table, column, _ in rows} == {
        table: "pk_job" if table == "job_history" else f"pk_{table}" for table in DOCUMENTED
    }
    assert all(name.startswith("c_") for _, _, name in rows), "Cuebot's names, never Django's"


@pytest.mark.django_db
def test_foreign_keys_are_exactly_those_of_the_document():
    documented = {tuple(re.fullmatch(r"(\w+)\.(\w+) -> (\w+)", line).groups()) for line in block("foreign-keys")}
    rows = query(
        "SELECT tc.table_name, kcu.column_name, ccu.table_name FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name) "
        "JOIN information_schema.constraint_column_usage ccu USING (constraint_schema, constraint_name) "
        "WHERE tc.constraint_type = 'FOREIGN KEY' AND tc.table_name = ANY(%s)",
        [list(DOCUMENTED)],
    )
    assert set(rows) == documented


@pytest.mark.django_db
def test_unique_constraints_are_exactly_those_of_the_document():
    """Read from pg_index, so a bare unique index counts as much as a constraint."""
    documented = set()
    for line in block("unique"):
        table, columns = re.fullmatch(r"(\w+)\((.*)\)", line).groups()
        documented.add((table, tuple(sorted(columns.split(", ")))))
    rows = query(
        "SELECT t.relname, array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
        "JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indisunique AND NOT i.indisprimary AND n.nspname = 'public' AND t.relname = ANY(%s) GROUP BY i.indexrelid, t.relname",
        [list(DOCUMENTED)],
    )
    assert {(table, tuple(columns)) for table, columns in rows} == documented


@pytest.mark.django_db
def test_triggers_are_exactly_those_of_the_document():
    documented = set()
    for line in block("triggers"):
        table, timing, event, name = re.match(r"(\w+) (before|after) (insert|update|delete) (\w+):", line).groups()
        documented.add((table, name, timing.upper(), event.upper()))
    rows = query(
        "SELECT event_object_table, trigger_name, action_timing, event_manipulation FROM information_schema.triggers "
        "WHERE trigger_schema = 'public' AND event_object_table = ANY(%s)",
        [list(DOCUMENTED)],
    )
    assert set(rows) == documented


@pytest.mark.django_db
def test_release_and_reseed_paths_are_indexed():
    needed = {
        ("proc", "pk_host"),
        ("proc", "pk_job"),
        ("proc", "pk_show"),
        ("job", "pk_show"),
        ("host", "pk_alloc"),
        ("layer", "pk_job"),
        ("folder_resource", "pk_folder"),
        ("frame", "pk_job"),
    }
    rows = query(
        "SELECT t.relname, a.attname FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid "
        "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0] WHERE t.relname = ANY(%s)",
        [list({table for table, _ in needed})],
    )
    assert needed <= set(rows)


@pytest.mark.django_db
def test_a_row_inserted_without_defaulted_columns_gets_cuebots_defaults():
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO show (pk_show, str_name) VALUES ('00000000-0000-0000-0000-000000000001', 'raw')")
    assert query("SELECT b_scheduler_managed, b_active, int_default_max_cores FROM show WHERE str_name = 'raw'") == [
        (False, True, 10000)
    ]
