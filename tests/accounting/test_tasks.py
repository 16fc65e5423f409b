import pytest
from django.core.management import call_command
from django_q.models import Schedule
from django_q.tasks import async_task, result

from accounting import tasks
from accounting.live.leases import named_lock
from accounting.reconcile.recalculate_subs import RECALCULATE_SUBS_LOCK
from accounting.tasks import SCHEDULES, ScheduleSpec

pytestmark = pytest.mark.django_db


def ours() -> dict[str, tuple]:
    return {s.name: (s.func, s.schedule_type, s.minutes, s.repeats) for s in Schedule.objects.order_by("name")}


def test_creates_the_schedules_and_rerunning_makes_no_duplicates(capsys):
    call_command("setup_schedules")
    call_command("setup_schedules")
    assert ours() == {
        "accounting_guardrail": ("accounting.tasks.accounting_guardrail_task", Schedule.MINUTES, 1, -1),
        "acct-drift-check": ("accounting.tasks.drift_check_task", Schedule.MINUTES, 2, -1),
        "acct-usage": ("accounting.tasks.usage_task", Schedule.MINUTES, 2, -1),
        "recalculate_subs": ("accounting.tasks.recalculate_subs_task", Schedule.MINUTES, 120, -1),
    }
    out = capsys.readouterr().out
    assert "recalculate_subs: created" in out and "recalculate_subs: unchanged" in out


def test_updates_an_edited_schedule_and_removes_hand_made_duplicates():
    call_command("setup_schedules")
    Schedule.objects.filter(name="recalculate_subs").update(minutes=5)
    Schedule.objects.create(
        name="accounting_guardrail",
        func="accounting.tasks.accounting_guardrail_task",
        schedule_type=Schedule.MINUTES,
        minutes=1,
    )
    call_command("setup_schedules")
    assert Schedule.objects.filter(name="accounting_guardrail").count() == 1
    assert Schedule.objects.get(name="recalculate_subs").minutes == 120


def test_the_drift_checks_interval_is_the_sites_to_choose(settings, capsys):
    call_command("setup_schedules")
    settings.ACCOUNTING_DRIFT_CHECK_MINUTES = 10
    call_command("setup_schedules")
    assert Schedule.objects.get(name="acct-drift-check").minutes == 10
    assert "acct-drift-check: updated" in capsys.readouterr().out


def test_reconcile_schedules_follow_the_setting(settings, monkeypatch):
    reseed = ScheduleSpec(
        name="booked_reseed", func="accounting.tasks.recalculate_subs_task", minutes=2, reconcile=True
    )
    monkeypatch.setattr(tasks, "SCHEDULES", (*SCHEDULES, reseed))
    settings.ACCOUNTING_RECONCILE_ENABLED = True
    call_command("setup_schedules")
    assert Schedule.objects.get(name="booked_reseed").minutes == 2
    settings.ACCOUNTING_RECONCILE_ENABLED = False
    call_command("setup_schedules")
    assert not Schedule.objects.filter(name="booked_reseed").exists()
    assert set(ours()) == {"accounting_guardrail", "acct-drift-check", "acct-usage", "recalculate_subs"}


def test_a_notify_era_instance_runs_no_schedule_that_reads_or_writes_redis(settings, capsys):
    settings.ACCOUNTING_RECONCILE_ENABLED = True
    call_command("setup_schedules")
    assert "acct-reconcile-booked" in ours() and "acct-drift-check" in ours()
    settings.ACCOUNTING_SCHEDULER = "notify"
    call_command("setup_schedules")
    # The drift check stays: without Redis it checks Cuebot's own tables only.
    assert set(ours()) == {"accounting_guardrail", "acct-drift-check", "acct-usage", "recalculate_subs"}
    assert "acct-reconcile-booked: removed (ACCOUNTING_SCHEDULER is notify: no acct:* keys)" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_the_scheduled_functions_run_in_the_task_cluster(cuebot_farm):
    from accounting.models import Subscription

    cuebot_farm.add_proc(cores=250)
    Subscription.objects.filter(pk=cuebot_farm.subscription.pk).update(int_cores=0)
    assert result(async_task("accounting.tasks.recalculate_subs_task")) == 1
    assert Subscription.objects.get(pk=cuebot_farm.subscription.pk).int_cores == 250
    with named_lock(name=RECALCULATE_SUBS_LOCK, ttl_seconds=60):
        assert result(async_task("accounting.tasks.recalculate_subs_task")) == -1
    assert result(async_task("accounting.tasks.accounting_guardrail_task")) is False
    assert result(async_task("accounting.tasks.usage_task")) == 0  # sizes recorded, no day of runs to roll
