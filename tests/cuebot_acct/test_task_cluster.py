"""The task cluster (`manage.py qcluster`) when PostgreSQL or its broker goes away while it runs,
and when it is told to stop (issue 21): real processes against the real servers, PostgreSQL
taken away through a relay the test cuts, the broker a Redis of the test's own that it kills.
Each test awaits what the process says; the time limits are the promise to a supervisor."""

import os
import signal
import sys
import time

import pytest
from django.conf import settings
from django.db import connection

from tests.processes import ROOT, Running, TcpProxy, manage
from tests.redis_topology import redis_server

sys.path.insert(0, str(ROOT / "scripts"))
from server import group_members  # noqa: E402

# Seconds from SIGTERM to exit that "promptly" means here; the orderly stop of an idle cluster
# takes about one (its pusher's 1 s blocking pop).
PROMPT_STOP_SECONDS = 5
OUTAGE_SECONDS = 2
WATCHDOG_WARNING = "the task cluster stops if this lasts"


def database_url(*, port: int | None = None) -> str:
    database = connection.settings_dict
    password = f":{database['PASSWORD']}" if database["PASSWORD"] else ""
    return f"postgres://{database['USER']}{password}@{database['HOST']}:{port or database['PORT']}/{database['NAME']}"


@pytest.fixture
def cluster_env(transactional_db) -> dict[str, str]:
    """The suite's database (its rows flushed afterwards: the cluster commits its heartbeat)
    and Redis indexes; one worker, enough to run a task."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "TASK_"))}
    return {
        **inherited,
        "DJANGO_SETTINGS_MODULE": "settings",
        "DJANGO_SECRET_KEY": "task-cluster-test-" + "k" * 40,
        "DATABASE_URL": database_url(),
        "ACCOUNTING_REDIS_URL": settings.ACCOUNTING_REDIS_URL,
        "CACHE_REDIS_URL": settings.CACHE_REDIS_URL,
        "TASK_BROKER_REDIS_URL": settings.TASK_BROKER_REDIS_URL,
        "TASK_WORKERS": "1",
        "TASK_OUTAGE_SECONDS": str(OUTAGE_SECONDS),
    }


def on_postgresql_alone(env: dict[str, str]) -> dict[str, str]:
    """The Maestro era with no Redis URL: the broker is django-q2's on PostgreSQL (settings)."""
    alone = {k: v for k, v in env.items() if not k.endswith("_REDIS_URL")}
    return {**alone, "ACCOUNTING_SCHEDULER": "maestro"}


def start_cluster(env: dict[str, str]) -> Running:
    cluster = Running(["manage.py", "qcluster"], env=env)
    cluster.await_line("running.")  # django-q2: "Q Cluster <name> [<queue>] running."
    return cluster


def stop_timed(cluster: Running) -> tuple[int, float]:
    started = time.monotonic()
    cluster.process.send_signal(signal.SIGTERM)
    status = cluster.wait(seconds=60)
    return status, time.monotonic() - started


def our_lines(cluster: Running) -> list[str]:
    """What the command itself says on stderr (log records are the other lines)."""
    return [line for line in cluster.lines if line.startswith("cuebot-acct: ")]


@pytest.fixture
def postgres_relay():
    relay = TcpProxy(connection.settings_dict["HOST"] or "127.0.0.1", int(connection.settings_dict["PORT"] or 5432))
    yield relay
    relay.cut()


def test_sigterm_stops_a_running_cluster_promptly_and_cleanly(cluster_env):
    cluster = start_cluster(cluster_env)
    try:
        status, seconds = stop_timed(cluster)
    finally:
        cluster.stop()
    assert status == 0, cluster.lines
    assert seconds < PROMPT_STOP_SECONDS
    assert our_lines(cluster) == []
    assert group_members(cluster.process.pid) == []


@pytest.mark.parametrize("broker", ["redis", "postgresql"])
def test_losing_postgresql_stops_the_cluster_in_one_line_and_status_1(cluster_env, postgres_relay, broker):
    env = cluster_env if broker == "redis" else on_postgresql_alone(cluster_env)
    cluster = start_cluster({**env, "DATABASE_URL": database_url(port=postgres_relay.port)})
    try:
        cut_at = time.monotonic()
        postgres_relay.cut()
        status = cluster.wait(seconds=60)
        seconds = time.monotonic() - cut_at
    finally:
        cluster.stop()
    url = database_url(port=postgres_relay.port)
    assert status == 1, cluster.lines
    (line,) = our_lines(cluster)
    assert line.startswith(f"cuebot-acct: cannot reach PostgreSQL at {url} (")
    assert line.endswith(f"the task cluster stopped after {OUTAGE_SECONDS} s without it")
    assert not any("Traceback" in line for line in cluster.lines), "\n".join(cluster.lines)
    # The pusher waited for its broker (infra.taskbroker) rather than died and was reincarnated.
    assert not any("Failed to pull" in line or "reincarnated" in line for line in cluster.lines), cluster.lines
    # The outage, the probe interval (1 s) and the orderly stop.
    assert OUTAGE_SECONDS <= seconds < OUTAGE_SECONDS + 1 + PROMPT_STOP_SECONDS


def test_losing_the_broker_stops_the_cluster_in_one_line_and_status_1(cluster_env):
    with redis_server() as broker:
        cluster = start_cluster({**cluster_env, "TASK_BROKER_REDIS_URL": broker.url(2)})
        try:
            broker.kill()
            status = cluster.wait(seconds=60)
        finally:
            cluster.stop()
    assert status == 1, cluster.lines
    (line,) = our_lines(cluster)
    assert line.startswith(f"cuebot-acct: cannot reach Redis at {broker.url(2)} (")
    assert "TASK_BROKER_REDIS_URL" in line and line.endswith("the task cluster stopped after 2 s without it")
    assert not any("Traceback" in line or "reincarnated" in line for line in cluster.lines), "\n".join(cluster.lines)


@pytest.mark.parametrize("lost", ["postgresql", "broker", "postgresql, the broker"])
def test_sigterm_stops_the_cluster_promptly_while_a_service_is_down(cluster_env, postgres_relay, lost):
    with redis_server() as broker:
        env = {
            **cluster_env,
            "TASK_OUTAGE_SECONDS": "600",
            "TASK_BROKER_REDIS_URL": broker.url(2),
            "DATABASE_URL": database_url(port=postgres_relay.port),
        }
        cluster = start_cluster(on_postgresql_alone(env) if lost == "postgresql, the broker" else env)
        try:
            broker.kill() if lost == "broker" else postgres_relay.cut()
            cluster.await_line(WATCHDOG_WARNING)  # the cluster has seen the outage
            status, seconds = stop_timed(cluster)
        finally:
            cluster.stop()
    assert status == 0, cluster.lines
    assert seconds < PROMPT_STOP_SECONDS, (seconds, cluster.lines)
    assert not any("Traceback" in line for line in cluster.lines), "\n".join(cluster.lines)
    assert group_members(cluster.process.pid) == []


def test_a_cluster_that_does_not_stop_in_time_is_killed_and_says_so(cluster_env):
    """A worker in the middle of a long task: django-q2 would wait for it (up to its 600 s
    timeout); TASK_STOP_SECONDS bounds the stop, and nothing of the cluster is left."""
    env = {**cluster_env, "TASK_STOP_SECONDS": "2"}
    cluster = start_cluster(env)
    try:
        queued = manage("shell", "-c", "from django_q.tasks import async_task; async_task('time.sleep', 300)", **env)
        assert queued.returncode == 0, queued.stderr
        cluster.await_line("processing")  # django-q2's worker: "<process> processing <task> 'time.sleep'"
        status, seconds = stop_timed(cluster)
    finally:
        cluster.stop()
    assert status == 1, cluster.lines
    (line,) = our_lines(cluster)
    assert line.startswith("cuebot-acct: the task cluster did not stop within 2 s; its ")
    assert line.endswith(" remaining processes were killed")
    assert 2 <= seconds < 2 + PROMPT_STOP_SECONDS
    assert group_members(cluster.process.pid) == []
