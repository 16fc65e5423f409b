"""The Grafana dashboard (deploy/grafana/): provisioned the way Grafana provisions dashboards, the
era's panels first (what only OpenCue main-branch builds have in a collapsed row), and every
panel's query, variable and annotation evaluated through the HTTP API of a real Prometheus that
loads the rules (deploy/prometheus/) and scraped a running service (gunicorn as deployed) on the
demo farm: each parses and returns series; and while it scrapes, bookings and releases on a known
schedule, whose core-hours (above size too) and time at burst the table gives within one scrape
interval's worth.

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
from django.urls import reverse

from accounting.models import Proc
from accounting.operators.auth import grant_permissions, issue_token
from infra import metrics  # noqa: F401 - registers every metric a panel may name
from infra.permissions import RELEASE_PROCS
from shows.models import Show
from simulator.processes import WebServer, web_server
from tests.farms import build_farm
from tests.processes import ROOT, closed_port, manage
from tests.service_role import as_cuebot
from tests.test_alert_rules import MAIN_BRANCH_ONLY, RULE_FILES, exported, metric_names, recorded_names

GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "cuebot-acct.json"
PROVISIONING = GRAFANA / "cuebot-acct.provisioning.yml"
SCRAPE_SECONDS = 1
# What Grafana puts in for its variables: the rate interval at least four scrape intervals (Prometheus
# scrapes every second here), long enough that the releases stay in every window while the test reads
# them; the range a dashboard spanning the whole run; the interval Grafana's step for a data source
# scraped every second; all shows.
GRAFANA_VARIABLES = {
    "__rate_interval": "1m",
    "__range": "10m",
    "__interval": f"{SCRAPE_SECONDS}s",
    "__interval_ms": str(SCRAPE_SECONDS * 1000),
    "show": ".*",
}
AWAIT_SECONDS = 60
EARLIER_SECONDS = 2 * 3600 + 300
# What a site on current OpenCue never sees: the metrics only main-branch builds set, and the releases
# through this service (Cuebot releases its own procs there).
NOT_ON_MAESTRO = MAIN_BRANCH_ONLY | {"cuebot_acct_releases_total", "cuebot_acct_release_seconds_bucket"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def rows() -> list[dict]:
    return [panel for panel in dashboard()["panels"] if panel["type"] == "row"]


def panels() -> list[dict]:
    """Every panel but the rows, those of a collapsed row (which holds them itself) included."""
    found = []
    for panel in dashboard()["panels"]:
        found += panel["panels"] if panel["type"] == "row" else [panel]
    return found


def as_grafana_sends(expr: str) -> str:
    """The query with the dashboard's and Grafana's variables put in, as Grafana sends it."""
    return re.sub(r"\$\{?(\w+)\}?", lambda found: GRAFANA_VARIABLES[found.group(1)], expr)


def queries() -> list[tuple[str, str]]:
    """(panel title / refId, the query as Grafana sends it to Prometheus) of every panel."""
    return [
        (f"{panel['title']} / {target['refId']}", as_grafana_sends(target["expr"]))
        for panel in panels()
        for target in panel["targets"]
    ]


def annotations() -> list[tuple[str, str]]:
    return [(entry["name"], as_grafana_sends(entry["expr"])) for entry in dashboard()["annotations"]["list"]]


def variables() -> dict[str, dict]:
    return {variable["name"]: variable for variable in dashboard()["templating"]["list"]}


def test_the_dashboard_is_provisioned_as_grafana_provisions_dashboards():
    provisioning = PROVISIONING.read_text()
    assert re.search(r"^apiVersion: 1$", provisioning, re.M)
    assert re.search(r"^\s+type: file$", provisioning, re.M)
    path = re.search(r"^\s+path: (\S+)$", provisioning, re.M).group(1)
    assert path in (ROOT / "docs" / "grafana.md").read_text()  # where the page says to put the dashboard
    board = dashboard()
    assert board["uid"] == "cuebot-acct" and board["title"]
    found = variables()
    assert list(found) == ["datasource", "show", "service"]
    datasource, show, service = found.values()
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    assert show["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert (show["includeAll"], show["multi"], show["allValue"], show["current"]["value"]) == (
        True,
        True,
        ".*",
        ["$__all"],
    )
    assert service["type"] == "textbox"
    ids = [panel["id"] for panel in rows() + panels()]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        assert panel["description"], panel["title"]
    for entry in board["annotations"]["list"]:
        assert entry["datasource"] == {"type": "prometheus", "uid": "${datasource}"} and entry["expr"], entry["name"]
    # Only the variables Grafana defines and the dashboard's own are used, and each is put in above.
    used = {v for panel in panels() for t in panel["targets"] for v in re.findall(r"\$\{?(\w+)", t["expr"])}
    used |= {v for entry in board["annotations"]["list"] for v in re.findall(r"\$\{?(\w+)", entry["expr"])}
    assert used <= set(GRAFANA_VARIABLES) and "show" in used, used


def test_it_links_the_admin_s_overview_and_drift_pages_at_the_service_s_url():
    links = {link["title"]: link["url"] for link in dashboard()["links"]}
    assert set(links.values()) == {f"${{service}}{reverse('acct-overview')}", f"${{service}}{reverse('acct-drift')}"}


def test_the_era_s_panels_come_first_and_the_main_branch_ones_are_collapsed():
    """On current OpenCue (Maestro) every panel of an open row can show something: what only
    main-branch builds set is in the last row, collapsed (Grafana queries none of it until opened)."""
    *open_rows, main_branch = rows()
    assert main_branch["collapsed"] and not any(row["collapsed"] for row in open_rows)
    assert not [
        panel
        for panel in dashboard()["panels"]
        if panel["type"] != "row" and panel["gridPos"]["y"] > main_branch["gridPos"]["y"]
    ]
    for panel in [p for p in dashboard()["panels"] if p["type"] != "row"]:
        named = {name for t in panel["targets"] for name in metric_names(t["expr"])}
        assert not named & NOT_ON_MAESTRO, panel["title"]
    for panel in main_branch["panels"]:
        named = {name for t in panel["targets"] for name in metric_names(t["expr"])}
        assert named & NOT_ON_MAESTRO, panel["title"]


def test_the_panels_name_only_metrics_the_service_exports_or_the_rules_record():
    named = {name for _, expr in queries() + annotations() for name in metric_names(expr)}
    named |= metric_names(variables()["show"]["definition"])
    known = exported() | {f"{name}_bucket" for name in exported()} | set(recorded_names())
    assert named and named <= known, named - known


@contextmanager
def prometheus(*, target_port: int, directory: Path) -> Iterator[str]:
    """A Prometheus scraping 127.0.0.1:`target_port` every second in the job the rules read, with
    every rule file of deploy/prometheus/ loaded and evaluated every second, its storage in
    `directory`; yields its base URL once it is ready and has scraped the target up. Stopped after."""
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
                "rule_files": [str(path) for path in RULE_FILES],
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


def repairs(show_id: str) -> str:
    """An operator's repair of a show's tables (acct_reseed's) and the scheduled recalculate_subs,
    as the task cluster's process runs code."""
    return (
        "from accounting.reconcile.recalculate_subs import recalculate_subs\n"
        "from accounting.reconcile.recompute import repair_pg_accounting\n"
        f"assert repair_pg_accounting(show_ids=[{show_id!r}]).drifted\n"
        "assert recalculate_subs().changes\n"
    )


class Schedule:
    """Bookings and releases of one subscription at known times, and what its gauges integrate to:
    a level holds from the commit that sets it (between `before` and `after` each step) to the next."""

    def __init__(self, *, size: int, burst: int) -> None:
        self.size, self.burst = size, burst
        self.steps: list[tuple[float, float, int]] = []  # (before, after, centicores booked from then)

    def step(self, change: Callable[[], object], *, booked: int) -> None:
        before = time.time()
        change()
        self.steps.append((before, time.time(), booked))

    def integral(self, value: Callable[[int], float]) -> tuple[float, float]:
        """(the integral of value(booked) over the schedule, in value-seconds, each change taken at
        the clock reading after its commit; how far the commits' moments, each known only between
        two clock readings, may move it)."""
        total = slack = 0.0
        for (_, start, booked), (before, end, then) in zip(self.steps, self.steps[1:], strict=False):
            total += value(booked) * (end - start)
            slack += abs(value(then) - value(booked)) * (end - before)
        return total, slack

    def largest(self, value: Callable[[int], float]) -> float:
        return max(value(booked) for _, _, booked in self.steps)

    def cores(self, booked: int) -> float:
        return booked / 100

    def above_size(self, booked: int) -> float:
        return max(booked - self.size, 0) / 100

    def at_burst(self, booked: int) -> float:
        return float(booked > 0 and booked >= self.burst)


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
    # The scheduled subscription (10 cores promised, 30 at most) and a show whose flag cueadmin toggles.
    scheduled, toggled = build_farm(managed=False, size=1000, burst=3000), build_farm(managed=False)
    schedule = Schedule(size=1000, burst=3000)

    with web_server(token=issue_token(user=user)) as server:
        tasks(server, RUN_THE_CHECKS)
        with prometheus(target_port=server.port, directory=tmp_path) as url:
            # The schedule: nothing booked; 15 cores (5 above size); 30 (20 above, at burst); all released.
            # Meanwhile, after the first scrape, a repair and a flag toggled, for the annotations, and
            # releases, so that their rate and latency are seen rising.
            held: list[Proc] = []
            schedule.step(lambda: None, booked=0)
            schedule.step(lambda: held.append(scheduled.add_proc(cores=1500)), booked=1500)
            with as_cuebot(), connection.cursor() as cursor:  # a subscription row off, for recalculate_subs
                cursor.execute(
                    "UPDATE subscription SET int_cores = 100 WHERE pk_subscription = %s", [toggled.subscription.pk]
                )
            tasks(server, repairs(cuebots.pk))
            with as_cuebot(), connection.cursor() as cursor:  # cueadmin -scheduler-managed SHOW on
                cursor.execute("UPDATE show SET b_scheduler_managed = true WHERE pk_show = %s", [toggled.show.pk])
            for proc_id in procs[:4]:
                assert server.release([proc_id]) == [True]
            assert server.release(procs[4:]) == [True] * len(procs[4:])
            hold(since=schedule.steps[-1][1])
            schedule.step(lambda: held.append(scheduled.add_proc(cores=1500)), booked=3000)
            hold(since=schedule.steps[-1][1])
            schedule.step(lambda: server.release([proc.pk for proc in held]), booked=0)

            def answered() -> dict[str, dict]:
                return {name: query(url, expr) for name, expr in queries() + annotations()}

            # Every query parses: Prometheus refuses one that does not (400, "bad_data").
            for name, answer in answered().items():
                assert answer["status"] == "success", (name, answer)

            # Then each returns series, once Prometheus has scraped the releases and recorded the last step.
            released = dict(queries())["Releases per second, by branch / A"]
            p99 = dict(queries())["Release latency / B"]
            recorded = f'subscription:cuebot_acct_subscription_reserved_cores:max{{show="{scheduled.show.str_name}"}}'

            def finite(expr: str) -> bool:
                found = values(query(url, expr)).values()
                return bool(found) and all(math.isfinite(v) for v in found)

            await_true(
                lambda: (
                    sum(values(query(url, released)).values()) > 0
                    and finite(p99)
                    and list(values(query(url, recorded)).values()) == [0]
                ),
                what="releases per second above 0, their latency, and the scheduled release recorded",
            )
            answers = answered()
            for name, answer in answers.items():
                assert answer["data"]["result"], name
            shows = _get(
                f"{url}/api/v1/label/show/values?{urllib.parse.urlencode({'match[]': 'cuebot_acct_subscription_size_cores'})}"
            )
            assert scheduled.show.str_name in shows["data"]  # the Show variable's choices
            by_panel = {name.split(" / ")[0]: answer for name, answer in answers.items()}
            table = {name: answer for name, answer in answers.items() if name.startswith("Core-hours")}

    drifted_rows = values(by_panel["Drifted rows of Cuebot's tables, per show"])
    assert drifted_rows[json.dumps({"show": cuebots.str_name})] == 1
    fields = values(by_panel["Drifted Redis fields, per scheduler-managed show"])
    assert fields[json.dumps({"show": flagged.str_name})] == 1
    ages = values(by_panel["Oldest drift, per show"])
    for show, source in ((flagged.str_name, "redis"), (cuebots.str_name, "cuebot_tables")):
        assert ages[json.dumps({"show": show, "source": source}, sort_keys=True)] >= EARLIER_SECONDS
    assert values(by_panel["Stranded shows"]) == {"{}": 0}
    assert values(by_panel["Guardrail: an instance does not publish as the fleet does"]) == {"{}": 0}
    assert values(by_panel["Ownership flag toggled"]) == {json.dumps({"show": toggled.show.str_name}): 1}

    # The table's row of the scheduled subscription against the integral of the schedule: within one
    # scrape interval's worth of its largest level (a change is seen at the first scrape after it).
    row = json.dumps({"allocation": scheduled.alloc.str_name, "show": scheduled.show.str_name}, sort_keys=True)
    measured = [values(table[f"{TABLE} / {ref}"])[row] for ref in "ABC"]
    expected = []
    for got, per, value in (
        (measured[0], 3600, schedule.cores),
        (measured[1], 3600, schedule.above_size),
        (measured[2], 1, schedule.at_burst),
    ):
        integral, slack = schedule.integral(value)
        assert abs(got * per - integral) <= schedule.largest(value) * SCRAPE_SECONDS + slack, (
            got * per,
            integral,
            slack,
        )
        expected.append(integral / per)
    print("core-hours, above size, seconds at burst: dashboard", measured, "schedule", expected)  # with -s


TABLE = "Core-hours over the dashboard's range, per show and allocation"
HOLD_SECONDS = 5


def hold(*, since: float) -> None:
    """A level of the schedule holds HOLD_SECONDS from its commit: the time is the schedule itself."""
    time.sleep(max(0.0, since + HOLD_SECONDS - time.time()))
