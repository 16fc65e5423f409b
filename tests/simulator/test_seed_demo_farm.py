from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from accounting.models import Proc, Subscription
from accounting.usage.report import parse_query, reconcile_jobs, usage_report
from shows.models import Host, Job, Show
from tests.accounting.pg import accounting_mismatches
from tests.processes import closed_port
from tests.service_role import as_cuebot

TABLE_COUNTS = [
    "facility",
    "alloc",
    "show",
    "dept",
    "folder",
    "folder_resource",
    "job",
    "job_resource",
    "layer",
    "layer_resource",
    "subscription",
    "point",
    "host",
    "proc",
]

# Host idle values against SUM(proc) of the procs on each host; the accounting tables are
# checked per show by tests.accounting.pg.accounting_mismatches.
HOST_IDLE_MISMATCHES = """
    SELECT count(*) FROM host h LEFT JOIN (
        SELECT pk_host, SUM(int_cores_reserved) c, SUM(int_mem_reserved) m, SUM(int_gpus_reserved) g FROM proc GROUP BY 1) t USING (pk_host)
    WHERE h.int_cores_idle <> h.int_cores - COALESCE(t.c, 0) OR h.int_mem_idle <> h.int_mem - COALESCE(t.m, 0)
       OR h.int_gpus_idle <> h.int_gpus - COALESCE(t.g, 0) OR h.int_cores_idle < 0 OR h.int_gpus_idle < 0"""


def scalar(sql: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def assert_consistent() -> None:
    for show_id in Show.objects.values_list("pk", flat=True):
        assert accounting_mismatches(show_id=show_id) == []
    assert scalar(HOST_IDLE_MISMATCHES) == 0


def counts() -> dict[str, int]:
    return {table: scalar(f"SELECT count(*) FROM {table}") for table in TABLE_COUNTS}


@pytest.mark.django_db
def test_the_services_documented_role_is_refused_in_one_line_before_anything_is_written():
    """The demo writes Cuebot's rows; the role docs/attaching.md grants (the suite's) may not."""
    with pytest.raises(CommandError) as raised:
        call_command("seed_demo_farm", stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2
    assert str(raised.value) == (
        "seed_demo_farm refuses: it writes Cuebot's own rows as Cuebot and the scheduler do, and this database role "
        "may not INSERT on facility, alloc, show, dept, subscription, point, folder, job, layer, host, host_stat, "
        "frame, proc, job_history, frame_history (the service's role of docs/attaching.md never may); run it as Cuebot's database role or the "
        "database owner, on a scratch Cuebot database"
    )
    assert set(counts().values()) == {0}


def seed(*args: str) -> str:
    """The demo's seed writes Cuebot's rows (shows, hosts, jobs, procs) as Cuebot would: not
    as the service's role, which the checks below run as."""
    out = StringIO()
    with as_cuebot():
        call_command("seed_demo_farm", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.django_db
def test_demo_farm_accounting_tables_agree_with_sum_of_procs():
    seed("--shows", "4", "--hosts", "10", "--procs", "300")
    assert Proc.objects.count() == 300
    assert_consistent()
    assert scalar("SELECT SUM(int_cores) FROM subscription") > 0


@pytest.mark.django_db
def test_cores_per_host_sizes_the_hosts_and_the_farm_stays_consistent():
    out = seed("--shows", "2", "--hosts", "7", "--procs", "90", "--cores-per-host", "37")
    assert "7 hosts (259 cores), 90 procs (90 new), built in " in out
    assert set(Host.objects.values_list("int_cores", flat=True)) == {3700}
    assert_consistent()


@pytest.mark.django_db
def test_the_maestro_size_is_the_proof_farms_and_is_not_mixed_with_a_size_by_hand():
    with pytest.raises(CommandError) as raised:
        seed("--maestro-size", "--procs", "10")
    assert raised.value.returncode == 2 and Show.objects.count() == 0
    out = seed("--maestro-size", "--history-days", "0")
    assert "demo farm: 20 shows (10 scheduler-managed), 1553 hosts (57,461 cores), 20000 procs (20000 new)" in out
    assert scalar("SELECT count(*) FROM proc") == 20000
    assert scalar(HOST_IDLE_MISMATCHES) == 0


@pytest.mark.django_db
def test_in_the_maestro_era_the_demo_farm_seeds_no_redis(settings):
    settings.ACCOUNTING_SCHEDULER = "maestro"
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    out = seed("--shows", "4", "--hosts", "4", "--procs", "40")
    assert "redis: nothing to seed (ACCOUNTING_SCHEDULER=maestro" in out
    assert_consistent()  # the flagged shows' tables too: Cuebot counts every show in this era


@pytest.mark.django_db
def test_demo_farm_has_both_kinds_of_show_and_fractional_and_finished_cases():
    seed("--shows", "2", "--hosts", "4", "--procs", "40")
    assert set(Show.objects.values_list("b_scheduler_managed", flat=True)) == {True, False}
    assert Proc.objects.filter(int_cores_reserved=250).exists()
    assert Job.objects.filter(str_state="FINISHED").exists()
    assert not Proc.objects.filter(job__str_state="FINISHED").exists()
    # Every proc's subscription exists: the show subscribes to its host's allocation.
    assert (
        scalar(
            "SELECT count(*) FROM proc p JOIN host h USING (pk_host) LEFT JOIN subscription s "
            "ON s.pk_show = p.pk_show AND s.pk_alloc = h.pk_alloc WHERE s.pk_subscription IS NULL"
        )
        == 0
    )


@pytest.mark.django_db
def test_rerunning_adds_nothing():
    seed("--shows", "3", "--hosts", "5", "--procs", "50")
    before = counts()
    subs_before = list(Subscription.objects.order_by("pk").values_list("pk", "int_cores"))
    output = seed("--shows", "3", "--hosts", "5", "--procs", "50")
    assert counts() == before
    assert list(Subscription.objects.order_by("pk").values_list("pk", "int_cores")) == subs_before
    assert "(0 new)" in output


@pytest.mark.django_db
def test_rerunning_larger_completes_the_farm_consistently():
    seed("--shows", "2", "--hosts", "4", "--procs", "20")
    seed("--shows", "2", "--hosts", "4", "--procs", "60")
    assert Proc.objects.count() == 60
    assert Host.objects.count() == 4
    assert_consistent()


@pytest.mark.django_db
def test_a_rerun_keeps_an_operators_flag_switch():
    seed("--shows", "2", "--hosts", "2", "--procs", "4")
    Show.objects.filter(str_name="demo01").update(b_scheduler_managed=False)
    seed("--shows", "2", "--hosts", "2", "--procs", "4")
    assert Show.objects.get(str_name="demo01").b_scheduler_managed is False


@pytest.mark.django_db
@pytest.mark.parametrize("args", [["--shows", "1"], ["--hosts", "0", "--procs", "5"], ["--procs", "-3"]])
def test_bad_sizes_are_refused_and_change_nothing(args):
    with pytest.raises((CommandError, SystemExit)):
        call_command("seed_demo_farm", *args, stdout=StringIO(), stderr=StringIO())
    assert Show.objects.count() == 0


@pytest.mark.django_db
def test_the_demo_farm_has_cuebots_history_to_report_on():
    """make run's farm: a day of finished jobs' runs as Cuebot's trigger leaves them (failures and
    their retries, a second row of the same frame), an open run per running frame, job_history's
    core time as Cuebot counts it, and the subscriptions' terms, so that the usage report has rows,
    promises and nothing to warn of."""
    out = seed("--shows", "2", "--hosts", "4", "--procs", "20", "--history-days", "1")
    assert "history: 480 runs of 5 finished jobs over 1 day, 20 running, written in " in out
    assert scalar("SELECT count(*) FROM frame_history WHERE int_exit_status = 1") == 48
    retried = """SELECT count(*) FROM frame_history failed JOIN frame_history retry ON retry.pk_frame = failed.pk_frame
                  AND retry.int_exit_status = 0 AND retry.int_ts_started > failed.int_ts_stopped
                 WHERE failed.int_exit_status = 1"""
    assert scalar(retried) == 48
    open_runs = """SELECT count(*) FROM frame_history fh JOIN proc p ON p.pk_frame = fh.pk_frame
                    JOIN host h ON h.pk_host = p.pk_host AND h.pk_alloc = fh.pk_alloc
                   WHERE fh.int_ts_stopped = 0 AND fh.int_cores = p.int_cores_reserved"""
    assert scalar(open_runs) == 20 == scalar("SELECT count(*) FROM frame_history WHERE int_ts_stopped = 0")
    today = timezone.localdate()
    query = parse_query(
        since=str(today - timedelta(days=2)), until=str(today + timedelta(days=1)), by="show,allocation"
    )
    assert reconcile_jobs(query=query) == []  # every finished job's core time is its runs', as Cuebot rounds them
    report = usage_report(query=query)
    assert len(report.rows) == 4 and report.problems == [] and report.unknown_promises == []
    assert all(row["promised_core_hours"] for row in report.rows)
    assert all(row["core_hours_failed"] and row["core_hours_running"] for row in report.rows)
