"""`simulate_farm --era notify`: the NOTIFY-era scheduler model against this project's release
path and limit services, its invariants held, and shown able to fail."""

import json
import math
import os
import subprocess
import sys
import threading
import uuid
from io import StringIO
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction

from accounting.notify import payloads
from accounting.notify.listen import open_listener
from shows.models import Show
from simulator.stopping import RunFailed, Threads
from simulator.workers.notify import scheduler as notify_scheduler
from simulator.workers.notify.faults import NOTIFY_FAULTS
from simulator.workers.notify.model import Store
from simulator.workers.notify.scheduler import Scheduler
from simulator.workers.notify.stats import NotifyStats

# simulate_farm plays the scheduler too (it books procs, INSERT on proc) and, for its faults,
# ends other backends: more than the service's role may do.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.superuser]


def simulate(*args: str) -> dict:
    out = StringIO()
    try:
        call_command(
            "simulate_farm",
            "--era",
            "notify",
            "--json",
            "--shows",
            "2",
            "--hosts",
            "6",
            "--jobs",
            "8",
            *args,
            stdout=out,
            stderr=StringIO(),
        )
    except CommandError as failed:
        assert failed.returncode == 1
    return json.loads(out.getvalue())


def test_a_run_without_faults_hears_every_committed_release_exactly_once():
    report = simulate("--seconds", "4", "--faults", "none", "--seed", "2")
    assert report["ok"] is True and report["exactness_judged"] is True
    assert report["releases"] > 0 and report["bookings"] > 0 and report["recomputes"] > 0
    assert report["released_cores"]["heard"] == report["released_cores"]["committed"] > 0
    assert not Show.objects.filter(str_name__startswith="sim-").exists()  # removed: not left on the overview


def test_every_fault_keeps_every_invariant():
    report = simulate("--seconds", "6", "--faults", "all", "--seed", "5")
    assert report["ok"] is True, report["invariants"]
    assert set(report["faults"]) == set(NOTIFY_FAULTS)
    # A dropped connection loses what was sent meanwhile: heard at most what was committed (high, safe).
    assert report["released_cores"]["heard"] <= report["released_cores"]["committed"]


def test_a_release_decremented_twice_is_caught(monkeypatch):
    real = payloads.release_payload
    monkeypatch.setattr(
        payloads, "release_payload", lambda *, key, cores, gpus: real(key=key, cores=2 * cores, gpus=gpus)
    )
    report = simulate("--seconds", "4", "--faults", "none", "--seed", "2")
    assert report["ok"] is False
    assert report["invariants"]["releases_not_heard_exactly_once"] == 1


def test_unknown_faults_are_refused():
    with pytest.raises(CommandError, match="unknown fault"):
        call_command(
            "simulate_farm", "--era", "notify", "--faults", "redis-restart", stdout=StringIO(), stderr=StringIO()
        )


def test_a_release_in_the_recompute_markers_packet_is_applied_not_lost():
    """The marker and a release committed together arrive in one packet: the recompute drops
    what came before its marker and applies what came after, none of it lost on the way."""
    stats, store = NotifyStats(), Store()
    scheduler = Scheduler(farm=None, store=store, stats=stats, stop=threading.Event())
    scheduler.listener = open_listener()
    ids = [str(uuid.uuid4()) for _ in range(4)]
    job = ("job", ids[3])
    store.booked[job] = [10, 1]
    marker = f"sim-marker-{uuid.uuid4().hex}"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(%s, %s)",
            [payloads.RELEASE, payloads.release_payload(key=(*ids, ids[0], ids[0]), cores=1, gpus=0)],
        )
        cursor.execute("SELECT pg_notify(%s, %s)", [payloads.RELEASE, marker])
        cursor.execute(
            "SELECT pg_notify(%s, %s)",
            [payloads.RELEASE, payloads.release_payload(key=(*ids, ids[1], ids[1]), cores=2, gpus=1)],
        )
    try:
        assert scheduler._drain_until(marker, drop_releases=True)
    finally:
        scheduler.listener.close()
    assert (stats.heard_cores, stats.dropped_by_recompute) == (3, 1)
    assert store.booked[job] == [8, 0]  # the one after the marker applied


def _model_listening(*, hear: bool = True) -> tuple[Scheduler, Threads]:
    """A scheduler model on its own thread, listening, with no recompute of its own: the only
    markers are the test's. With `hear` off it drops every marker it is sent, as a model that
    stopped answering would."""
    stop = threading.Event()
    scheduler = Scheduler(farm=SimpleNamespace(show_ids=[]), store=Store(), stats=NotifyStats(), stop=stop)
    scheduler.next_recompute = math.inf
    if not hear:
        scheduler._handle = lambda channel, payload, *, drop_releases: None
    model = Threads(stop=stop)
    model.start(scheduler.run, name="sim-scheduler")
    scheduler.listening()
    return scheduler, model


def test_a_marker_sent_while_the_listener_is_away_is_sent_again_not_waited_for(monkeypatch):
    """listener-drop, then a quiet sample at once: its marker went out while no session listened,
    and is lost. The model reconnects only once it has gone (so the loss is certain), and the
    sync sends it again to the new listener instead of waiting out its deadline."""
    marker_sent = threading.Event()
    reconnect = open_listener

    def listener_after_the_marker():
        marker_sent.wait(5)
        return reconnect()

    scheduler, model = _model_listening()
    with model:
        monkeypatch.setattr(notify_scheduler, "open_listener", listener_after_the_marker)
        send = scheduler._marker
        monkeypatch.setattr(scheduler, "_marker", lambda marker: (send(marker), marker_sent.set()))
        scheduler.disconnect()
        scheduler.sync(seconds=5)
    assert scheduler.stats.markers_sent_again == 1


def test_a_model_that_does_not_hear_its_marker_fails_the_sync_at_its_deadline():
    scheduler, model = _model_listening(hear=False)
    with model, pytest.raises(RunFailed, match="did not hear its marker within 1 s"):
        scheduler.sync(seconds=1)
    assert not model.threads[0].is_alive()  # told to stop when the block ended


# The scheduler model fails on purpose at the first release it hears, in a run of a minute.
MODEL_FAILS = """
import sys
import django
django.setup()
from django.core.management import execute_from_command_line
from simulator.workers.notify.model import Store
def fail(self, fields):
    raise RuntimeError("the model fails here on purpose")
Store.release = fail
execute_from_command_line(["manage.py", *sys.argv[1:]])
"""


def test_a_scheduler_model_that_dies_ends_the_command_within_seconds_saying_why():
    """As an operator runs it, a process: the model's thread dies mid-run, and the command stops
    every thread and exits 1 with one line, long before the run's minute (or hanging for ever,
    as a model left running once its sync had failed kept it)."""
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings.test",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}",
    }
    args = ["simulate_farm", "--era", "notify", "--seconds", "60", "--shows", "2", "--hosts", "6", "--jobs", "8"]
    done = subprocess.run(
        [sys.executable, "-c", MODEL_FAILS, *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "CommandError: the simulation stopped: the scheduler model's thread died: "
        "RuntimeError: the model fails here on purpose"
    )
