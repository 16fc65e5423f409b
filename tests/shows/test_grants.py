"""The documented role is the tested role: the grants docs/attaching.md tells a DBA to give
are shows.attach.grant_statements, which accounting.E004 checks, and the release paths that
need each one work under exactly them (and a batch fails without the row-lock grant)."""
import re
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connection

from accounting.models import HostLocal, Proc
from accounting.release.unbook import unbook_proc, unbook_procs
from shows.attach import ROW_LOCKS, grant_statements, schema_problems
from shows.models import Job
from tests.farms import build_farm

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "attaching.md"
ROLE = "cuebot_acct_documented"


def documented_grants() -> list[str]:
    block = re.search(r"```sql\n(.*?)```", DOC.read_text(), re.S).group(1)
    statements = [" ".join(s.split()) + ";" for s in block.split(";") if s.strip()]
    return [s for s in statements if s.startswith("GRANT")]


@contextmanager
def documented_role(*, without_row_lock: bool = False):
    """The database work inside runs as a role holding exactly the documented grants; the
    role and its grants live in the test's transaction and roll back with it."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {ROLE} NOLOGIN")
        for statement in grant_statements(role=ROLE):
            cursor.execute(statement)
        if without_row_lock:
            cursor.execute(f"REVOKE UPDATE ({ROW_LOCKS['proc']}) ON proc FROM {ROLE}")
        cursor.execute(f"SET LOCAL ROLE {ROLE}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")


def test_the_page_lists_exactly_the_grants_the_checks_verify():
    assert documented_grants() == grant_statements(role="cuebot_acct")


def test_the_checks_find_no_privilege_missing_under_the_documented_role():
    with documented_role():
        assert [p.message for p in schema_problems() if p.id == "accounting.E004"] == []


def test_the_checks_name_the_row_lock_when_its_grant_is_revoked():
    with documented_role(without_row_lock=True):
        messages = [p.message for p in schema_problems() if p.id == "accounting.E004"]
    assert messages == ["the database role may not lock rows of proc (a batch release locks them in key order, "
                        "and a row lock needs UPDATE on one of its columns)"]


@pytest.mark.parametrize("managed", [True, False], ids=["scheduler-managed", "cuebot-managed"])
def test_single_batch_and_local_releases_work_under_the_documented_role(managed, django_capture_on_commit_callbacks):
    farm = build_farm(managed=managed)
    procs = [farm.add_proc(cores=150), farm.add_proc(cores=200, gpus=1), farm.add_proc(local=True), farm.add_proc()]
    Job.objects.filter(pk=farm.job.pk).update(str_state="FINISHED")  # its local reservation is deleted too
    with documented_role(), django_capture_on_commit_callbacks(execute=True):
        assert unbook_proc(proc_id=procs[0].id) is not None
        assert None not in unbook_procs(proc_ids=[p.id for p in procs[1:]])
    assert not Proc.objects.filter(pk__in=[p.id for p in procs]).exists()
    assert not HostLocal.objects.filter(job=farm.job).exists()


def test_a_batch_release_is_refused_without_the_row_lock_grant(farm):
    procs = [farm.add_proc(), farm.add_proc()]
    with documented_role(without_row_lock=True), pytest.raises(Exception, match="permission denied for table proc"):
        unbook_procs(proc_ids=[p.id for p in procs])
