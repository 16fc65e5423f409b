import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

import infra
from accounting.apps import task_worker_started
from accounting.models import Instance
from accounting.ownership import fleet as instances
from accounting.ownership.fleet import (
    Heartbeat,
    delete_stale_instances,
    live_instances,
    record_instance,
)
from accounting.ownership.guardrail import MESSAGE
from tests.service_role import service_database


@pytest.mark.django_db
def test_record_instance_upserts_this_process(settings):
    started = timezone.now() - timedelta(minutes=5)
    first = record_instance(role="web", started_at=started)
    settings.ACCOUNTING_SCHEDULER = "maestro"
    second = record_instance(role="web", started_at=started)
    assert first.pk == second.pk and Instance.objects.count() == 1
    row = Instance.objects.get()
    assert (row.host, row.pid, row.role, row.version) == (
        socket.gethostname(),
        os.getpid(),
        "web",
        infra.__version__,
    )
    assert row.publishes_to_redis is False  # what the process is now, not what it was
    assert row.started_at == started and row.last_seen >= started


@pytest.mark.django_db
def test_live_and_stale_by_last_seen():
    now = timezone.now()
    record_instance(role="web", started_at=now, now=now - instances.STALE_AFTER - timedelta(seconds=1))
    record_instance(role="tasks", started_at=now, now=now)
    assert [i.role for i in live_instances(now=now)] == ["tasks"]
    assert delete_stale_instances(now=now) == 1
    assert [i.role for i in Instance.objects.all()] == ["tasks"]


@pytest.mark.django_db(transaction=True)
def test_heartbeat_thread_records_at_start_and_stops_when_asked():
    heartbeat = Heartbeat(role="tasks", interval=3600).start()
    try:
        assert heartbeat.beat_done.is_set()  # the first beat happened inside start()
        row = Instance.objects.get(pid=os.getpid(), role="tasks")
        assert row.publishes_to_redis is True
    finally:
        heartbeat.stop()
    assert not heartbeat._thread.is_alive()
    assert heartbeat._thread.daemon
    assert heartbeat.beats == 1  # the long interval never elapsed: stop() woke it


@pytest.mark.django_db(transaction=True)
def test_heartbeat_beats_again_every_interval():
    heartbeat = Heartbeat(role="web", interval=0.01).start()
    try:
        assert heartbeat.beat_done.wait(10)
        first_seen = Instance.objects.get(pid=os.getpid(), role="web").last_seen
        # Two more beats: the second of them surely started writing after the read above.
        for _ in range(2):
            heartbeat.beat_done.clear()
            assert heartbeat.beat_done.wait(10)
        heartbeat.stop()
        assert Instance.objects.get(pid=os.getpid(), role="web").last_seen > first_seen
    finally:
        heartbeat.stop()


def test_task_worker_signal_does_not_start_a_heartbeat_in_sync_mode(monkeypatch):
    started = []
    monkeypatch.setattr(instances, "start_process_heartbeat", lambda *, role: started.append(role))
    task_worker_started(sender="django_q", proc_name="Worker-1")
    assert started == []


def test_a_task_worker_registers_itself_and_runs_the_guardrail_when_spawned(monkeypatch):
    from django_q.conf import Conf
    from django_q.signals import post_spawn

    from accounting.ownership import guardrail
    from accounting.reconcile import failover

    started, checked, watching = [], [], []
    monkeypatch.setattr(Conf, "SYNC", False)
    monkeypatch.setattr(instances, "start_process_heartbeat", lambda *, role: started.append(role))
    monkeypatch.setattr(guardrail, "run_guardrail_at_start", lambda: checked.append(True))
    monkeypatch.setattr(failover, "start_master_watch", lambda: watching.append(True))
    post_spawn.send(sender="django_q", proc_name="Worker-1")  # what django-q2 sends in a new worker
    # ...and watches for a new accounting Redis master (accounting.reconcile.failover).
    assert started == ["tasks"] and checked == [True] and watching == [True]


@pytest.mark.django_db(transaction=True)
def test_a_web_process_registers_itself_and_warns_at_start(cuebot_farm):
    from django.conf import settings as live

    from shows.models import Show

    Show.objects.filter(pk=cuebot_farm.show.pk).update(b_scheduler_managed=True)
    cuebot_farm.add_frame()  # waiting, and nothing books the flagged show: stranded
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings",
        "ACCOUNTING_SCHEDULER": "maestro",
        "DJANGO_SECRET_KEY": "a-key-of-this-test-" + "x" * 40,
        **service_database(),
        "CACHE_REDIS_URL": live.CACHE_REDIS_URL,
        "TASK_BROKER_REDIS_URL": live.TASK_BROKER_REDIS_URL,
    }
    code = "import os, cuebot_acct.wsgi; print(os.getpid())"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=live.BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    row = Instance.objects.get(pid=int(done.stdout.strip()))
    assert (row.role, row.publishes_to_redis) == ("web", False)
    assert f"nothing books show {cuebot_farm.show.str_name}" in done.stderr and MESSAGE not in done.stderr


@pytest.mark.django_db
def test_the_admin_lists_instances_with_liveness(admin_client):
    now = timezone.now()
    record_instance(role="web", started_at=now)
    page = admin_client.get("/admin/accounting/instance/")
    assert page.status_code == 200 and socket.gethostname() in page.content.decode()
