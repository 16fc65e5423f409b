"""The Grafana dashboard (deploy/grafana/): provisioned the way Grafana provisions dashboards, and
every panel's query evaluated through the HTTP API of a real Prometheus that scraped a running
service (gunicorn as deployed) on the demo farm: each parses and returns series.

There is no Grafana here; what a panel shows is its query's answer, so the queries are what is
tested. Prometheus comes from Debian's `prometheus` package, which `make test` installs for
promtool (scripts/services.py up --tests): its absence fails here, as promtool's does in
tests/test_alert_rules.py. It listens on loopback, on a free port, with its storage in a
temporary directory, and is stopped at the end, passed or failed.
"""

import json
import math
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from prometheus_client import generate_latest

from accounting.models import Proc
from accounting.operators.auth import grant_permissions, issue_token
from cuebot_acct import metrics  # noqa: F401 - registers every metric a panel may name
from cuebot_acct.permissions import RELEASE_PROCS
from shows.models import Show
from simulator.processes import WebServer, web_server
from tests.processes import ROOT, closed_port, manage
from tests.service_role import as_cuebot

GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "cuebot-acct.json"
PROVISIONING = GRAFANA / "cuebot-acct.provisioning.yml"
# What Grafana puts in for its interval variable (at least four scrape intervals: Prometheus
# scrapes every second here), long enough that the releases stay in every window while the
# test reads them.
SCRAPE_SECONDS = 1
GRAFANA_VARIABLES = {"$__rate_interval": "1m"}
AWAIT_SECONDS = 60
EARLIER_SECONDS = 2 * 3600 + 300


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict]:
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def queries() -> list[tuple[str, str]]:
    """(panel title / refId, the query as Grafana sends it to Prometheus) of every panel."""
    found = []
    for panel in panels():
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            found.append((f"{panel['title']} / {target['refId']}", expr))
    return found


def test_the_dashboard_is_provisioned_as_grafana_provisions_dashboards():
    provisioning = PROVISIONING.read_text()
    assert re.search(r"^apiVersion: 1$", provisioning, re.M)
    assert re.search(r"^\s+type: file$", provisioning, re.M)
    path = re.search(r"^\s+path: (\S+)$", provisioning, re.M).group(1)
    assert path in (ROOT / "docs" / "grafana.md").read_text()  # where the page says to put the dashboard
    board = dashboard()
    assert board["uid"] == "cuebot-acct" and board["title"]
    (variable,) = board["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        assert panel["description"], panel["title"]
    # Only the variables Grafana defines are used, and each is put in by queries().
    used = {v for _, expr in queries() for v in re.findall(r"\$\{?\w+", expr)}
    assert used == set(), used


def test_the_panels_name_only_metrics_the_service_exports():
    exposition = generate_latest().decode()
    exported = set(re.findall(r"^# TYPE (\w+) ", exposition, re.M))
    exported |= {f"{name}{suffix}" for name in exported for suffix in ("_total", "_bucket", "_sum", "_count")}
    named = {name for _, expr in queries() for name in re.findall(r"\b(cuebot_\w+)\b", expr)}
    assert named and named <= exported, named - exported


@contextmanager
def prometheus(*, target_port: int, directory: Path) -> Iterator[str]:
    """A Prometheus scraping 127.0.0.1:`target_port` every second, its storage in `directory`;
    yields its base URL once it is ready and has scraped the target up. Stopped after."""
    program = shutil.which("prometheus")
    assert program, (
        "prometheus is missing: `make test` installs it (scripts/services.py up --tests, Debian's prometheus package)"
    )
    config = directory / "prometheus.yml"
    # JSON is YAML: Prometheus reads it as its configuration file.
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
                "scrape_configs": [
                    {
                        "job_name": "cuebot-acct",
                        "metrics_path": "/metrics",
                        "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
                    }
                ],
            }
        )
    )
    port = closed_port()
    log = directory / "prometheus.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [
                program,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        await_true(lambda: _status(f"{url}/-/ready") == 200, what="Prometheus ready", process=process, log=log)
        await_true(lambda: _target_up(url), what="the service's target up", process=process, log=log)
        yield url
    finally:
        process.terminate()
        process.wait(30)


def await_true(ready: Callable[[], bool], *, what: str, process: subprocess.Popen | None = None, log=None) -> None:
    """Poll `ready` (a server's answer: there is no event to wait on) until true, or fail naming it."""
    deadline = time.monotonic() + AWAIT_SECONDS
    while not ready():
        if process is not None and process.poll() is not None:
            pytest.fail(f"{what}: Prometheus exited {process.returncode}:\n{log.read_text() if log else ''}")
        assert time.monotonic() < deadline, f"{what}: not within {AWAIT_SECONDS} s"
        time.sleep(0.2)


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status
    except OSError:
        return None


def _get(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as error:  # a query Prometheus refuses answers 400 with its reason
        return json.loads(error.read())


def _target_up(url: str) -> bool:
    targets = _get(f"{url}/api/v1/targets")["data"]["activeTargets"]
    return any(target["health"] == "up" for target in targets)


def query(url: str, expr: str) -> dict:
    return _get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")


def values(answer: dict) -> dict[str, float]:
    """A vector answer's series, by their labels."""
    return {
        json.dumps(series["metric"], sort_keys=True): float(series["value"][1]) for series in answer["data"]["result"]
    }


def tasks(server: WebServer, code: str) -> None:
    """Python run as the task cluster runs its tasks, in a process of its own that writes its
    metrics where the web server's /metrics gathers them (its multiprocess directory)."""
    done = manage(
        "shell",
        "-c",
        code,
        PROMETHEUS_MULTIPROC_DIR=server.metrics_dir,
        DATABASE_URL=_database_url(),
        ACCOUNTING_SCHEDULER="redis",
        ACCOUNTING_REDIS_URL=_settings().ACCOUNTING_REDIS_URL,
        CACHE_REDIS_URL=_settings().CACHE_REDIS_URL,
        TASK_BROKER_REDIS_URL=_settings().TASK_BROKER_REDIS_URL,
        DJANGO_SECRET_KEY="k" * 50,
    )
    assert done.returncode == 0, done.stderr


def _settings():
    from django.conf import settings

    return settings


def _database_url() -> str:
    from simulator.processes import _database_url as url

    return url()


RUN_THE_CHECKS = f"""
from datetime import timedelta
from django.db.models import F
from accounting.models import DriftRecord
from accounting.tasks import accounting_guardrail_task, drift_check_task
drift_check_task()
DriftRecord.objects.update(first_seen=F("first_seen") - timedelta(seconds={EARLIER_SECONDS}))
drift_check_task()
accounting_guardrail_task()
"""


@pytest.mark.django_db(transaction=True)
def test_every_panel_returns_series_from_a_prometheus_that_scraped_the_service_on_the_demo_farm(
    django_user_model, acct_redis, tmp_path
):
    with as_cuebot():
        call_command("seed_demo_farm", stdout=StringIO(), stderr=StringIO())
    flagged = Show.objects.filter(b_scheduler_managed=True).order_by("str_name").first()
    cuebots = Show.objects.filter(b_scheduler_managed=False).order_by("str_name").first()
    # Drift by hand: a flagged show's subscription in Redis, a Cuebot-managed show's layer in its table.
    sub_key = next(iter(acct_redis.scan_iter(match=f"acct:sub:{flagged.pk}:*")))
    acct_redis.hincrby(sub_key, "int_cores", 4)
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE layer_resource SET int_cores = int_cores + 400 WHERE pk_layer = "
            "(SELECT l.pk_layer FROM layer l JOIN job j ON j.pk_job = l.pk_job WHERE j.pk_show = %s "
            "ORDER BY l.pk_layer LIMIT 1)",
            [cuebots.pk],
        )
    user = django_user_model.objects.create_user(username="release-client")
    grant_permissions(user=user, permissions=[RELEASE_PROCS])
    procs = list(Proc.objects.filter(show_id=cuebots.pk).order_by("pk").values_list("pk", flat=True)[:12])

    with web_server(token=issue_token(user=user)) as server:
        tasks(server, RUN_THE_CHECKS)
        with prometheus(target_port=server.port, directory=tmp_path) as url:
            # Releases after the first scrape, so that their rate and latency are seen rising.
            for proc_id in procs[:4]:
                assert server.release([proc_id]) == [True]
            assert server.release(procs[4:]) == [True] * len(procs[4:])

            def answered() -> dict[str, dict]:
                return {name: query(url, expr) for name, expr in queries()}

            # Every query parses: Prometheus refuses one that does not (400, "bad_data").
            for name, answer in answered().items():
                assert answer["status"] == "success", (name, answer)

            # Then each returns series, once Prometheus has scraped the releases.
            released = dict(queries())["Releases per second, by branch / A"]
            p99 = dict(queries())["Release latency / B"]

            def finite(expr: str) -> bool:
                found = values(query(url, expr)).values()
                return bool(found) and all(math.isfinite(v) for v in found)

            await_true(
                lambda: sum(values(query(url, released)).values()) > 0 and finite(p99),
                what="releases per second above 0, and their latency",
            )
            answers = answered()
            for name, answer in answers.items():
                assert answer["data"]["result"], name
            by_panel = {name.split(" / ")[0]: answer for name, answer in answers.items()}

    drifted_rows = values(by_panel["Drifted rows of Cuebot's tables, per show"])
    assert drifted_rows[json.dumps({"show": cuebots.str_name})] == 1
    fields = values(by_panel["Drifted Redis fields, per scheduler-managed show"])
    assert fields[json.dumps({"show": flagged.str_name})] == 1
    ages = values(by_panel["Oldest drift, per show"])
    for show, source in ((flagged.str_name, "redis"), (cuebots.str_name, "cuebot_tables")):
        assert ages[json.dumps({"show": show, "source": source}, sort_keys=True)] >= EARLIER_SECONDS
    assert values(by_panel["Stranded shows"]) == {"{}": 0}
    assert values(by_panel["Guardrail: an instance does not publish as the fleet does"]) == {"{}": 0}
