"""The documented role is the tested role: the grants docs/attaching.md tells a DBA to give
are shows.attach.grant_statements, which accounting.E004 checks, and the whole suite runs as
a role holding exactly them (tests/service_role.py). Here: that it does, that the page and
the checks agree, and that a revoked grant is named by the check and fails the path that
needs it."""

import re
from pathlib import Path

import pytest
from django.db import connection

from accounting.models import HostLocal, Proc
from accounting.release.unbook import unbook_proc, unbook_procs
from shows.attach import ROW_LOCKS, WRITES, expected_columns, grant_statements, schema_problems
from shows.models import Job
from tests.farms import build_farm
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "attaching.md"


def documented_grants() -> list[list[str]]:
    """The GRANT statements of each SQL block of the page, in order: the observer's, the writer's."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)
    statements = [[" ".join(s.split()) + ";" for s in block.split(";") if s.strip()] for block in blocks]
    return [[s for s in block if s.startswith("GRANT")] for block in statements]


def revoke_row_lock() -> None:
    """Take the row-lock grant from the suite's role for this test (its transaction rolls back)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        role = cursor.fetchone()[0]
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute(f"REVOKE UPDATE ({ROW_LOCKS['proc']}) ON proc FROM {role}")


def test_the_page_lists_exactly_the_grants_the_checks_verify():
    assert documented_grants() == [
        grant_statements(role="cuebot_acct", writes=False),
        grant_statements(role="cuebot_acct"),
    ]


def test_the_suite_runs_as_a_role_holding_exactly_the_documented_grants():
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user")
        assert cursor.fetchone() == (False, False, False)
        cursor.execute(
            "SELECT table_name, privilege_type FROM information_schema.role_table_grants "
            "WHERE grantee = current_user AND table_name = ANY(%s)",
            [list(expected_columns())],
        )
        held = sorted(cursor.fetchall())
        cursor.execute(
            "SELECT table_name, column_name, privilege_type FROM information_schema.column_privileges "
            "WHERE grantee = current_user AND table_name = ANY(%s) "
            "AND NOT has_table_privilege(current_user, table_name, privilege_type)",
            [list(expected_columns())],
        )
        column_grants = sorted(cursor.fetchall())
    assert held == sorted(
        (table, privilege) for table in expected_columns() for privilege in WRITES.get(table, ("SELECT",))
    )
    assert column_grants == sorted((table, column, "UPDATE") for table, column in ROW_LOCKS.items())
    with as_cuebot(), connection.cursor() as cursor:  # and as_cuebot is the superuser, for the fixtures
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert cursor.fetchone() == (True,)


def test_the_checks_find_no_privilege_missing_under_the_documented_role():
    assert [p.message for p in schema_problems() if p.id == "accounting.E004"] == []


def test_the_checks_name_the_row_lock_when_its_grant_is_revoked():
    revoke_row_lock()
    messages = [p.message for p in schema_problems() if p.id == "accounting.E004"]
    assert messages == [
        "the database role may not lock rows of proc (a batch release locks them in key order, "
        "and a row lock needs UPDATE on one of its columns)"
    ]


@pytest.mark.parametrize("managed", [True, False], ids=["scheduler-managed", "cuebot-managed"])
def test_single_batch_and_local_releases_work_under_the_documented_role(managed, django_capture_on_commit_callbacks):
    farm = build_farm(managed=managed)
    procs = [farm.add_proc(cores=150), farm.add_proc(cores=200, gpus=1), farm.add_proc(local=True), farm.add_proc()]
    with as_cuebot():  # its local reservation is deleted too
        Job.objects.filter(pk=farm.job.pk).update(str_state="FINISHED")
    with django_capture_on_commit_callbacks(execute=True):
        assert unbook_proc(proc_id=procs[0].id) is not None
        assert None not in unbook_procs(proc_ids=[p.id for p in procs[1:]])
    assert not Proc.objects.filter(pk__in=[p.id for p in procs]).exists()
    assert not HostLocal.objects.filter(job=farm.job).exists()


def test_a_batch_release_is_refused_without_the_row_lock_grant(farm):
    procs = [farm.add_proc(), farm.add_proc()]
    revoke_row_lock()
    with pytest.raises(Exception, match="permission denied for table proc"):
        unbook_procs(proc_ids=[p.id for p in procs])
