"""Current OpenCue on PostgreSQL alone (issue 47): ACCOUNTING_SCHEDULER=maestro and no Redis URL,
as a site that runs no Redis configures it. gunicorn and the task cluster start and say they use
PostgreSQL alone, the API answers and releases, the commands answer, a schedule runs through the
broker on PostgreSQL, and no process of the service ever opens a socket to anything: every Redis
client connects through Python's socket module, whose connections an audit hook records (libpq,
PostgreSQL's client, connects in C and is not seen)."""

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django_q.models import Task

from accounting.operators.auth import issue_token
from tests.farms import build_farm
from tests.processes import ROOT, await_log_line, closed_port
from tests.service_role import service_database

pytestmark = pytest.mark.django_db(transaction=True)

NO_REDIS = "; no Redis"

# Put on the processes' path as sitecustomize, which Python imports at every start: it records the
# process, and every outgoing connection any of its threads or forked children tries.
CONNECTION_AUDIT = """
import os, sys

def _record(line):
    with open(os.environ["CONNECTION_LOG"], "a") as log:
        log.write(line + "\\n")

def _audit(event, args):
    if event == "socket.connect":
        _record(f"connect {os.getpid()} {args[1]!r} {sys.argv[:2]}")

_record(f"start {os.getpid()} {sys.argv[:2]}")
sys.addaudithook(_audit)
"""


@pytest.fixture
def alone_env(tmp_path) -> dict[str, str]:
    """The suite's database as the service's role, the Maestro era, and no Redis URL at all."""
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "sitecustomize.py").write_text(CONNECTION_AUDIT)
    (tmp_path / "metrics").mkdir()
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_URL", "TASK_", "ACCOUNTING_", "CACHE_", "PYTHONPATH"))
    }
    return {
        **inherited,
        "DJANGO_SETTINGS_MODULE": "settings",
        **service_database(),
        "ACCOUNTING_SCHEDULER": "maestro",
        "DJANGO_SECRET_KEY": "postgresql-alone-" + "k" * 40,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "TASK_WORKERS": "1",
        "PYTHONPATH": str(tmp_path / "audit"),
        "CONNECTION_LOG": str(tmp_path / "connections.log"),
    }


@pytest.fixture
def forget_cache_rows():
    """acct_cache is the processes' cache here, no model's table: Django's flush leaves it."""
    yield
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM acct_cache")


def http(url: str, *, token: str, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """A project script in exactly `env` (no Redis URL the shell may hold leaks in)."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run(["manage.py", *args], env)


def server(action: str, state: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return run(["scripts/server.py", action, "--state-dir", str(state), *extra], env)


def test_the_maestro_era_starts_serves_and_runs_its_schedules_with_no_redis(alone_env, tmp_path, forget_cache_rows):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=250)
    token = issue_token(user=get_user_model().objects.create_superuser(username="site-admin", password="pw"))

    state = tmp_path / "state"
    bind = f"127.0.0.1:{closed_port()}"
    started = server("start", state, alone_env, "--bind", bind)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        await_log_line(state / "log" / "gunicorn.log", NO_REDIS)
        await_log_line(state / "log" / "qcluster.log", NO_REDIS)
        # While the cluster's scheduler comes round (django-q2 looks every 30 s), the faces answer.
        scheduled = manage("setup_schedules", env=alone_env)
        assert scheduled.returncode == 0 and "accounting_guardrail: created" in scheduled.stdout, scheduled.stderr
        base = f"http://{bind}"
        status, body = http(f"{base}/healthz", token=token)
        assert (status, json.loads(body)["checks"]) == (200, {"postgres": "ok", "task_cluster": "ok"}), body
        assert http(f"{base}/metrics", token=token)[0] == 200
        status, body = http(f"{base}/api/v1/procs/{proc.id}/unbook", token=token, method="POST")
        assert status == 200 and json.loads(body)["branch"] == "cuebot", body
        services = manage("check_services", env=alone_env)
        assert services.returncode == 0, services.stderr
        assert "servers: PostgreSQL postgres://" in services.stdout
        assert "(the database, the cache, the task broker); no Redis" in services.stdout
        for command in (
            ["acct_drift"],
            ["recalculate_subs", "--dry-run"],
            ["accounting_guardrail"],
            ["set_scheduler_managed", farm.show.str_name, "off"],
            ["acct_reseed"],
        ):
            done = manage(*command, env=alone_env)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
        # django-q2's monitor, once the task has run and its result is saved.
        await_log_line(state / "log" / "qcluster.log", "Processed 'accounting.tasks.accounting_guardrail_task'")
    finally:
        stopped = server("stop", state, alone_env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert Task.objects.filter(func="accounting.tasks.accounting_guardrail_task", success=True).exists()

    audit = (tmp_path / "connections.log").read_text().splitlines()
    assert any("gunicorn" in line for line in audit if line.startswith("start "))
    assert any("qcluster" in line for line in audit if line.startswith("start "))
    assert [line for line in audit if line.startswith("connect ")] == []
    for log in ("gunicorn.log", "qcluster.log"):
        said = (state / "log" / log).read_text().splitlines()
        assert [line for line in said if "redis" in line.lower() and NO_REDIS not in line] == [], log


def test_the_audit_sees_a_redis_client_connect(alone_env, tmp_path):
    """The same hook, the same command, with a Redis named (on a closed port): the attempt is recorded."""
    port = closed_port()
    done = manage("check_services", env={**alone_env, "CACHE_REDIS_URL": f"redis://127.0.0.1:{port}/1"})
    assert done.returncode == 1 and f"cannot reach Redis at redis://127.0.0.1:{port}/1" in done.stderr
    audit = (tmp_path / "connections.log").read_text()
    assert f"('127.0.0.1', {port})" in audit
