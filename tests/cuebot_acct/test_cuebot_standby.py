"""The service as an observer reading Cuebot's tables from a hot standby (CUEBOT_DATABASE_URL),
its own state in a third database (the suite's test database).

A real primary and a streaming hot standby (tests/standby_cluster.py) start once for the module;
Cuebot's tables are built on the primary and the farm written there, and every read face then
runs with Cuebot's alias on the standby under a role with SELECT alone. Each face is held to that
alias: the service's own connection runs no statement naming a Cuebot table while it answers
(the suite's database has Cuebot's tables too, empty, so a read gone astray would answer wrongly
rather than fail). The last test reads the primary's own counters: no statement from the
service's role in the whole run.
"""

import html
import logging
import re
from contextlib import contextmanager

import environ
import pytest
from django.contrib import admin
from django.core.management import call_command
from django.db import OperationalError, connections
from django.db.utils import load_backend
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse
from django.utils import timezone

from accounting.checks import writes_over_standby
from accounting.models import DriftRecord
from accounting.reconcile.drift_check import check_status, run_check
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES, cuebot_table_drift
from accounting.usage import gauges
from accounting.usage.report import parse_query, report_json, usage_report
from accounting.usage.snapshot import SNAPSHOT, read_usage
from infra import cuebot_database
from infra.cuebot_database import CUEBOT_ALIAS, replay, said
from infra.startup import (
    StartupRefused,
    check_cuebot_database,
    run_with_clear_service_errors,
    servers_line,
    writes_on_standby,
)
from shows.attach import grant_statements
from shows.cuebot_schema import HISTORY_SQL, TABLES, TABLES_SQL, TRIGGERS_SQL
from shows.models import new_pk
from tests.farms import build_farm
from tests.processes import closed_port
from tests.standby_cluster import Replication, start_replication

pytestmark = pytest.mark.django_db

OBSERVER = "acct_standby_observer"
NAMES_CUEBOT_TABLE = re.compile(r'\b(?:FROM|JOIN|UPDATE|INTO)\s+"?(?:%s)"?(?!\w)' % "|".join(TABLES), re.I)


@pytest.fixture(scope="module")
def replication():
    """The primary with Cuebot's tables and the observer's role (SELECT alone), and its standby."""
    started = start_replication()
    try:
        with started.primary.connect() as conn:
            conn.execute(TABLES_SQL)
            conn.execute(TRIGGERS_SQL)
            conn.execute(HISTORY_SQL)
            conn.execute(f"CREATE ROLE {OBSERVER} LOGIN")
            for statement in grant_statements(role=OBSERVER, writes=False):
                conn.execute(statement)
        yield started
    finally:
        started.stop()


@contextmanager
def cuebot_alias(url: str):
    """Cuebot's alias on `url` while inside, as settings make it from CUEBOT_DATABASE_URL. Made by
    hand, beside the connections settings list: Django's test case refuses a listed alias it was
    not told of, and lets one made in the test through."""
    with override_settings(CUEBOT_DATABASE_ALIAS=CUEBOT_ALIAS):
        default = connections.settings["default"]
        configured = {**default, **environ.Env.db_url_config(url), "ENGINE": default["ENGINE"]}
        configured["OPTIONS"] = {**connections.settings["default"]["OPTIONS"], "options": "-c search_path=public"}
        made = load_backend(configured["ENGINE"]).DatabaseWrapper(configured, CUEBOT_ALIAS)
        before = getattr(connections._connections, CUEBOT_ALIAS, None)
        setattr(connections._connections, CUEBOT_ALIAS, made)
        try:
            yield
        finally:
            made.close()
            if before is None:
                delattr(connections._connections, CUEBOT_ALIAS)
            else:
                setattr(connections._connections, CUEBOT_ALIAS, before)


@pytest.fixture(scope="module")
def farm(replication, django_db_blocker):
    """A show Cuebot runs, written on the primary (as Cuebot: its superuser), replayed; then the
    primary's statement counters start from nothing."""
    with django_db_blocker.unblock(), cuebot_alias(replication.primary.url()):
        built = build_farm(managed=False)
    with replication.primary.connect() as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    replication.await_replay()
    return built


@pytest.fixture
def observer(maestro_era, replication, farm):
    """This process as an observer of a current-OpenCue site, Cuebot's alias on the standby."""
    maestro_era.ACCOUNTING_WRITES = False
    maestro_era.CUEBOT_DATABASE_URL = replication.standby.url(role=OBSERVER)
    with cuebot_alias(maestro_era.CUEBOT_DATABASE_URL):
        yield farm


@contextmanager
def own_database_names_no_cuebot_table():
    """Inside, the service's own connection runs no statement naming a Cuebot table."""
    with CaptureQueriesContext(connections["default"]) as own:
        yield
    astray = [query["sql"] for query in own.captured_queries if NAMES_CUEBOT_TABLE.search(query["sql"])]
    assert astray == []


def on_primary(replication: Replication, sql: str, params=()) -> None:
    with replication.primary.connect() as conn:
        conn.execute(sql, params)
    replication.await_replay()


def test_drift_set_on_the_primary_is_named_once_replayed_and_recorded_with_the_replay_time(replication, observer):
    show = observer.show.str_name
    assert run_check(CUEBOT_TABLES).drifted == {show: 0}
    on_primary(
        replication, "UPDATE subscription SET int_cores = 500 WHERE pk_subscription = %s", [observer.subscription.id]
    )
    try:
        with own_database_names_no_cuebot_table(), CaptureQueriesContext(connections[CUEBOT_ALIAS]) as standby:
            assert run_check(CUEBOT_TABLES).drifted == {show: 1}
        assert any("FROM subscription" in query["sql"] for query in standby.captured_queries)
        record = DriftRecord.objects.get()
        assert (record.subject, record.difference) == (f"{show} / {observer.alloc.str_name}", "5.00 cores high")
        assert record.replayed_at is not None and record.replayed_at <= record.first_seen
    finally:
        on_primary(
            replication, "UPDATE subscription SET int_cores = 0 WHERE pk_subscription = %s", [observer.subscription.id]
        )


def test_the_gauges_equal_the_primarys_rows_and_the_lag_is_exported(replication, observer):
    with own_database_names_no_cuebot_table():
        usage = read_usage()
        body = Client().get("/metrics").content.decode()
    with replication.primary.connect() as conn:
        rows = conn.execute(SNAPSHOT).fetchall()
    sizes = sorted((row[1], row[2], row[6]) for row in rows if row[0] == "subscription")
    assert sorted((sub.show, sub.allocation, sub.size) for sub in usage.subscriptions) == sizes != []
    hosts = sorted((row[2], row[4], row[6]) for row in rows if row[0] == "allocation")
    assert sorted((a.allocation, a.cores, a.idle_cores) for a in usage.allocations) == hosts
    assert f'cuebot_acct_subscription_size_cores{{show="{observer.show.str_name}"' in body
    assert "\ncuebot_acct_cuebot_database_replay_lag_seconds 0.0\n" in body


def admin_pages(farm) -> list[str]:
    lists = [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist") for model in admin.site._registry
    ]
    changes = [
        reverse("admin:shows_show_change", args=[farm.show.id]),
        reverse("admin:accounting_subscription_change", args=[farm.subscription.id]),
    ]
    return [
        reverse("acct-overview"),
        reverse("acct-drift"),
        reverse("acct-drift-show", args=[farm.show.id]),
        *lists,
        *changes,
    ]


def api_reads(farm) -> list[str]:
    show = farm.show.str_name
    return [
        "/api/v1/shows",
        f"/api/v1/shows/{show}",
        "/api/v1/accounting/drift",
        f"/api/v1/accounting/drift?show={show}",
    ]


def write_history_on_the_primary(replication: Replication, farm, *, now: int) -> None:
    """A finished job's runs (one failed, then run again) and a running frame's, as Cuebot writes
    them, on the primary."""
    job = new_pk()
    runs = [(400, now - 7200, now - 3600, 0), (250, now - 5000, now - 4000, 1), (250, now - 3900, now - 600, 0)]
    with replication.primary.connect() as conn:
        conn.execute(
            "INSERT INTO job_history (pk_job, pk_show, pk_facility, pk_dept, str_name, str_shot, str_user, "
            "int_ts_started, int_ts_stopped) VALUES (%s, %s, %s, %s, 'job', 'sh010', 'ana', %s, %s)",
            [job, farm.show.id, farm.alloc.facility_id, farm.dept.id, now - 7200, now - 600],
        )
        for cores, started, stopped, exit_status in [*runs, (100, now - 1800, 0, -1)]:
            conn.execute(
                "INSERT INTO frame_history (pk_frame, pk_layer, pk_job, str_name, str_state, int_cores, pk_alloc, "
                "int_ts_started, int_ts_stopped, int_exit_status) VALUES (%s, %s, %s, 'f', 'RUNNING', %s, %s, %s, %s, %s)",
                [new_pk(), new_pk(), job, cores, farm.alloc.id, started, stopped, exit_status],
            )
    replication.await_replay()


def test_the_usage_report_read_from_the_standby_equals_the_one_read_on_the_primary(replication, observer):
    now = timezone.now().replace(microsecond=0)
    write_history_on_the_primary(replication, observer, now=int(now.timestamp()))
    query = parse_query(
        since=(now - timezone.timedelta(days=1)).isoformat(), until=now.isoformat(), by="show,allocation"
    )
    with own_database_names_no_cuebot_table():
        on_the_standby = report_json(usage_report(query=query, now=now))
    with cuebot_alias(replication.primary.url()):
        on_the_primary = report_json(usage_report(query=query, now=now))
    assert on_the_standby == on_the_primary
    (row,) = on_the_standby["rows"]
    # Succeeded 4 cores x 3,600 s + 2.5 x 3,300 s; failed 2.5 x 1,000 s; running 1 x 1,800 s, to now.
    assert (row["core_hours_succeeded"], row["core_hours_failed"], row["core_hours_running"]) == (
        "6.291667",
        "0.694444",
        "0.500000",
    )


def test_every_admin_page_api_read_command_and_health_check_answers_from_the_standby(
    observer, admin_client, reader_client, capsys
):
    with own_database_names_no_cuebot_table():
        answers = {url: admin_client.get(url).status_code for url in admin_pages(observer)}
        answers |= {url: reader_client.get(url).status_code for url in api_reads(observer)}
        call_command("acct_drift")
        call_command("accounting_guardrail")
        call_command("check", databases=["default"])
        health = Client().get("/healthz").json()
    assert {url: status for url, status in answers.items() if status != 200} == {}
    assert "0 row(s) drifted" in capsys.readouterr().out
    assert (
        health["checks"]["cuebot_postgres"] == "ok" and f":{replication_port(observer)}/" in health["cuebot_database"]
    )


def replication_port(farm) -> int:
    return connections[CUEBOT_ALIAS].settings_dict["PORT"]


def test_a_process_says_at_start_where_it_reads_cuebots_tables(replication, observer):
    assert f"PostgreSQL {replication.standby.url(role=OBSERVER)} (Cuebot's tables); " in servers_line()


def test_writes_on_with_cuebot_tables_on_a_standby_refuse_to_start_in_one_line(replication, observer, settings):
    settings.ACCOUNTING_WRITES = True
    (error,) = writes_over_standby(databases=["default"])
    assert error.id == "accounting.E006" and "CUEBOT_DATABASE_URL" in error.msg and "\n" not in error.msg
    with pytest.raises(StartupRefused, match="ACCOUNTING_WRITES is on but CUEBOT_DATABASE_URL"):
        check_cuebot_database()
    # Where DATABASE_URL itself names a standby (one alias), PostgreSQL says so: pg_is_in_recovery().
    assert f"Cuebot's database at {replication.standby.url(role=OBSERVER)} is a standby in recovery" in (
        writes_on_standby() or ""
    )


READS_SUBSCRIPTION = re.compile(r'FROM "?subscription"?(?!\w)')


class ReplayConflicts:
    """An execute wrapper on Cuebot's alias: after a read of subscription inside a transaction, the
    primary locks that table, and the standby's replay of the lock ends this backend (it holds a
    lock the replay must take: max_standby_streaming_delay is 0). `times` reads are so ended."""

    def __init__(self, replication: Replication, *, times: int) -> None:
        self.replication, self.left, self.forced = replication, times, 0

    def __call__(self, execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if self.left and READS_SUBSCRIPTION.search(sql) and context["connection"].in_atomic_block:
            self.left -= 1
            self.forced += 1
            on_primary(self.replication, "BEGIN; LOCK TABLE subscription IN ACCESS EXCLUSIVE MODE; COMMIT")
        return result


def said_by_the_command(err: str) -> list[str]:
    """The lines a command said of its failure (the log's lines, on stderr too, aside)."""
    return [line for line in err.splitlines() if line.startswith("cuebot-acct: ")]


def test_a_read_cancelled_by_replay_is_read_once_more(replication, observer):
    conflicts = ReplayConflicts(replication, times=1)
    with connections[CUEBOT_ALIAS].execute_wrapper(conflicts):
        report = cuebot_table_drift()
    assert conflicts.forced == 1 and report.rows == []


class CancelledBeforeAPageRead(ReplayConflicts):
    """For a page's reads, which Django runs outside a transaction: before the first read of
    subscription, this backend takes the table's lock in a transaction of its own (as a long read
    holds it), the primary locks the table and the standby's replay ends the backend; the page's
    read then meets that end (SQLSTATE 40001), as a read cancelled midway would."""

    def __call__(self, execute, sql, params, many, context):
        if self.left and READS_SUBSCRIPTION.search(sql) and not context["connection"].in_atomic_block:
            self.left -= 1
            self.forced += 1
            context["connection"].connection.execute("BEGIN; SELECT 1 FROM subscription LIMIT 1")
            on_primary(self.replication, "BEGIN; LOCK TABLE subscription IN ACCESS EXCLUSIVE MODE; COMMIT")
        return execute(sql, params, many, context)


def test_a_page_whose_read_replay_cancelled_is_answered_from_a_second_reading(
    replication, observer, admin_client, caplog
):
    """The overview's first read is of subscription (Subscription.objects.select_related)."""
    caplog.set_level(logging.INFO, logger="infra.cuebot_database")
    conflicts = CancelledBeforeAPageRead(replication, times=1)
    with connections[CUEBOT_ALIAS].execute_wrapper(conflicts):
        answer = admin_client.get(reverse("acct-overview"))
    reread = [record for record in caplog.records if "reading once more" in record.getMessage()]
    assert (conflicts.forced, answer.status_code, len(reread)) == (1, 200, 1)
    with connections[CUEBOT_ALIAS].execute_wrapper(CancelledBeforeAPageRead(replication, times=2)):
        answer = admin_client.get(reverse("acct-overview"))
    said_there = answer.content.decode()
    assert answer.status_code == 503 and "conflict with recovery" in said_there and "\n" not in said_there


def test_a_read_cancelled_twice_answers_one_line_on_every_face(replication, observer, admin_client, capsys, caplog):
    with connections[CUEBOT_ALIAS].execute_wrapper(ReplayConflicts(replication, times=2)):
        with pytest.raises(OperationalError) as cancelled:
            cuebot_table_drift()
    line = said(cancelled.value)
    assert "conflict with recovery" in line and str(replication.standby.port) in line and "\n" not in line
    with connections[CUEBOT_ALIAS].execute_wrapper(ReplayConflicts(replication, times=2)):
        page = admin_client.get(reverse("acct-drift-show", args=[observer.show.id]))
    answered = page.content.decode()
    assert page.status_code == 503 and "conflict with recovery" in answered and "\n" not in answered
    with connections[CUEBOT_ALIAS].execute_wrapper(ReplayConflicts(replication, times=2)):
        with pytest.raises(SystemExit):
            run_with_clear_service_errors(["manage.py", "acct_drift"], serving={})
    (said_line,) = said_by_the_command(capsys.readouterr().err)
    assert "conflict with recovery" in said_line and str(replication.standby.port) in said_line
    with connections[CUEBOT_ALIAS].execute_wrapper(ReplayConflicts(replication, times=2)):
        assert gauges.scraped() == b""
    assert any("conflict with recovery" in record.getMessage() for record in caplog.records)


def test_the_standby_gone_fails_in_one_line_naming_it_and_leaves_the_own_state(
    settings, observer, admin_client, capsys
):
    gone = f"postgres://{OBSERVER}@127.0.0.1:{closed_port()}/cuebot"
    settings.CUEBOT_DATABASE_URL = gone
    DriftRecord.objects.create(
        source=DriftRecord.Source.CUEBOT_TABLES,
        identity="subscription 1 (int_cores, int_gpus)",
        show_id=observer.show.id,
        show_name=observer.show.str_name,
        subject="a row drifted earlier",
        detail="subscription (int_cores, int_gpus)",
        difference="1.00 cores high",
        first_seen=timezone.now(),
    )
    before = list(DriftRecord.objects.values())
    with cuebot_alias(gone), own_database_names_no_cuebot_table():
        health = Client().get("/healthz")
        page = admin_client.get(reverse("acct-drift-show", args=[observer.show.id]))
        assert run_check(CUEBOT_TABLES).error is not None
        assert list(DriftRecord.objects.values()) == before
        # Last: a command closes every connection when it ends, the test's own too.
        with pytest.raises(SystemExit):
            run_with_clear_service_errors(["manage.py", "acct_drift"], serving={})
    assert health.status_code == 503 and health.json()["checks"]["postgres"] == "ok"
    assert health.json()["checks"]["cuebot_postgres"].startswith("error:")
    assert page.status_code == 503 and f"cannot reach Cuebot's database at {gone}" in page.content.decode()
    (line,) = said_by_the_command(capsys.readouterr().err)
    assert f"cannot reach Cuebot's database at {gone}" in line
    assert check_status(CUEBOT_TABLES).error


def test_a_standby_behind_says_as_of_its_replay_time(
    replication, observer, admin_client, reader_client, monkeypatch, capsys
):
    monkeypatch.setattr(cuebot_database, "AS_OF_SECONDS", 0.0)
    with replication.standby.connect(database="postgres") as standby:
        standby.execute("SELECT pg_wal_replay_pause()")
        try:
            with replication.primary.connect() as conn:
                conn.execute("UPDATE show SET str_name = str_name WHERE pk_show = %s", [observer.show.id])
                target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            await_received(standby, target)
            state = replay()
            overview = html.unescape(admin_client.get(reverse("acct-overview")).content.decode())
            call_command("acct_drift")
            body = Client().get("/metrics").content.decode()
            live = reader_client.get(f"/api/v1/accounting/drift?show={observer.show.str_name}").json()
        finally:
            standby.execute("SELECT pg_wal_replay_resume()")
    replication.await_replay()
    assert state.standby and state.lag > 0 and state.as_of is not None
    assert f"Cuebot's tables as of {state.as_of:%Y-%m-%d %H:%M}" in overview
    assert capsys.readouterr().out.startswith("Cuebot's tables as of ")
    assert live["as_of"].startswith(f"Cuebot's tables as of {state.as_of:%Y-%m-%d %H:%M}")
    (lag,) = re.findall(r"^cuebot_acct_cuebot_database_replay_lag_seconds (\S+)$", body, re.M)
    assert float(lag) > 0


def await_received(standby, target: str) -> None:
    """Until the (paused) standby has received the primary's WAL up to `target`."""
    import time

    deadline = time.monotonic() + 20
    while not standby.execute("SELECT pg_last_wal_receive_lsn() >= %s::pg_lsn", [target]).fetchone()[0]:
        assert time.monotonic() < deadline, f"the standby never received {target}"
        time.sleep(0.01)


def test_the_primary_ran_no_statement_of_the_service_in_the_whole_run(replication, farm):
    counted = "SELECT count(*) FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = %s"
    with replication.primary.connect() as primary, replication.standby.connect() as standby:
        on_primary_count = primary.execute(counted, [OBSERVER]).fetchone()[0]
        on_standby_count = standby.execute(counted, [OBSERVER]).fetchone()[0]
    assert (on_primary_count, on_standby_count > 0) == (0, True)
