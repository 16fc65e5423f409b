import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import Schedule
from prometheus_client import REGISTRY

from accounting.ownership import switching
from accounting.ownership.toggle import set_scheduler_managed
from shows.models import Show
from shows.selectors import is_scheduler_managed, ownership
from tests.accounting.pg import accounting_mismatches, drift_all_tables
from tests.processes import closed_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(monkeypatch):
    """Record seedings instead of running them: the real seeding comes from the reconcile work."""
    calls = []
    monkeypatch.setattr(switching, "seed_show", lambda *, show_id: calls.append(show_id))
    return calls


def test_toggle_is_one_update_and_returns_old_and_new(cuebot_farm, seeded, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False), CaptureQueriesContext(connection) as queries:
        assert set_scheduler_managed(show=cuebot_farm.show, managed=True) == (False, True)
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 1 and '"show"' in updates[0]
    assert Show.objects.get(pk=cuebot_farm.show.pk).b_scheduler_managed is True


def test_switch_to_scheduler_seeds_after_commit_only(cuebot_farm, seeded, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        set_scheduler_managed(show=cuebot_farm.show, managed=True)
    assert seeded == []  # nothing reaches Redis before the commit
    for callback in callbacks:
        callback()
    assert seeded == [cuebot_farm.show.id]


def test_setting_the_value_it_already_has_changes_nothing(farm, seeded, django_capture_on_commit_callbacks):
    drift_all_tables(show_id=farm.show.id)
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as queries:
        assert set_scheduler_managed(show=farm.show, managed=True) == (True, True)
    assert not [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("UPDATE")]
    assert seeded == []


def test_switch_back_to_cuebot_leaves_the_five_tables_equal_to_sum_proc(
    farm, seeded, django_capture_on_commit_callbacks
):
    farm.add_proc(cores=250, gpus=1)
    farm.add_proc(cores=100)
    farm.add_proc(cores=300, local=True)
    job, layer = farm.add_job()
    farm.add_proc(cores=150, layer=layer)
    drift_all_tables(show_id=farm.show.id)  # the scheduler's recompute had not caught up
    assert accounting_mismatches(show_id=farm.show.id)
    with django_capture_on_commit_callbacks(execute=True):
        assert set_scheduler_managed(show=farm.show, managed=False) == (True, False)
    assert accounting_mismatches(show_id=farm.show.id) == []
    assert seeded == []


# The Maestro era: the flag only says that Maestro plans the show; Cuebot keeps its five tables either way.

CUEBOT_ROWS = (
    "subscription",
    "folder_resource",
    "job_resource",
    "layer_resource",
    "point",
    "proc",
    "host",
    "host_local",
)


@pytest.fixture
def maestro(settings, fresh_accounting_client):
    """Maestro era, with the accounting Redis gone: any call to it would fail the toggle or log a failure."""
    settings.ACCOUNTING_SCHEDULER = "maestro"
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"


def cuebot_rows() -> dict[str, list]:
    """Every row of the five tables, proc, host and host_local, and every show with its flag left out."""
    with connection.cursor() as cursor:
        rows = {}
        for table in CUEBOT_ROWS:
            cursor.execute(f"SELECT to_jsonb(t)::text FROM {table} t ORDER BY 1")
            rows[table] = cursor.fetchall()
        cursor.execute("SELECT (to_jsonb(s) - 'b_scheduler_managed')::text FROM show s ORDER BY 1")
        rows["show"] = cursor.fetchall()
    return rows


def test_maestro_era_a_flip_and_back_changes_the_flag_and_nothing_else(
    cuebot_farm, maestro, django_capture_on_commit_callbacks
):
    cuebot_farm.add_proc(cores=250, gpus=1)
    cuebot_farm.add_proc(cores=300, local=True)
    # Rows that differ from SUM(proc): a recompute or a settling pass at the switch would show.
    drift_all_tables(show_id=cuebot_farm.show.id)
    before = cuebot_rows()
    failures = REGISTRY.get_sample_value("cuebot_acct_switch_seed_failures_total")

    for managed in (True, False):
        with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as queries:
            assert set_scheduler_managed(show=cuebot_farm.show, managed=managed) == (not managed, managed)
        writes = [
            q["sql"]
            for q in queries.captured_queries
            if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT", "DELETE"))
        ]
        assert len(writes) == 1 and writes[0].startswith('UPDATE "show" SET "b_scheduler_managed"')
        assert Show.objects.get(pk=cuebot_farm.show.pk).b_scheduler_managed is managed
        assert is_scheduler_managed(show_id=cuebot_farm.show.id) is managed  # the flag cache, refreshed on commit
        assert cuebot_rows() == before

    assert not Schedule.objects.exists()  # no seeding retry, no settling recompute
    assert ownership(show_id=cuebot_farm.show.id).settling is False
    assert REGISTRY.get_sample_value("cuebot_acct_switch_seed_failures_total") == failures
