"""The migrated schema matches shared/docs/opencue-schema.md, read back from information_schema."""
import pytest
from django.db import connection

V36 = ("character varying", 36)
BOOL, INT, BIGINT, TSTZ = ("boolean", None), ("integer", None), ("bigint", None), ("timestamp with time zone", None)
TIER = ("numeric", None)


def varchar(n: int) -> tuple:
    return ("character varying", n)


# table -> column -> (type, length, nullable, default as PostgreSQL prints it or None)
EXPECTED = {
    "show": {
        "pk_show": (*V36, False, None), "str_name": (*varchar(512), False, None),
        "b_active": (*BOOL, False, "true"), "b_paused": (*BOOL, False, "false"),
        "b_booking_enabled": (*BOOL, False, "true"), "b_dispatch_enabled": (*BOOL, False, "true"),
        "int_default_min_cores": (*INT, False, "100"), "int_default_max_cores": (*INT, False, "10000"),
        "int_default_min_gpus": (*INT, False, "100"), "int_default_max_gpus": (*INT, False, "100000"),
        "b_scheduler_managed": (*BOOL, False, "false"),
    },
    "facility": {"pk_facility": (*V36, False, None), "str_name": (*varchar(36), False, None)},
    "alloc": {
        "pk_alloc": (*V36, False, None), "str_name": (*varchar(36), False, None), "pk_facility": (*V36, False, None),
        "str_tag": (*varchar(24), False, None), "b_default": (*BOOL, False, "false"),
        "b_billable": (*BOOL, False, "true"), "b_enabled": (*BOOL, False, "true"),
    },
    "subscription": {
        "pk_subscription": (*V36, False, None), "pk_alloc": (*V36, False, None), "pk_show": (*V36, False, None),
        "int_size": (*BIGINT, False, "0"), "int_burst": (*BIGINT, False, "0"), "int_cores": (*INT, False, "0"),
        "int_gpus": (*INT, False, "0"), "float_tier": (*TIER, False, "0"),
    },
    "dept": {"pk_dept": (*V36, False, None), "str_name": (*varchar(36), False, None), "b_default": (*BOOL, False, "false")},
    "folder": {
        "pk_folder": (*V36, False, None), "pk_parent_folder": (*V36, True, None), "pk_show": (*V36, False, None),
        "pk_dept": (*V36, False, None), "str_name": (*varchar(36), False, None), "int_priority": (*BIGINT, False, "1"),
        "b_default": (*BOOL, False, "false"), "int_job_min_cores": (*INT, False, "'-1'::integer"),
        "int_job_max_cores": (*INT, False, "'-1'::integer"), "int_job_priority": (*INT, False, "'-1'::integer"),
    },
    "folder_resource": {
        "pk_folder_resource": (*V36, False, None), "pk_folder": (*V36, False, None), "int_cores": (*INT, False, "0"),
        "int_min_cores": (*INT, False, "0"), "int_max_cores": (*INT, False, "'-1'::integer"), "int_gpus": (*INT, False, "0"),
        "int_min_gpus": (*INT, False, "0"), "int_max_gpus": (*INT, False, "'-1'::integer"), "float_tier": (*TIER, False, "0"),
    },
    "job": {
        "pk_job": (*V36, False, None), "pk_folder": (*V36, False, None), "pk_show": (*V36, False, None),
        "pk_dept": (*V36, False, None), "pk_facility": (*V36, False, None), "str_name": (*varchar(255), False, None),
        "str_shot": (*varchar(64), False, None), "str_user": (*varchar(32), False, None),
        "str_state": (*varchar(16), False, None), "b_paused": (*BOOL, False, "false"),
        "int_min_cores": (*INT, False, "100"), "int_max_cores": (*INT, False, "20000"), "int_min_gpus": (*INT, False, "0"),
        "int_max_gpus": (*INT, False, "100000"), "ts_started": (*TSTZ, False, "statement_timestamp()"),
    },
    "job_resource": {
        "pk_job_resource": (*V36, False, None), "pk_job": (*V36, False, None), "int_cores": (*BIGINT, False, "0"),
        "int_gpus": (*INT, False, "0"), "int_min_cores": (*INT, False, "100"), "int_max_cores": (*INT, False, "10000"),
        "int_min_gpus": (*INT, False, "0"), "int_max_gpus": (*INT, False, "100"), "int_priority": (*INT, False, "1"),
        "int_local_cores": (*INT, False, "0"), "int_local_gpus": (*INT, False, "0"), "float_tier": (*TIER, False, "0"),
    },
    "layer": {
        "pk_layer": (*V36, False, None), "pk_job": (*V36, False, None), "str_name": (*varchar(256), False, None),
        "str_type": (*varchar(16), False, None), "int_cores_min": (*BIGINT, False, "100"), "int_cores_max": (*INT, False, "0"),
        "int_gpus_min": (*BIGINT, False, "0"), "int_gpus_max": (*BIGINT, False, "0"), "int_mem_min": (*BIGINT, False, None),
    },
    "layer_resource": {
        "pk_layer_resource": (*V36, False, None), "pk_layer": (*V36, False, None), "pk_job": (*V36, False, None),
        "int_cores": (*BIGINT, False, "0"), "int_gpus": (*INT, False, "0"),
    },
    "point": {
        "pk_point": (*V36, False, None), "pk_dept": (*V36, False, None), "pk_show": (*V36, False, None),
        "int_cores": (*INT, False, "0"), "int_gpus": (*INT, False, "0"), "int_min_cores": (*INT, False, "0"),
        "int_min_gpus": (*INT, False, "0"), "b_managed": (*BOOL, False, "false"), "float_tier": (*TIER, False, "0"),
        "ts_updated": (*TSTZ, False, "statement_timestamp()"),
    },
    "host": {
        "pk_host": (*V36, False, None), "pk_alloc": (*V36, False, None), "str_name": (*varchar(45), False, None),
        "str_lock_state": (*varchar(36), False, None), "int_cores": (*BIGINT, False, None),
        "int_cores_idle": (*BIGINT, False, None), "int_mem": (*BIGINT, False, None), "int_mem_idle": (*BIGINT, False, None),
        "int_gpus": (*BIGINT, False, "0"), "int_gpus_idle": (*BIGINT, False, "0"), "int_gpu_mem": (*BIGINT, False, "0"),
        "int_gpu_mem_idle": (*BIGINT, False, "0"),
    },
    "proc": {
        "pk_proc": (*V36, False, None), "pk_host": (*V36, False, None), "pk_job": (*V36, True, None),
        "pk_show": (*V36, True, None), "pk_layer": (*V36, True, None), "pk_frame": (*V36, True, None),
        "int_cores_reserved": (*BIGINT, False, None), "int_gpus_reserved": (*INT, False, "0"),
        "int_mem_reserved": (*BIGINT, False, None), "int_gpu_mem_reserved": (*BIGINT, False, "0"),
        "b_local": (*BOOL, False, "false"), "b_unbooked": (*BOOL, False, "false"),
        "ts_booked": (*TSTZ, False, "statement_timestamp()"), "ts_ping": (*TSTZ, False, "statement_timestamp()"),
    },
}

# (table, column) -> referenced table, exactly the foreign keys the document marks.
FOREIGN_KEYS = {
    ("alloc", "pk_facility"): "facility",
    ("subscription", "pk_alloc"): "alloc", ("subscription", "pk_show"): "show",
    ("folder", "pk_show"): "show", ("folder", "pk_dept"): "dept",
    ("folder_resource", "pk_folder"): "folder",
    ("job", "pk_folder"): "folder", ("job", "pk_show"): "show", ("job", "pk_dept"): "dept", ("job", "pk_facility"): "facility",
    ("job_resource", "pk_job"): "job",
    ("layer", "pk_job"): "job",
    ("layer_resource", "pk_layer"): "layer", ("layer_resource", "pk_job"): "job",
    ("point", "pk_dept"): "dept", ("point", "pk_show"): "show",
    ("host", "pk_alloc"): "alloc",
    ("proc", "pk_host"): "host",
}

UNIQUE = {
    ("show", ("str_name",)), ("facility", ("str_name",)), ("alloc", ("str_name",)), ("dept", ("str_name",)),
    ("subscription", ("pk_alloc", "pk_show")), ("folder_resource", ("pk_folder",)), ("job", ("str_name",)),
    ("job_resource", ("pk_job",)), ("layer", ("pk_job", "str_name")), ("layer_resource", ("pk_layer",)),
    ("point", ("pk_dept", "pk_show")), ("host", ("str_name",)),
}

INDEXED = {("proc", "pk_host"), ("proc", "pk_job"), ("proc", "pk_show"), ("job", "pk_show"), ("host", "pk_alloc"), ("layer", "pk_job")}


def query(sql: str, params=None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


@pytest.mark.django_db
@pytest.mark.parametrize("table", sorted(EXPECTED))
def test_columns_match_the_schema_document(table):
    rows = query(
        "SELECT column_name, data_type, character_maximum_length, is_nullable = 'YES', column_default "
        "FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s",
        [table],
    )
    actual = {name: (kind, length, nullable, default) for name, kind, length, nullable, default in rows}
    assert actual == EXPECTED[table]


@pytest.mark.django_db
def test_numeric_tier_columns_are_16_2():
    rows = query(
        "SELECT table_name, numeric_precision, numeric_scale FROM information_schema.columns "
        "WHERE table_schema = 'public' AND column_name = 'float_tier'"
    )
    assert {(t, p, s) for t, p, s in rows} == {(t, 16, 2) for t in ("subscription", "folder_resource", "job_resource", "point")}


@pytest.mark.django_db
def test_primary_keys_are_the_pk_columns():
    rows = query(
        "SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name) "
        "WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_name = ANY(%s)",
        [list(EXPECTED)],
    )
    assert dict(rows) == {table: f"pk_{table}" for table in EXPECTED}


@pytest.mark.django_db
def test_foreign_keys_are_exactly_those_of_the_document():
    rows = query(
        "SELECT tc.table_name, kcu.column_name, ccu.table_name FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name) "
        "JOIN information_schema.constraint_column_usage ccu USING (constraint_schema, constraint_name) "
        "WHERE tc.constraint_type = 'FOREIGN KEY' AND tc.table_name = ANY(%s)",
        [list(EXPECTED)],
    )
    assert {(t, c): ref for t, c, ref in rows} == FOREIGN_KEYS


@pytest.mark.django_db
def test_unique_constraints():
    rows = query(
        "SELECT tc.table_name, tc.constraint_name, array_agg(kcu.column_name::text ORDER BY kcu.column_name) "
        "FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name) "
        "WHERE tc.constraint_type = 'UNIQUE' AND tc.table_name = ANY(%s) GROUP BY 1, 2",
        [list(EXPECTED)],
    )
    assert {(table, tuple(columns)) for table, _, columns in rows} == UNIQUE


@pytest.mark.django_db
def test_release_and_reseed_paths_are_indexed():
    rows = query(
        "SELECT t.relname, a.attname FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid "
        "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0] WHERE t.relname = ANY(%s)",
        [list({table for table, _ in INDEXED})],
    )
    assert INDEXED <= set(rows)


@pytest.mark.django_db
def test_a_row_inserted_without_defaulted_columns_gets_opencues_defaults():
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO show (pk_show, str_name) VALUES ('00000000-0000-0000-0000-000000000001', 'raw')")
    assert query("SELECT b_scheduler_managed, b_active, int_default_max_cores FROM show WHERE str_name = 'raw'") == [(False, True, 10000)]
