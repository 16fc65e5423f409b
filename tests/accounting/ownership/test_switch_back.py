"""Switching a show back to Cuebot: the bookings a scheduler made on the old flag ("stragglers")."""

import ast
from datetime import timedelta

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import Schedule

from accounting.models import JobResource, Subscription
from accounting.ownership import switching
from accounting.ownership.toggle import set_scheduler_managed
from accounting.reconcile.recompute import inserted_below, xid_horizon
from accounting.release.types import Branch
from accounting.release.unbook import unbook_proc
from accounting.tasks import settle_recompute
from shows.models import new_pk
from shows.selectors import ownership
from tests.accounting.pg import accounting_mismatches
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db(transaction=True)  # the switch-back work runs at commit


def straggler(farm, *, cores: int, number: int = 7) -> str:
    """A proc a scheduler booked on the old flag, committed after the switch-back recompute:
    no PG accounting row counts it."""
    proc_id, frame_id = new_pk(), new_pk()
    with as_cuebot(), connection.cursor() as cursor:  # a scheduler's booking
        cursor.execute(
            "INSERT INTO frame (pk_frame, pk_layer, pk_job, str_name, str_state, int_number, int_layer_order) "
            "VALUES (%s, %s, %s, %s, 'RUNNING', %s, 0)",
            [frame_id, farm.layer.id, farm.job.id, f"{frame_id}-late", number],
        )
        cursor.execute(
            "INSERT INTO proc (pk_proc, pk_host, pk_job, pk_show, pk_layer, pk_frame, int_cores_reserved, "
            "int_mem_reserved) VALUES (%s, %s, %s, %s, %s, %s, %s, 1024)",
            [proc_id, farm.host.id, farm.job.id, farm.show.id, farm.layer.id, frame_id, cores],
        )
        cursor.execute("UPDATE host SET int_cores_idle = int_cores_idle - %s WHERE pk_host = %s", [cores, farm.host.id])
    return proc_id


def test_a_switch_back_schedules_a_second_recompute_once_no_stale_booking_can_land(farm):
    before = timezone.now()
    set_scheduler_managed(show=farm.show, managed=False)

    (schedule,) = Schedule.objects.filter(name=f"settle_recompute:{farm.show.id}")
    window = settings.SHOW_FLAG_CACHE_SECONDS + settings.ACCOUNTING_INFLIGHT_TTL_SECONDS
    assert before + timedelta(seconds=window) <= schedule.next_run <= timezone.now() + timedelta(seconds=window)
    assert (schedule.func, ast.literal_eval(schedule.kwargs), schedule.schedule_type) == (
        "accounting.tasks.settle_recompute",
        {"show_id": farm.show.id},
        Schedule.ONCE,
    )


def test_a_straggler_released_while_the_show_settles_leaves_no_row_below_the_truth(farm):
    farm.add_proc(cores=100)
    set_scheduler_managed(show=farm.show, managed=False)
    late = straggler(farm, cores=300)

    assert unbook_proc(proc_id=late).branch is Branch.CUEBOT

    assert accounting_mismatches(show_id=farm.show.id) == []  # 100 everywhere: not -200


def test_the_settling_recompute_counts_stragglers_still_running(farm):
    set_scheduler_managed(show=farm.show, managed=False)
    straggler(farm, cores=300)
    assert accounting_mismatches(show_id=farm.show.id) != []

    settle_recompute(show_id=farm.show.id)

    assert accounting_mismatches(show_id=farm.show.id) == []


def test_the_settling_recompute_of_a_show_gone_back_to_the_scheduler_writes_nothing(farm, monkeypatch):
    set_scheduler_managed(show=farm.show, managed=False)
    set_scheduler_managed(show=farm.show, managed=True)
    recomputed = []
    monkeypatch.setattr(switching, "recompute_pg_accounting", lambda *, show_ids: recomputed.append(show_ids))

    settle_recompute(show_id=farm.show.id)

    assert recomputed == []


def test_a_settling_release_locks_only_the_rows_it_touches(farm):
    """Another job's rows of the settling show, held by someone else, do not hold up the release
    of a straggler: it recomputes its own job's and layer's rows, not every row of the show."""
    other_job, other_layer = farm.add_job()
    farm.add_proc(cores=200, layer=other_layer)
    farm.add_proc(cores=100)
    set_scheduler_managed(show=farm.show, managed=False)
    late, mine = straggler(farm, cores=300), straggler(farm, cores=50, number=8)
    params = {k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    with psycopg.connect(**params) as holder:
        holder.execute("SELECT 1 FROM job_resource WHERE pk_job = %s FOR UPDATE", [other_job.id])
        holder.execute("SELECT 1 FROM layer_resource WHERE pk_layer = %s FOR UPDATE", [other_layer.id])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")
        try:
            assert unbook_proc(proc_id=mine).branch is Branch.CUEBOT
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        holder.rollback()

    assert accounting_mismatches(show_id=farm.show.id) == []  # the straggler counted in every row it shares
    assert unbook_proc(proc_id=late).branch is Branch.CUEBOT
    assert accounting_mismatches(show_id=farm.show.id) == []


def test_a_settling_release_counts_a_straggler_beyond_the_caps_and_leaves_the_caps_as_they_were(farm):
    """The recompute raises a counter past its burst or job maximum: the verify triggers let it
    through only because the cap moves in the same UPDATE, and it moves back."""
    farm.add_proc(cores=100)
    farm.add_proc(cores=100)
    set_scheduler_managed(show=farm.show, managed=False)
    with as_cuebot():
        Subscription.objects.filter(pk=farm.subscription.pk).update(int_burst=300)
        JobResource.objects.filter(job=farm.job).update(int_max_cores=300)
    straggler(farm, cores=300)  # 500 booked: above both caps
    mine = straggler(farm, cores=100, number=8)

    assert unbook_proc(proc_id=mine).branch is Branch.CUEBOT

    assert accounting_mismatches(show_id=farm.show.id) == []
    assert Subscription.objects.filter(pk=farm.subscription.pk).values_list("int_cores", "int_burst").get() == (
        500,
        300,
    )
    assert JobResource.objects.filter(job=farm.job).values_list("int_cores", "int_max_cores").get() == (500, 300)


def test_the_switch_back_records_the_horizon_below_which_its_recompute_counted_every_proc(farm):
    farm.add_proc(cores=100)
    set_scheduler_managed(show=farm.show, managed=False)

    assert ownership(show_id=farm.show.id).settling
    horizon = ownership(show_id=farm.show.id).counted_below
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text::bigint FROM proc WHERE pk_show = %s", [farm.show.id])
        (xmin,) = cursor.fetchone()
    assert horizon is not None and inserted_below(xmin=xmin, horizon=horizon)


def test_a_settling_release_of_a_proc_the_switch_back_counted_decrements_without_recomputing(farm):
    counted = [farm.add_proc(cores=100), farm.add_proc(cores=200)]
    set_scheduler_managed(show=farm.show, managed=False)
    late = straggler(farm, cores=300)

    with CaptureQueriesContext(connection) as queries:
        assert unbook_proc(proc_id=counted[0].id).branch is Branch.CUEBOT
    assert not [q for q in queries.captured_queries if "FOR NO KEY UPDATE OF t" in q["sql"]]  # no row recomputed
    assert mismatches_besides(farm, late_cores=300)  # the straggler is still missing from the rows, no worse

    unbook_proc(proc_id=late)  # not counted: its rows are recomputed, and hold what is left
    assert accounting_mismatches(show_id=farm.show.id) == []
    unbook_proc(proc_id=counted[1].id)
    assert accounting_mismatches(show_id=farm.show.id) == []


def mismatches_besides(farm, *, late_cores: int) -> bool:
    """Every row of the show off SUM(proc) is off by exactly the straggler's cores, low."""
    rows = accounting_mismatches(show_id=farm.show.id)
    return bool(rows) and all(row[2] - row[4] == -late_cores for row in rows)


def test_the_horizon_waits_for_a_transaction_running_at_the_switch(farm):
    params = {k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    with psycopg.connect(**params) as writer, psycopg.connect(**params, autocommit=True) as other:
        writer.execute("SELECT pg_current_xact_id()")  # a transaction that holds an xid, still running
        other.execute("SELECT pg_current_xact_id()")  # a later one that ended: the horizon is above the first
        assert xid_horizon(wait_seconds=0.2) is None
        writer.rollback()
    assert xid_horizon(wait_seconds=5) is not None


@pytest.mark.parametrize(
    ("xmin", "horizon", "below"),
    [
        (100, 200, True),
        (200, 200, False),
        (300, 200, False),
        (2**32 - 10, 2**32 + 5, True),  # inserted just before the 32-bit xid wrapped
        (3, 2**32 + 5, True),
        (7, 2**32 + 5, False),
        (2**32 - 10, 3 * 2**32 - 20, False),  # placed in the horizon's epoch: 10 xids above it
    ],
)
def test_inserted_below_places_a_32_bit_xmin_next_to_the_64_bit_horizon(xmin, horizon, below):
    assert inserted_below(xmin=xmin, horizon=horizon) is below
