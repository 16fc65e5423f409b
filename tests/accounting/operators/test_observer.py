"""An observer (ACCOUNTING_WRITES=off) under the role a cautious site grants first: SELECT alone on
Cuebot's tables. Every read face answers; every write face refuses in one line naming the setting
and the grant, before its first statement, so PostgreSQL denies the role nothing (a write that got
through would fail these tests with "permission denied"), and no row of Cuebot's changes."""

import json
import logging
import re
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.contrib import admin
from django.core.management import CommandError, call_command, get_commands, load_command_class
from django.db import connection
from django.test import Client
from django.urls import reverse
from django_q.models import Schedule

import accounting
from accounting.management.commands._writes import DeclaredCommand
from accounting.models import Point
from accounting.operators.auth import issue_token
from accounting.operators.farm_admin import DeclaredAdmin
from accounting.tasks import SCHEDULES, TASKS, drift_check_task, recalculate_subs_task
from infra.writes import Write
from shows.cuebot_schema import TABLES as CUEBOT_TABLES
from tests.accounting.operators.test_api_permissions import ENDPOINTS, call
from tests.accounting.reconcile.test_tables_against_procs import acct_drift
from tests.farms import build_farm
from tests.service_role import as_cuebot, as_observer
from tests.wsgi_client import LaneClient

pytestmark = pytest.mark.django_db

WRITES = [endpoint for endpoint in ENDPOINTS if endpoint[0] != "get"]
READS = [endpoint for endpoint in ENDPOINTS if endpoint[0] == "get"]


def every_cuebot_row() -> dict[str, list]:
    """Every row of every Cuebot table, in a stable order, to compare before and after."""
    rows = {}
    with connection.cursor() as cursor:
        for table in sorted(CUEBOT_TABLES):
            cursor.execute(f"SELECT * FROM {table}")
            rows[table] = sorted(map(repr, cursor.fetchall()))
    return rows


@contextmanager
def observing(settings):
    """ACCOUNTING_WRITES=off under the observer's role; on leaving, no Cuebot row has changed."""
    settings.ACCOUNTING_WRITES = False
    with as_observer():
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_user, has_table_privilege('proc', 'DELETE')")
            assert cursor.fetchone()[1] is False  # the observer's role indeed, not the writer's
        before = every_cuebot_row()
        yield
        assert every_cuebot_row() == before


@pytest.fixture
def drifted(superuser_token):
    """A flagged show and a Cuebot-run one, each with procs; drift set by hand in the flagged
    show's subscription and the other's layer."""
    flagged, unflagged = build_farm(managed=True), build_farm(managed=False)
    flagged.add_proc(cores=250)
    unflagged.add_proc(cores=300)
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute("UPDATE subscription SET int_cores = 0 WHERE pk_subscription = %s", [flagged.subscription.id])
        cursor.execute("UPDATE layer_resource SET int_cores = 1 WHERE pk_layer = %s", [unflagged.layer.id])
    return flagged, unflagged


@pytest.fixture
def operator(django_user_model):
    """A superuser: every permission, so that only ACCOUNTING_WRITES refuses."""
    return django_user_model.objects.create_superuser(username="observer-admin", password="pw")


@pytest.fixture
def superuser_token(operator) -> str:
    return issue_token(user=operator)


@pytest.mark.parametrize("era", ["maestro", "redis"])
def test_every_read_face_answers_and_names_the_drift(
    request, settings, drifted, operator, superuser_token, era, capsys
):
    if era == "maestro":
        request.getfixturevalue("maestro_era")
    flagged, unflagged = drifted
    with observing(settings):
        assert acct_drift() == 1
        out = capsys.readouterr().out
        assert f"{unflagged.job.str_name} / {unflagged.layer.str_name}\tlayer_resource" in out
        assert "(where ACCOUNTING_WRITES is on)" in out  # the repair it names needs a writer
        if era == "maestro":  # a flagged show's subscription is Cuebot's too on current OpenCue
            assert f"{flagged.show.str_name} / {flagged.alloc.str_name}\tsubscription" in out
        assert drift_check_task() >= 1
        call_command("accounting_guardrail")
        call_command("recalculate_subs", "--dry-run")
        assert "would change" in capsys.readouterr().out

        api = Client(HTTP_AUTHORIZATION=f"Bearer {superuser_token}")
        for method, url, body, _ in READS:
            assert call(api, flagged, method, url, body, superuser_token).status_code == 200, url
        drift = api.get(f"/api/v1/accounting/drift?show={unflagged.show.str_name}")
        assert drift.status_code == 200 and drift.json()["cuebot_tables"]["rows"]
        assert Client().get("/metrics").status_code == 200

        admin = Client()
        admin.force_login(operator)
        for page in (
            reverse("admin:index"),
            reverse("acct-drift"),
            reverse("acct-drift-show", args=[unflagged.show.id]),
            reverse("admin:accounting_subscription_changelist"),
            reverse("admin:accounting_proc_changelist"),
            reverse("admin:shows_show_changelist"),
        ):
            answer = admin.get(page)
            assert answer.status_code == 200, page
            assert "Observing: ACCOUNTING_WRITES=off" in answer.content.decode(), page


@pytest.mark.parametrize("lane", [False, True], ids=["django", "lane"])
@pytest.mark.parametrize(("method", "url", "body", "needed"), WRITES)
def test_every_write_endpoint_refuses_with_the_setting_and_the_grant(
    settings, drifted, superuser_token, lane, method, url, body, needed, caplog
):
    flagged, _ = drifted
    with caplog.at_level(logging.DEBUG), observing(settings):
        client = LaneClient() if lane else Client()
        answer = call(client, flagged, method, url, body, superuser_token)
    assert not [r for r in caplog.records if r.exc_info], "a refusal logged a traceback"
    assert answer.status_code == 403
    refusal = answer.json()
    assert refusal["setting"] == "ACCOUNTING_WRITES"
    assert "refused: ACCOUNTING_WRITES is off" in refusal["detail"] and refusal["grant"] in refusal["detail"]
    assert ("DELETE on proc" if "unbook" in url else "UPDATE on ") in refusal["grant"]


WRITE_COMMANDS = [
    (["acct_reseed", "--show", "{cuebot}"], "UPDATE on subscription, folder_resource"),
    (["acct_reseed", "--show", "{flagged}"], "no grant in PostgreSQL"),
    (["acct_reseed", "--cuebot-tables"], "UPDATE on subscription, folder_resource"),
    (["recalculate_subs"], "UPDATE on subscription"),
    (["set_scheduler_managed", "{flagged}", "off"], "UPDATE on show"),
    (["set_subscription", "{flagged}", "{alloc}", "--burst", "30"], "UPDATE on subscription"),
    (["set_folder_limits", "{flagged}", "{folder}", "--max-cores", "-1"], "UPDATE on folder_resource"),
    (["set_job_limits", "{job}", "--max-cores", "50"], "UPDATE on job_resource"),
]


@pytest.mark.parametrize(("command", "grant"), WRITE_COMMANDS)
def test_every_write_command_refuses_in_one_line(settings, drifted, acct_redis, command, grant):
    flagged, unflagged = drifted
    names = {
        "flagged": flagged.show.str_name,
        "cuebot": unflagged.show.str_name,
        "alloc": flagged.alloc.str_name,
        "folder": flagged.folder.str_name,
        "job": flagged.job.str_name,
    }
    redis_before = sorted(acct_redis.keys())
    with observing(settings), pytest.raises(CommandError) as refused:
        call_command(*[word.format(**names) for word in command])
    assert refused.value.returncode == 2
    message = str(refused.value)
    assert "\n" not in message and "ACCOUNTING_WRITES is off" in message and grant in message
    assert sorted(acct_redis.keys()) == redis_before  # nor the scheduler's Redis counters


def test_admin_write_controls_are_gone_and_a_posted_repair_changes_nothing(settings, drifted, operator):
    flagged, unflagged = drifted
    admin = Client()
    admin.force_login(operator)
    with observing(settings):
        drift_page = admin.get(reverse("acct-drift-show", args=[unflagged.show.id])).content.decode()
        assert reverse("acct-drift-repair", args=[unflagged.show.id]) not in drift_page
        assert "Not here: ACCOUNTING_WRITES=off" in drift_page
        for view in ("acct-drift-repair", "acct-drift-reseed"):
            farm = unflagged if view == "acct-drift-repair" else flagged
            answer = admin.post(reverse(view, args=[farm.show.id]), follow=True)
            assert "refused: ACCOUNTING_WRITES is off" in answer.content.decode(), view

        shows = admin.get(reverse("admin:shows_show_changelist")).content.decode()
        assert "move_to_scheduler" not in shows and "move_back_to_cuebot" not in shows
        subscription = reverse("admin:accounting_subscription_change", args=[flagged.subscription.id])
        assert admin.post(subscription, {"int_burst": "1"}).status_code == 403
        proc = flagged.procs[0]
        assert admin.post(reverse("admin:accounting_proc_delete", args=[proc.id]), {"post": "yes"}).status_code == 403
        changelist = admin.get(reverse("admin:accounting_proc_changelist")).content.decode()
        assert "delete_selected" not in changelist


def test_no_schedule_writes_and_a_writing_task_queued_by_a_writer_skips(settings, drifted, capsys):
    with observing(settings):
        call_command("setup_schedules")
        assert "recalculate_subs: not made (ACCOUNTING_WRITES is off)" in capsys.readouterr().out
        assert set(Schedule.objects.values_list("name", flat=True)) == {
            "accounting_guardrail",
            "acct-drift-check",
            "acct-usage",  # the usage report's own tables alone
        }
        assert recalculate_subs_task() == -1


def test_the_observer_grants_are_select_alone_and_the_checks_find_them_complete(settings):
    from shows.attach import schema_problems

    settings.OPENCUE_TABLES = "existing"
    with observing(settings):
        assert [p.message for p in schema_problems()] == []
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT privilege_type FROM information_schema.role_table_grants "
                "WHERE grantee = current_user AND table_name = ANY(%s)",
                [list(CUEBOT_TABLES)],
            )
            assert cursor.fetchall() == [("SELECT",)]
    settings.ACCOUNTING_WRITES = True
    with as_observer():  # the same role asked to write: every missing grant named
        messages = [p.message for p in schema_problems() if p.id == "accounting.E004"]
    assert "the database role may not DELETE on proc" in messages
    assert "the database role may not UPDATE on show" in messages


def test_a_point_limit_refusal_names_the_point_table(settings, drifted, superuser_token):
    flagged, _ = drifted
    point = Point.objects.get(show=flagged.show, dept=flagged.dept)
    with observing(settings):
        answer = Client().patch(
            f"/api/v1/accounting/points/{point.id}/limits",
            data=json.dumps({"min_cores": 5}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {superuser_token}",
        )
    assert answer.status_code == 403 and answer.json()["grant"] == "UPDATE on point"


# --- Every face that writes declares it: enumerated from the registries themselves -------------

OUR_APPS = ("accounting", "shows")  # the simulator's commands play Cuebot against a farm of their own


def api_operations() -> list[tuple[str, str, object]]:
    """(method, path, view) of every operation the API serves, from its routers."""
    import cuebot_acct.urls  # noqa: F401 - the URLconf attaches the routers
    from infra.api import api

    found = []
    for prefix, router in api._routers:
        for path, path_view in router.path_operations.items():
            for operation in path_view.operations:
                found += [(method, f"/api/v1/{prefix}/{path}", operation.view_func) for method in operation.methods]
    return [(method, re.sub(r"/+", "/", path).rstrip("/"), view) for method, path, view in found]


def test_every_api_operation_that_writes_declares_it_and_the_observer_tests_call_each():
    assert len(api_operations()) >= len(ENDPOINTS)
    for method, path, view in api_operations():
        declared = getattr(view, "writes", None)
        if method == "GET":
            assert declared is None, f"GET {path} declares a write: a GET must write nothing"
        else:
            assert isinstance(declared, Write), (
                f"{method} {path} ({view.__name__}) writes without declaring it (infra.writes.writes)"
            )
    called = {(method.upper(), re.sub(r"\{\w+\}", "{}", url.split("?")[0])) for method, url, _, _ in ENDPOINTS}
    served = {(method, re.sub(r"\{\w+\}", "{}", path)) for method, path, _ in api_operations()}
    assert served == called, f"operations the observer tests do not call: {sorted(served - called)}"


def our_admins() -> list:
    return [model_admin for model, model_admin in admin.site._registry.items() if model._meta.app_label in OUR_APPS]


def faces(model_admin, request) -> list[str]:
    """The faces a superuser is offered: add, change, delete where permitted, and every action."""
    offered = [face for face in ("add", "change", "delete") if getattr(model_admin, f"has_{face}_permission")(request)]
    actions = {"delete" if name == "delete_selected" else name for name in model_admin.get_actions(request)}
    return offered + sorted(actions | {name for name in model_admin.actions if isinstance(name, str)})


def test_every_admin_face_that_writes_declares_it_and_is_closed_to_an_observer(settings, operator, rf):
    request = rf.get("/admin/")
    request.user = operator
    for model_admin in our_admins():
        name = type(model_admin).__name__
        assert isinstance(model_admin, DeclaredAdmin), f"{name} is no DeclaredAdmin: what it writes is undeclared"
        for face in faces(model_admin, request):
            assert face in model_admin.writes, f"{name} offers {face!r}, which writes without declaring it"
    settings.ACCOUNTING_WRITES = False
    for model_admin in our_admins():
        closed = {face for face, write in model_admin.writes.items() if write is not None}
        assert not closed & set(faces(model_admin, request)) - set(model_admin.actions), type(model_admin).__name__
        assert not closed & set(model_admin.get_actions(request)), type(model_admin).__name__


def test_every_command_declares_what_it_writes_and_the_observer_tests_run_each_that_does():
    writing = set()
    for name, app in get_commands().items():
        if app not in OUR_APPS:
            continue
        command = load_command_class(app, name)
        assert isinstance(command, DeclaredCommand) and "writes" in vars(type(command)), (
            f"manage.py {name} does not declare what it writes (accounting.management.commands._writes)"
        )
        assert all(isinstance(write, Write) for write in command.writes), name
        if command.writes:
            writing.add(name)
    assert writing == {command[0] for command, _ in WRITE_COMMANDS}


def test_every_task_and_schedule_declares_what_it_writes():
    for spec in SCHEDULES:
        assert spec.func in TASKS, (
            f"schedule {spec.name} runs {spec.func}, which declares nothing (accounting.tasks.task)"
        )
    named = set()
    for path in Path(accounting.__file__).parent.rglob("*.py"):
        named |= set(re.findall(r"[\"'](accounting\.tasks\.\w+)[\"']", path.read_text()))
    assert named <= set(TASKS), f"queued but not declared tasks: {sorted(named - set(TASKS))}"


def test_every_writing_task_skips_on_an_observer_in_one_line(settings, caplog):
    settings.ACCOUNTING_WRITES = False
    with caplog.at_level(logging.WARNING, logger="accounting.tasks"):
        for run in TASKS.values():
            if run.writes:
                run()  # refused before the task's body runs, whatever it would be given
    skipped = [r for r in caplog.records if "skipped: ACCOUNTING_WRITES is off" in r.getMessage()]
    assert len(skipped) == sum(1 for run in TASKS.values() if run.writes) and not any(r.exc_info for r in skipped)


def admin_urls(model_admin, farm) -> dict[str, tuple[str, dict]]:
    """Per face an admin declares with a Write, the URL a browser posts it to, and the form."""
    meta = model_admin.model._meta
    row = model_admin.model._default_manager.filter(**_of(meta.model_name, farm)).first()
    urls = {}
    for face, write in model_admin.writes.items():
        if write is None:
            continue
        if face in ("add", "change", "delete"):
            args = [] if face == "add" else [row.pk]
            urls[face] = (reverse(f"admin:{meta.app_label}_{meta.model_name}_{face}", args=args), {"post": "yes"})
        else:
            urls[face] = (
                reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"),
                {"action": face, "_selected_action": [row.pk], "confirmed": "yes"},
            )
    return urls


def _of(model_name: str, farm) -> dict:
    return {"proc": {"show": farm.show}, "show": {"pk": farm.show.pk}}.get(model_name, {})


def test_every_admin_write_url_answers_the_refusal_in_one_line_and_no_traceback(settings, drifted, operator, caplog):
    flagged, _ = drifted
    client = Client()
    client.force_login(operator)
    posted = []
    with caplog.at_level(logging.DEBUG), observing(settings):
        for model_admin in our_admins():
            for face, (url, form) in admin_urls(model_admin, flagged).items():
                answers = [client.post(url, form)] + ([client.get(url)] if face in ("add", "delete") else [])
                for answer in answers:
                    body = answer.content.decode()
                    assert answer.status_code == 403 and "\n" not in body, (url, face, body[:200])
                    assert "refused: ACCOUNTING_WRITES is off" in body and model_admin.writes[face].grant in body
                posted.append(face)
        for view in ("acct-drift-repair", "acct-drift-reseed"):
            for method in (client.get, client.post):
                answer = method(reverse(view, args=[flagged.show.id]))
                assert answer.status_code == 403 and "refused: ACCOUNTING_WRITES is off" in answer.content.decode()
    assert {"change", "delete", "move_to_scheduler", "move_back_to_cuebot"} <= set(posted)
    assert not [r for r in caplog.records if r.exc_info], "a refusal logged a traceback"
