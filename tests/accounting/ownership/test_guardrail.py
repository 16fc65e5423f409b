import logging
import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone
from prometheus_client import REGISTRY

from accounting import checks
from accounting.models import Instance, Proc
from accounting.ownership.fleet import STALE_AFTER
from accounting.ownership.guardrail import MESSAGE, evaluate, run_guardrail
from accounting.tasks import accounting_guardrail_task
from infra.era import era
from shows.models import Job
from tests.farms import build_farm
from tests.processes import closed_port
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db
ROOT = settings.BASE_DIR


def gauge() -> float:
    return REGISTRY.get_sample_value("cuebot_redis_publish_misconfigured")


def instance(
    *,
    host: str,
    pid: int,
    publishes: bool,
    seen_ago: timedelta = timedelta(seconds=5),
    role: str = "web",
    notify: bool = False,
) -> Instance:
    now = timezone.now()
    return Instance.objects.create(
        host=host,
        pid=pid,
        role=role,
        publishes_to_redis=publishes,
        publishes_notify=notify,
        version="0.1.0",
        started_at=now - timedelta(hours=1),
        last_seen=now - seen_ago,
    )


def stranded_gauge(show: str) -> float | None:
    return REGISTRY.get_sample_value("cuebot_acct_stranded_show", {"show": show})


@pytest.fixture
def maestro(settings):
    settings.ACCOUNTING_SCHEDULER = "maestro"


def test_no_managed_show_is_fine_even_without_publishing(cuebot_farm, settings):
    settings.ACCOUNTING_SCHEDULER = "maestro"
    instance(host="web-a", pid=1, publishes=False)
    assert run_guardrail().misconfigured is False
    assert gauge() == 0
    assert checks.publish_guardrail(databases=["default"]) == []


def test_maestro_era_flagged_shows_need_no_publishing_and_nothing_advises_redis_or_notify(farm, maestro, caplog):
    """Both flags off is the Maestro era: Cuebot keeps the tables of flagged shows too, Maestro reads them."""
    instance(host="web-a", pid=1, publishes=False)
    with caplog.at_level(logging.WARNING, logger="accounting.ownership.guardrail"):
        report = run_guardrail()
    assert report.managed_shows == 1 and report.misconfigured is False and report.failing is False
    assert report.offenders == [] and gauge() == 0
    assert checks.publish_guardrail(databases=["default"]) == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_managed_show_with_publishing_missing_here_warns_sets_the_gauge_and_the_check(farm, settings, caplog):
    settings.ACCOUNTING_SCHEDULER = "notify"  # while the fleet publishes to Redis
    instance(host="web-a", pid=1, publishes=True)
    with caplog.at_level(logging.WARNING, logger="accounting.ownership.guardrail"):
        report = run_guardrail()
    assert report.misconfigured and report.managed_shows == 1
    assert gauge() == 1
    assert any(MESSAGE in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    (warning,) = checks.publish_guardrail(databases=["default"])
    assert warning.id == "accounting.W001" and warning.msg == MESSAGE
    assert (
        f"pid {os.getpid()}" in warning.hint
        and "Set ACCOUNTING_SCHEDULER=redis,notify on: this process" in warning.hint
    )


def test_managed_show_with_every_live_instance_publishing_is_fine(farm):
    instance(host="web-a", pid=1, publishes=True)
    instance(host="tasks-a", pid=2, publishes=True, role="tasks")
    assert run_guardrail().misconfigured is False
    assert gauge() == 0


def test_fleet_wide_a_live_instance_elsewhere_that_does_not_publish_is_named(farm):
    assert era().keeps_redis  # this process is fine; the fleet is not
    instance(host="web-a", pid=1, publishes=True)
    instance(host="old-cuebot", pid=4242, publishes=False, role="tasks")
    report = run_guardrail()
    assert report.misconfigured and gauge() == 1
    assert [(i.host, i.pid) for i in report.offenders] == [("old-cuebot", 4242)]
    assert report.culprits()[0].startswith("tasks old-cuebot pid 4242")


def test_a_stale_instance_no_longer_counts_and_the_schedule_deletes_it(farm):
    instance(host="gone", pid=7, publishes=False, seen_ago=STALE_AFTER + timedelta(seconds=1))
    live = instance(host="here", pid=8, publishes=True)
    assert evaluate().misconfigured is False
    assert accounting_guardrail_task() is False
    assert list(Instance.objects.all()) == [live]


def test_staleness_follows_the_clock(farm):
    instance(host="quiet", pid=9, publishes=False, seen_ago=timedelta(seconds=0))
    assert evaluate().misconfigured is True
    assert evaluate(now=timezone.now() + STALE_AFTER + timedelta(seconds=1)).misconfigured is False


def test_command_exits_1_naming_every_live_offender(farm, capsys):
    instance(host="cue-1", pid=11, publishes=False)
    instance(host="cue-2", pid=12, publishes=False, role="tasks")
    instance(host="cue-3", pid=13, publishes=False, seen_ago=timedelta(minutes=10))
    with pytest.raises(SystemExit) as exit_:
        call_command("accounting_guardrail")
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert MESSAGE in err and "web cue-1 pid 11" in err and "tasks cue-2 pid 12" in err
    assert "cue-3" not in err


def test_command_is_quiet_and_exits_0_when_fine(farm, capsys):
    call_command("accounting_guardrail")
    assert capsys.readouterr().out.startswith("ok: 1 scheduler-managed show(s)")


def test_manage_py_check_shows_w001(farm, settings):
    instance(host="web-a", pid=1, publishes=False, notify=True)
    err = StringIO()
    call_command("check", databases=["default"], stderr=err, stdout=StringIO())
    assert "(accounting.W001) " + MESSAGE in err.getvalue()


def run_check(database_url: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings",
        "DATABASE_URL": database_url,
        "ACCOUNTING_SCHEDULER": "maestro",
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--database", "default"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_does_not_crash_when_the_database_is_unreachable():
    result = run_check(f"postgres://postgres@127.0.0.1:{closed_port()}/nothing")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "no issues" in result.stdout


def test_check_does_not_crash_when_the_database_is_not_migrated():
    base = settings.DATABASES["default"]
    name = f"cuebot_acct_empty_{os.getpid()}"
    admin = f"host={base['HOST']} port={base['PORT'] or 5432} user={base['USER']} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        result = run_check(f"postgres://{base['USER']}@{base['HOST']}:{base['PORT'] or 5432}/{name}")
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_the_gauge_is_on_metrics(client, farm):
    quiet = instance(host="old-web", pid=3, publishes=False)
    run_guardrail()
    assert "cuebot_redis_publish_misconfigured 1.0" in client.get("/metrics").content.decode()
    quiet.delete()
    run_guardrail()
    assert "cuebot_redis_publish_misconfigured 0.0" in client.get("/metrics").content.decode()


# Per era: the fleet's eras are those any live instance publishes on.


def test_a_notify_era_fleet_is_fine_without_redis(farm, settings):
    settings.ACCOUNTING_SCHEDULER = "notify"
    instance(host="web-a", pid=1, publishes=False, notify=True)
    report = run_guardrail()
    assert report.misconfigured is False and report.fleet == {"notify"}
    assert gauge() == 0
    assert checks.publish_guardrail(databases=["default"]) == []


def test_an_instance_that_misses_one_of_the_fleets_eras_is_named(farm, settings):
    """A site moving between eras runs both; an instance with only one leaves the other scheduler high."""
    settings.ACCOUNTING_SCHEDULER = "redis,notify"
    instance(host="web-a", pid=1, publishes=True, notify=True)
    instance(host="old-web", pid=2, publishes=True, notify=False)
    report = run_guardrail()
    assert report.misconfigured and [i.host for i in report.offenders] == ["old-web"]
    assert "publishes Redis)" in report.culprits()[0]
    (warning,) = checks.publish_guardrail(databases=["default"])
    assert "Set ACCOUNTING_SCHEDULER=redis,notify on: web old-web pid 2" in warning.hint
    assert "ACCOUNTING_REDIS_ENABLED" not in warning.hint and "ACCOUNTING_NOTIFY_ENABLED" not in warning.hint
    assert "old-web pid 2" in warning.hint


def test_this_process_missing_an_era_the_fleet_uses_is_named(farm, settings):
    settings.ACCOUNTING_SCHEDULER = "redis"
    instance(host="web-a", pid=1, publishes=False, notify=True)
    report = run_guardrail()
    assert report.misconfigured and report.fleet == {"redis", "notify"}
    assert report.culprits()[0].startswith("this process") and report.culprits()[0].endswith("publishes Redis)")


def test_an_instance_that_publishes_nothing_in_a_redis_era_fleet_is_told_to_run_the_fleets_scheduler(farm):
    instance(host="maestro-web", pid=5, publishes=False)
    report = run_guardrail()
    assert report.misconfigured and [i.host for i in report.offenders] == ["maestro-web"]
    assert report.hint.startswith(
        "1 show(s) are scheduler-managed. Set ACCOUNTING_SCHEDULER=redis on: web maestro-web pid 5"
    )


def test_the_maestro_era_command_says_so(farm, maestro, capsys):
    call_command("accounting_guardrail")
    assert capsys.readouterr().out.strip() == (
        "ok: 1 scheduler-managed show(s), none stranded; Maestro era: Cuebot keeps "
        "every show's accounting tables, nothing to publish"
    )


def test_the_command_says_which_eras_the_fleet_publishes_on(farm, settings, capsys):
    settings.ACCOUNTING_SCHEDULER = "redis,notify"
    call_command("accounting_guardrail")
    assert (
        capsys.readouterr().out.strip()
        == "ok: 1 scheduler-managed show(s); every live instance publishes on NOTIFY, Redis"
    )


# Stranded: a flagged show with waiting frames that nothing has booked for ACCOUNTING_STRANDED_MINUTES.


def fix(show: str) -> str:
    return (
        f"nothing books show {show}: turn Maestro on for it (maestro.enabled=managed, or facility for every show) "
        f"or clear its flag: set_scheduler_managed {show} off"
    )


@as_cuebot()
def booked_ago(proc, minutes: float) -> None:
    Proc.objects.filter(pk=proc.pk).update(ts_booked=timezone.now() - timedelta(minutes=minutes))


def test_maestro_era_a_flagged_show_nothing_books_is_named_with_its_fix_and_the_command_exits_1(
    farm, maestro, capsys, caplog
):
    farm.add_frame()
    with pytest.raises(SystemExit) as exit_, caplog.at_level(logging.WARNING, logger="accounting.ownership.guardrail"):
        call_command("accounting_guardrail")
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    name = farm.show.str_name
    assert err.splitlines() == [
        "STRANDED: 1 scheduler-managed show(s) with waiting frames and no proc booked for 10 minutes",
        f"  {fix(name)}",
    ]
    assert "MISCONFIGURED" not in err and "ACCOUNTING_" not in err
    assert stranded_gauge(name) == 1 and gauge() == 0
    assert any(fix(name) in r.getMessage() for r in caplog.records)
    assert accounting_guardrail_task() is True


def test_a_proc_booked_within_the_window_means_something_books_the_show(farm, maestro, settings):
    settings.ACCOUNTING_STRANDED_MINUTES = 10
    farm.add_frame()
    proc = farm.add_proc(cores=100)
    assert evaluate().stranded == []
    booked_ago(proc, 9)
    assert evaluate().stranded == []
    booked_ago(proc, 11)
    (stranded,) = evaluate().stranded
    assert stranded.name == farm.show.str_name and stranded.last_booked < timezone.now() - timedelta(minutes=10)
    settings.ACCOUNTING_STRANDED_MINUTES = 12
    assert evaluate().stranded == []
    assert evaluate(now=timezone.now() + timedelta(minutes=2)).stranded[0].id == farm.show.id


def test_only_waiting_frames_of_a_pending_unpaused_job_of_a_flagged_show_count(maestro):
    unflagged = build_farm(managed=False)
    unflagged.add_frame()
    running_only = build_farm(managed=True)
    running_only.add_frame(state="RUNNING")
    running_only.add_frame(state="DEPEND")
    finished = build_farm(managed=True)
    job, layer = finished.add_job(state="FINISHED")
    finished.add_frame(layer=layer)
    paused = build_farm(managed=True)
    with as_cuebot():
        Job.objects.filter(pk=paused.job.pk).update(b_paused=True)
    paused.add_frame()
    assert evaluate().stranded == []
    waiting = build_farm(managed=True)
    waiting.add_frame(layer=waiting.add_job()[1])
    assert [s.name for s in evaluate().stranded] == [waiting.show.str_name]


def test_the_stranded_series_goes_back_to_0_once_a_proc_is_booked(farm, maestro):
    farm.add_frame()
    run_guardrail()
    assert stranded_gauge(farm.show.str_name) == 1
    farm.add_proc(cores=100)
    assert run_guardrail().stranded == []
    assert stranded_gauge(farm.show.str_name) == 0


def test_redis_era_a_stranded_show_is_named_with_the_schedulers_fix(farm, capsys):
    instance(host="web-a", pid=1, publishes=True)
    farm.add_frame()
    with pytest.raises(SystemExit):
        call_command("accounting_guardrail")
    name = farm.show.str_name
    assert capsys.readouterr().err.splitlines()[1] == (
        f"  nothing books show {name}: start the Rust scheduler that books flagged shows or clear its flag: "
        f"set_scheduler_managed {name} off"
    )
