"""Attaching to a site's Cuebot database: what must be there, and what `migrate` may do.

With OPENCUE_TABLES=existing the tables belong to Cuebot. Before anything runs, the
project verifies every table and column its models name (the columns it reads or
writes), their type family, the privileges its role needs and the Cuebot functions it
calls, and names precisely what is missing (system checks accounting.E001-E005, also run
at start-up).

With OPENCUE_TABLES=create, `migrate` refuses a database that already holds Cuebot's
tables it did not create: running the project's DDL there would fail half-way, or worse.
"""

from dataclasses import dataclass

from django.apps import apps
from django.conf import settings
from django.core.management import CommandError
from django.db import connection, models
from django.db.migrations.recorder import MigrationRecorder

from infra.cuebot_database import cuebot_connection
from infra.startup import CuebotSchemaIncomplete
from infra.writes import writes_on
from shows.cuebot_schema import HISTORY_TABLES
from shows.models import CuebotTable

CUEBOT_TABLES_MIGRATION = ("shows", "0001_cuebot_tables")

INTEGERS = frozenset({"smallint", "integer", "bigint"})
TYPE_FAMILIES = {
    "CharField": frozenset({"character varying", "text", "character"}),
    "SmallIntegerField": INTEGERS,
    "IntegerField": INTEGERS,
    "BigIntegerField": INTEGERS,
    "BooleanField": frozenset({"boolean"}),
    "DecimalField": frozenset({"numeric"}),
    "DateTimeField": frozenset({"timestamp with time zone", "timestamp without time zone"}),
}

# Why a column can be missing on a real Cuebot database, where that is known.
COLUMN_ORIGINS = {
    ("show", "b_scheduler_managed"): "Cuebot's migration V45 (show ownership for the Rust scheduler) is not applied",
}
UNKNOWN_ORIGIN = "this Cuebot schema differs from the one the project supports (docs/cuebot-schema.md)"

# What the service's role does to each table: releases delete procs and give hosts and
# local reservations back (and delete a finished job's reservation, as Cuebot does); limits,
# recomputes and the ownership toggle update the accounting tables and show. The demo and
# the simulator insert, but never on a site.
WRITES = {
    "proc": ("SELECT", "DELETE"),
    "host": ("SELECT", "UPDATE"),
    "host_local": ("SELECT", "UPDATE", "DELETE"),
    "show": ("SELECT", "UPDATE"),
    "subscription": ("SELECT", "UPDATE"),
    "folder_resource": ("SELECT", "UPDATE"),
    "job_resource": ("SELECT", "UPDATE"),
    "layer_resource": ("SELECT", "UPDATE"),
    "point": ("SELECT", "UPDATE"),
}


# Tables whose rows the release locks in primary-key order (SELECT ... FOR UPDATE) before it
# deletes them, so that concurrent batches never deadlock: PostgreSQL allows a row lock only
# to a role with UPDATE on at least one column. The grant names one statistics column, which
# the service never writes.
ROW_LOCKS = {"proc": "int_virt_max_used"}


def grant_statements(*, role: str, schema: str = "public", writes: bool = True) -> list[str]:
    """The grants docs/attaching.md tells a DBA to give the service's role, from the lists the
    checks (accounting.E004) verify: the one source of both, held to the page by a test. With
    `writes` off (ACCOUNTING_WRITES=off, the observer) SELECT on every table the project reads,
    and nothing else of Cuebot's."""
    tables = sorted(expected_columns())
    read_only = [table for table in tables if not writes or table not in WRITES]
    statements = [f"GRANT USAGE ON SCHEMA {schema} TO {role};", f"GRANT SELECT ON {', '.join(read_only)} TO {role};"]
    if not writes:
        return statements
    by_privileges: dict[tuple[str, ...], list[str]] = {}
    for table in tables:
        if table in WRITES:
            by_privileges.setdefault(WRITES[table], []).append(table)
    for privileges, granted in by_privileges.items():
        statements.append(f"GRANT {', '.join(privileges)} ON {', '.join(granted)} TO {role};")
    for table, column in sorted(ROW_LOCKS.items()):
        statements.append(f"GRANT UPDATE ({column}) ON {table} TO {role};")
    return statements


def privileges_on(table: str, *, writes: bool) -> tuple[str, ...]:
    """What the role needs on one of Cuebot's tables, writing or observing."""
    return WRITES.get(table, ("SELECT",)) if writes else ("SELECT",)


def writer_grant(*tables: str) -> str:
    """What a write to these tables needs beyond the observer's SELECT, as a refusal names it:
    "UPDATE on subscription"; "DELETE on proc; UPDATE on host, point; UPDATE (int_virt_max_used) on proc"."""
    by_privileges: dict[str, list[str]] = {}
    for table in tables:
        by_privileges.setdefault(", ".join(p for p in WRITES[table] if p != "SELECT"), []).append(table)
    parts = [f"{privileges} on {', '.join(granted)}" for privileges, granted in by_privileges.items()]
    parts += [f"UPDATE ({column}) on {table}" for table, column in sorted(ROW_LOCKS.items()) if table in tables]
    return "; ".join(parts)


# What the write faces change, for their refusals: a repair the five accounting tables, a release
# everything but show (whose flag only the toggle writes).
ACCOUNTING_TABLES = tuple(table for table in WRITES if table not in ("proc", "host", "host_local", "show"))
RELEASE_TABLES = tuple(table for table in WRITES if table != "show")


# Cuebot's SQL functions the project calls, and what for.
FUNCTIONS = {
    "tier(numeric, numeric)": "recalculate_subs reads a subscription's tier with it to find rows never recomputed",
}


@dataclass(frozen=True)
class SchemaProblem:
    id: str
    message: str
    hint: str


def cuebot_models() -> list[type[models.Model]]:
    return [model for model in apps.get_models() if issubclass(model, CuebotTable)]


def expected_columns() -> dict[str, dict[str, str]]:
    """table -> column -> Django internal type, for every column a Cuebot model names."""
    tables: dict[str, dict[str, str]] = {}
    for model in cuebot_models():
        columns = tables.setdefault(model._meta.db_table, {})
        for field in model._meta.concrete_fields:
            # A relation's column holds its target's key, so it has that field's type.
            kind = field.target_field.get_internal_type() if field.is_relation else field.get_internal_type()  # type: ignore[attr-defined]
            columns[field.column] = kind
    return tables


def schema_problems() -> list[SchemaProblem]:
    """What a site's database lacks for this project, read from the catalogue (read-only).
    Cuebot's history tables are left to `history_grant_problem`: only the usage report reads
    them, so a site that has not granted them yet keeps the rest of the service."""
    expected = {table: columns for table, columns in expected_columns().items() if table not in HISTORY_TABLES}
    writes = writes_on()
    with cuebot_connection().cursor() as cursor:
        cursor.execute(
            "SELECT t.name, a.attname, format_type(a.atttypid, NULL) FROM unnest(%s::text[]) AS t(name) "
            "JOIN pg_attribute a ON a.attrelid = to_regclass(t.name) AND a.attnum > 0 AND NOT a.attisdropped",
            [list(expected)],
        )
        found: dict[str, dict[str, str]] = {}
        for table, column, kind in cursor.fetchall():
            found.setdefault(table, {})[column] = kind
        problems = _column_problems(expected=expected, found=found)
        cursor.execute("SELECT f FROM unnest(%s::text[]) AS f WHERE to_regprocedure(f) IS NULL", [list(FUNCTIONS)])
        problems += [
            SchemaProblem("accounting.E005", f"Cuebot's function {f} is missing: {FUNCTIONS[f]}", UNKNOWN_ORIGIN)
            for (f,) in cursor.fetchall()
        ]
        return problems + _grant_problems(cursor=cursor, tables=list(expected), writes=writes)


def _column_problems(*, expected: dict[str, dict[str, str]], found: dict[str, dict[str, str]]) -> list[SchemaProblem]:
    problems = []
    for table, columns in sorted(expected.items()):
        if table not in found:
            problems.append(
                SchemaProblem(
                    "accounting.E001",
                    f"Cuebot table '{table}' is missing (searched: {search_path()})",
                    "Point DATABASE_URL at the Cuebot database, or CUEBOT_SCHEMA at the schema that holds its tables.",
                )
            )
            continue
        for column, kind in sorted(columns.items()):
            actual = found[table].get(column)
            if actual is None:
                why = COLUMN_ORIGINS.get((table, column), UNKNOWN_ORIGIN)
                problems.append(
                    SchemaProblem(
                        "accounting.E002",
                        f"column {table}.{column} is missing: {why}",
                        "Bring the Cuebot database up to date with Cuebot's own migrations; this project never alters it.",
                    )
                )
            elif actual not in TYPE_FAMILIES[kind]:
                families = ", ".join(sorted(TYPE_FAMILIES[kind]))
                problems.append(
                    SchemaProblem(
                        "accounting.E003",
                        f"column {table}.{column} is {actual}; the project reads and writes it as one of {families}",
                        UNKNOWN_ORIGIN,
                    )
                )
    return problems


def _grant_problems(*, cursor, tables: list[str], writes: bool) -> list[SchemaProblem]:
    """The privileges the role lacks on these tables, and the row locks a writer cannot take."""
    needed = [(table, privilege) for table in tables for privilege in privileges_on(table, writes=writes)]
    cursor.execute(
        "SELECT t.name, t.privilege FROM unnest(%s::text[], %s::text[]) AS t(name, privilege) "
        "WHERE to_regclass(t.name) IS NOT NULL AND NOT has_table_privilege(t.name, t.privilege)",
        [[table for table, _ in needed], [privilege for _, privilege in needed]],
    )
    problems = [
        SchemaProblem(
            "accounting.E004",
            f"the database role may not {privilege} on {table}",
            f"GRANT {', '.join(privileges_on(table, writes=writes))} ON {table} TO the service's role "
            f"(see docs/attaching.md{'' if writes else ': the observer, ACCOUNTING_WRITES=off'}).",
        )
        for table, privilege in sorted(set(cursor.fetchall()))
    ]
    if not writes:  # an observer locks no row
        return problems
    cursor.execute(
        "SELECT t FROM unnest(%s::text[]) AS t WHERE to_regclass(t) IS NOT NULL "
        "AND NOT has_any_column_privilege(t, 'UPDATE')",
        [list(ROW_LOCKS)],
    )
    return problems + [
        SchemaProblem(
            "accounting.E004",
            f"the database role may not lock rows of {table} (a batch release locks them in key order, "
            "and a row lock needs UPDATE on one of its columns)",
            f"GRANT UPDATE ({ROW_LOCKS[table]}) ON {table} TO the service's role (see docs/attaching.md).",
        )
        for (table,) in cursor.fetchall()
    ]


def history_grant_problem(*, cursor) -> str | None:
    """One line naming the GRANT when the role may not read Cuebot's history tables (the usage
    report's sources), on the cursor the report reads them with; None when it may."""
    cursor.execute(
        "SELECT t FROM unnest(%s::text[]) AS t WHERE to_regclass(t) IS NULL OR NOT has_table_privilege(t, 'SELECT')",
        [list(HISTORY_TABLES)],
    )
    missing = sorted(table for (table,) in cursor.fetchall())
    if not missing:
        return None
    return (
        f"the database role may not read Cuebot's history ({', '.join(missing)}): "
        f"GRANT SELECT ON {', '.join(sorted(HISTORY_TABLES))} TO the service's role (see docs/attaching.md)"
    )


def search_path() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW search_path")
        return cursor.fetchone()[0]


def ensure_own_schema() -> None:
    """Create OWN_TABLES_SCHEMA if it is set and absent (a DBA may have made it already)."""
    schema = settings.OWN_TABLES_SCHEMA
    if not schema:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE SCHEMA "{schema}"')


def refuse_foreign_cuebot_tables(*, plan: list) -> None:
    """In `create` mode, stop before a migration would run Cuebot's DDL over existing tables."""
    if settings.OPENCUE_TABLES != "create":
        return
    creates_tables = any(
        (migration.app_label, migration.name) == CUEBOT_TABLES_MIGRATION and not backwards
        for migration, backwards in plan
    )
    if not creates_tables:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('show') IS NOT NULL")
        if not cursor.fetchone()[0]:
            return
    if ("shows", "0001_initial") in MigrationRecorder(connection).applied_migrations():
        raise CommandError(
            "this database was built by an earlier cuebot-acct, whose tables were not shaped like Cuebot's; "
            "a demo database cannot be upgraded in place: drop it (dropdb) and migrate again (nothing was changed)"
        )
    raise CommandError(
        "this database already holds Cuebot's tables (show, proc...) that cuebot-acct did not create; "
        "set OPENCUE_TABLES=existing to attach to them (nothing was changed)"
    )


def check_cuebot_schema() -> None:
    """Refuse to start (one line) on a site's database that lacks what the project uses."""
    if settings.OPENCUE_TABLES != "existing":
        return
    problems = schema_problems()
    if problems:
        raise CuebotSchemaIncomplete(
            "the Cuebot database does not have what cuebot-acct uses (OPENCUE_TABLES=existing): "
            + "; ".join(problem.message for problem in problems)
        )
