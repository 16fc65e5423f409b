"""Maestro era (OpenCue v1.34.20 and later): every release credits the five tables, flagged show or not.

The accounting Redis is pointed at a closed port in every test here: the era touches none, and
a release that tried would count a publish failure.
"""

import psycopg
import pytest
from django.db import connection
from prometheus_client import REGISTRY

from accounting.models import FolderResource, JobResource, LayerResource, Point, Proc, Subscription
from accounting.release.eras import release_era
from accounting.release.types import Branch
from accounting.release.unbook import unbook_proc, unbook_procs
from infra.era import MAESTRO
from tests.accounting.release.test_unbook import booked, host_idle
from tests.farms import build_farm

pytestmark = pytest.mark.django_db

CLOSED_PORT_REDIS = "redis://127.0.0.1:1/0"


@pytest.fixture(autouse=True)
def maestro(settings):
    settings.ACCOUNTING_SCHEDULER = "maestro"
    settings.ACCOUNTING_REDIS_URL = CLOSED_PORT_REDIS


def publish_failures() -> float:
    return sum(
        REGISTRY.get_sample_value("cuebot_acct_release_publish_failures_total", {"stage": stage}) or 0.0
        for stage in ("prepare", "publish", "breaker")
    )


def truth(farm) -> dict[str, tuple[int, int]]:
    """SUM(proc) for the farm's five rows, by Cuebot's counting rules (local procs only in the
    layer and the job's int_local_*), in centicores."""
    procs = list(
        Proc.objects.filter(show=farm.show).values_list(
            "layer_id", "b_local", "int_cores_reserved", "int_gpus_reserved"
        )
    )

    def total(rows):
        rows = list(rows)
        return (sum(r[2] for r in rows), sum(r[3] for r in rows))

    shared = total(r for r in procs if not r[1])
    return {
        "sub": shared,
        "folder": shared,
        "job": shared,
        "job_local": total(r for r in procs if r[1]),
        "layer": total(r for r in procs if r[0] == farm.layer.id),
        "point": shared,
    }


def test_the_release_runs_the_era_the_setting_names():
    assert release_era().name == MAESTRO
    assert release_era().name == "maestro" and not release_era().reads_before_lock


@pytest.mark.parametrize("managed", [True, False], ids=["flagged", "unflagged"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_release_credits_the_five_tables_for_flagged_and_unflagged_shows_alike(managed, batch):
    farm = build_farm(managed=managed)
    procs = [farm.add_proc(cores=c, gpus=g, mem=1000) for c, g in ((250, 1), (400, 0), (150, 2))]
    idle = host_idle(farm)
    failures = publish_failures()

    if batch:
        released = unbook_procs(proc_ids=[procs[0].id, procs[2].id])
    else:
        released = [unbook_proc(proc_id=procs[0].id), unbook_proc(proc_id=procs[2].id)]

    assert [r.branch for r in released] == [Branch.CUEBOT, Branch.CUEBOT]
    assert (
        booked(farm)
        == truth(farm)
        == {
            "sub": (400, 0),
            "folder": (400, 0),
            "job": (400, 0),
            "job_local": (0, 0),
            "layer": (400, 0),
            "point": (400, 0),
        }
    )
    assert host_idle(farm) == (idle[0] + 400, idle[1] + 2000, idle[2] + 3, idle[3])
    assert publish_failures() == failures  # no Redis was asked


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_proc_released_twice_credits_once(batch):
    farm = build_farm(managed=True)
    proc, kept = farm.add_proc(cores=300, gpus=1), farm.add_proc(cores=200)

    for _ in range(3):
        if batch:
            unbook_procs(proc_ids=[proc.id])
        else:
            unbook_proc(proc_id=proc.id)

    assert (
        booked(farm)
        == truth(farm)
        == {
            "sub": (200, 0),
            "folder": (200, 0),
            "job": (200, 0),
            "job_local": (0, 0),
            "layer": (200, 0),
            "point": (200, 0),
        }
    )
    assert Proc.objects.filter(pk=kept.pk).exists()


def test_local_procs_of_a_flagged_show_go_to_the_layer_and_the_jobs_local_counters_only():
    farm = build_farm(managed=True)
    local, shared = farm.add_proc(cores=300, gpus=1, local=True), farm.add_proc(cores=200)
    remaining_local = farm.add_proc(cores=100, local=True)

    released = unbook_procs(proc_ids=[local.id, shared.id])

    assert {r.proc_id: r.branch for r in released} == {local.id: Branch.LOCAL, shared.id: Branch.CUEBOT}
    assert booked(farm) == truth(farm)
    assert booked(farm)["job_local"] == (remaining_local.int_cores_reserved, 0)


def test_a_batch_over_several_shows_and_owners_leaves_every_row_at_sum_proc():
    farms = [build_farm(managed=managed) for managed in (True, False, True)]
    procs = [farm.add_proc(cores=100 * (i + 1), gpus=i % 2) for farm in farms for i in range(3)]

    unbook_procs(proc_ids=[p.id for p in procs[::2]])

    for farm in farms:
        assert booked(farm) == truth(farm)


def test_the_scheduler_hears_nothing(settings):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=100)
    dsn = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in dsn.items() if k != "cursor_factory"}, autocommit=True) as listener:
        listener.execute("LISTEN acct_release")
        unbook_proc(proc_id=proc.id)
        assert list(listener.notifies(timeout=0.2, stop_after=1)) == []


def test_the_caps_are_left_as_they_were_when_the_counters_sit_above_them():
    """A lowered burst or job maximum below current use: the decrement still goes through the
    verify_* triggers (a credit lowers the counter, which they allow)."""
    farm = build_farm(managed=True, size=100, burst=300)
    procs = [farm.add_proc(cores=200) for _ in range(3)]  # 600 centicores: above the burst
    JobResource.objects.filter(job=farm.job).update(int_max_cores=100)

    unbook_proc(proc_id=procs[0].id)

    assert Subscription.objects.filter(pk=farm.subscription.pk).values_list("int_cores", "int_burst").get() == (
        400,
        300,
    )
    assert JobResource.objects.filter(job=farm.job).values_list("int_cores", "int_max_cores").get() == (400, 100)
    assert booked(farm) == truth(farm)
    assert LayerResource.objects.get(layer=farm.layer).int_cores == 400
    assert (
        FolderResource.objects.get(folder=farm.folder).int_cores == Point.objects.get(show=farm.show).int_cores == 400
    )
