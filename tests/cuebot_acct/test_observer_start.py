"""An observer started as a site starts one: the observer's role (SELECT alone on Cuebot's tables),
OPENCUE_TABLES=existing with ACCOUNTING_WRITES left unset, the Maestro era with no accounting Redis.
The checks pass, gunicorn and the task cluster start and say they observe, the reads answer, the
writes refuse in one line, no Cuebot row changes and no log holds a privilege error."""

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from accounting.operators.auth import issue_token
from tests.accounting.operators.test_observer import every_cuebot_row
from tests.farms import build_farm
from tests.processes import ROOT, await_log_line, closed_port, manage
from tests.service_role import as_cuebot, observer_database

pytestmark = pytest.mark.django_db(transaction=True)

OBSERVING = "ACCOUNTING_WRITES=off: this instance observes and writes nothing of Cuebot's"
PRIVILEGE_ERRORS = ("permission denied", "must be owner", "InsufficientPrivilege")


@pytest.fixture
def observer_env(tmp_path) -> dict[str, str]:
    (tmp_path / "metrics").mkdir()
    return {
        "DJANGO_SETTINGS_MODULE": "settings",
        **observer_database(),
        "ACCOUNTING_SCHEDULER": "maestro",
        "ACCOUNTING_REDIS_URL": f"redis://127.0.0.1:{closed_port()}/0",
        "CACHE_REDIS_URL": settings.CACHE_REDIS_URL,
        "TASK_BROKER_REDIS_URL": settings.TASK_BROKER_REDIS_URL,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "DJANGO_SECRET_KEY": "observer-test-" + "k" * 40,
    }


def http(url: str, *, token: str, method: str = "GET", body: dict | None = None) -> tuple[int, dict | str]:
    request = urllib.request.Request(
        url,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        status, text = refused.code, refused.read().decode()
    return status, json.loads(text) if text.startswith(("{", "[")) else text


def server(action: str, state: Path, env: dict[str, str], *extra: str):
    import subprocess

    return subprocess.run(
        [sys.executable, "scripts/server.py", action, "--state-dir", str(state), *extra],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_observer_starts_reads_and_refuses_every_write_without_a_privilege_error(observer_env, tmp_path):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=250)
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute("UPDATE layer_resource SET int_cores = 1 WHERE pk_layer = %s", [farm.layer.id])
    token = issue_token(user=get_user_model().objects.create_superuser(username="site-admin", password="pw"))
    before = every_cuebot_row()

    checked = manage("check", "--database", "default", **observer_env)
    assert checked.returncode == 0 and "System check identified no issues" in checked.stdout, checked.stderr
    migrated = manage("migrate", **observer_env)
    assert migrated.returncode == 0 and "No migrations to apply." in migrated.stdout, migrated.stderr
    services = manage("check_services", **observer_env)
    assert services.returncode == 0 and OBSERVING in services.stdout, services.stderr
    drift = manage("acct_drift", **observer_env)
    assert drift.returncode == 1 and "layer_resource" in drift.stdout, drift.stderr
    for command in (["acct_reseed"], ["recalculate_subs"], ["set_scheduler_managed", farm.show.str_name, "off"]):
        refused = manage(*command, **observer_env)
        assert refused.returncode == 2, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1 and "ACCOUNTING_WRITES is off" in refused.stderr

    state = tmp_path / "state"
    bind = f"127.0.0.1:{closed_port()}"
    started = server("start", state, observer_env, "--bind", bind)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        await_log_line(state / "log" / "gunicorn.log", f"started; {OBSERVING}")
        await_log_line(state / "log" / "qcluster.log", f"task cluster started; {OBSERVING}")
        base = f"http://{bind}"
        assert http(f"{base}/metrics", token=token)[0] == 200
        status, answer = http(f"{base}/api/v1/accounting/drift?show={farm.show.str_name}", token=token)
        assert status == 200 and answer["cuebot_tables"]["rows"], answer
        assert http(f"{base}/admin/login/", token=token)[0] == 200
        for path, body in (
            (f"/api/v1/procs/{proc.id}/unbook", None),
            ("/api/v1/procs/unbook", {"proc_ids": [proc.id]}),
        ):
            status, answer = http(f"{base}{path}", token=token, method="POST", body=body)
            assert status == 403 and answer["setting"] == "ACCOUNTING_WRITES", answer
    finally:
        stopped = server("stop", state, observer_env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr

    assert every_cuebot_row() == before
    for log in ("gunicorn.log", "qcluster.log"):
        text = (state / "log" / log).read_text()
        assert not [line for line in text.splitlines() if any(error in line for error in PRIVILEGE_ERRORS)], log
