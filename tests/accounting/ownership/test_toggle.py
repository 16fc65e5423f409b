import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.ownership import switching
from accounting.ownership.toggle import set_scheduler_managed
from shows.models import Show
from tests.accounting.pg import accounting_mismatches, drift_all_tables

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


def test_switch_back_to_cuebot_leaves_the_five_tables_equal_to_sum_proc(farm, seeded, django_capture_on_commit_callbacks):
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
