"""The release endpoints, /metrics and /healthz."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import accounting.operators.auth
from accounting.models import ApiToken, Proc
from infra.permissions import RELEASE_PROCS
from tests.accounting.release.test_unbook import hashes, seed_keys


@pytest.fixture
def token(token_with) -> str:
    return token_with(RELEASE_PROCS)


@pytest.fixture
def post(api_client, token):
    def send(path: str, body=None, *, raw: str | None = None, auth: str | None = "valid"):
        headers = {} if auth is None else {"Authorization": f"Bearer {token if auth == 'valid' else auth}"}
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return api_client.post(path, data=data, content_type="application/json", headers=headers)

    return send


def test_unbook_one_returns_the_release_and_publishes(farm, acct_redis, post, django_capture_on_commit_callbacks):
    proc = farm.add_proc(cores=250, gpus=1, mem=512)
    names = seed_keys(acct_redis, farm, cores=2, gpus=1)

    with django_capture_on_commit_callbacks(execute=True):
        response = post(f"/api/v1/procs/{proc.id}/unbook")

    assert response.status_code == 200
    assert response.json() == {
        "proc_id": proc.id,
        "host_id": farm.host.id,
        "show_id": farm.show.id,
        "alloc_id": farm.alloc.id,
        "folder_id": farm.folder.id,
        "job_id": farm.job.id,
        "layer_id": farm.layer.id,
        "dept_id": farm.dept.id,
        "cores_centicores": 250,
        "cores": 2,
        "gpus": 1,
        "memory_kb": 512,
        "gpu_memory_kb": 0,
        "branch": "scheduler",
        "names": {
            "show": farm.show.str_name,
            "alloc": farm.alloc.str_name,
            "folder": "root",
            "job": farm.job.str_name,
            "layer": "render",
            "dept": farm.dept.str_name,
        },
    }
    assert hashes(acct_redis, names) == {role: {"int_cores": "0", "int_gpus": "0"} for role in names}


def test_unbook_one_unknown_is_404_with_json(db, post):
    response = post("/api/v1/procs/no-such-proc/unbook")
    assert response.status_code == 404
    assert response.json() == {"detail": "no proc no-such-proc"}


def test_unbook_many_reports_each_id(farm, post):
    a, b = farm.add_proc(cores=100), farm.add_proc(cores=200)

    response = post("/api/v1/procs/unbook", {"proc_ids": [a.id, "missing", b.id]})

    assert response.status_code == 200
    results = response.json()["results"]
    assert [(r["proc_id"], r["status"]) for r in results] == [
        (a.id, "released"),
        ("missing", "not_found"),
        (b.id, "released"),
    ]
    assert results[0]["release"]["cores_centicores"] == 100 and results[1]["release"] is None
    assert not Proc.objects.filter(pk__in=[a.id, b.id]).exists()


@pytest.mark.parametrize(
    ("body", "raw"),
    [
        ({"proc_ids": []}, None),
        ({"proc_ids": ["a", "b", "a"]}, None),
        ({"proc_ids": ["a", 7]}, None),
        ({"proc_ids": [None]}, None),
        ({"proc_ids": [""]}, None),
        ({"proc_ids": "a"}, None),
        ({"proc_ids": [f"p{i}" for i in range(1001)]}, None),
        ({}, None),
        (None, '{"proc_ids": ["a",'),
        (None, "not json"),
    ],
    ids=[
        "empty",
        "duplicates",
        "non-string",
        "null",
        "empty-string",
        "not-a-list",
        "over-1000",
        "missing",
        "truncated-json",
        "not-json",
    ],
)
def test_unbook_many_bad_input_is_422_and_changes_nothing(farm, post, body, raw):
    proc = farm.add_proc()
    if body is not None and body.get("proc_ids") == ["a", "b", "a"]:
        body = {"proc_ids": [proc.id, "b", proc.id]}

    response = post("/api/v1/procs/unbook", body, raw=raw)

    assert response.status_code == 422
    assert "detail" in response.json()
    assert Proc.objects.filter(pk=proc.id).exists()


def test_exactly_1000_ids_are_accepted(db, post):
    response = post("/api/v1/procs/unbook", {"proc_ids": [f"p{i}" for i in range(1000)]})
    assert response.status_code == 200
    assert len(response.json()["results"]) == 1000


@pytest.mark.parametrize("auth", [None, "not-a-token", "revoked"])
@pytest.mark.parametrize("path", ["/api/v1/procs/{id}/unbook", "/api/v1/procs/unbook"])
def test_mutating_endpoints_need_a_valid_token(farm, post, token, auth, path):
    proc = farm.add_proc()
    if auth == "revoked":
        ApiToken.objects.update(revoked_at=timezone.now())
        auth = "valid"

    response = post(path.format(id=proc.id), {"proc_ids": [proc.id]}, auth=auth)

    assert response.status_code == 401
    assert response.json() == {"detail": "Unauthorized"}
    assert Proc.objects.filter(pk=proc.id).exists()


def test_create_api_token_prints_the_token_alone_on_the_last_line(db, client, capsys):
    get_user_model().objects.create_user(username="ops")
    call_command("create_api_token", "ops", "--grant", "release_proc")
    raw = capsys.readouterr().out.rstrip("\n").splitlines()[-1]

    assert raw.strip() == raw and " " not in raw and len(raw) >= 32
    assert ApiToken.objects.get().key_hash != raw  # stored hashed
    response = client.post("/api/v1/procs/nothing/unbook", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 404
    ApiToken.objects.update(revoked_at=timezone.now())
    # A revocation takes effect within AUTH_TOKEN_CACHE_SECONDS (tests/accounting/operators/test_auth.py).
    accounting.operators.auth._valid.clear()
    response = client.post("/api/v1/procs/nothing/unbook", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 401


def test_metrics_count_releases_by_branch_and_batch_sizes(farm, post, client, django_capture_on_commit_callbacks):
    proc = farm.add_proc()

    def value(text: str, prefix: str) -> float:
        lines = [line for line in text.splitlines() if line.startswith(prefix)]
        return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0

    before = client.get("/metrics").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        post("/api/v1/procs/unbook", {"proc_ids": [proc.id, "gone"]})
    response = client.get("/metrics")
    after = response.content.decode()

    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    releases = 'cuebot_acct_releases_total{branch="scheduler"}'
    assert value(after, releases) == value(before, releases) + 1
    batches = 'cuebot_acct_release_batch_size_bucket{le="2.0"}'
    assert value(after, batches) == value(before, batches) + 1
    assert "cuebot_acct_release_publish_seconds_count" in after
    assert "cuebot_acct_release_publish_failures_total" in after


def test_healthz_ok_when_everything_answers(db, client, settings):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert {key: body[key] for key in ("status", "checks")} == {
        "status": "ok",
        "checks": {"postgres": "ok", "cache_redis": "ok", "accounting_redis": "ok"},
    }
    # Which master is in use, and the failovers and rebuilds this host's processes counted.
    assert body["accounting_redis"]["master"] == settings.TEST_REDIS_HOST
    assert {type(body["accounting_redis"][key]) for key in ("failovers", "rebuilds")} == {int}


def test_healthz_503_when_accounting_redis_is_down(db, client, settings):
    from infra.redis_factory import accounting_redis
    from tests.accounting.release.test_publish import closed_port

    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    accounting_redis.cache_clear()
    try:
        response = client.get("/healthz")
    finally:
        accounting_redis.cache_clear()
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable" and body["checks"]["postgres"] == "ok"
    assert body["checks"]["accounting_redis"].startswith("error: ConnectionError")


def test_openapi_documents_the_release_endpoints_with_bearer_auth(db, client):
    schema = client.get("/api/v1/openapi.json").json()
    for path in ("/api/v1/procs/unbook", "/api/v1/procs/{proc_id}/unbook"):
        assert schema["paths"][path]["post"]["security"] == [{"BearerToken": []}]


def test_malformed_json_is_422_with_a_detail(db, post):
    response = post("/api/v1/procs/unbook", raw="{")
    assert response.status_code == 422
    assert response.json()["detail"].startswith("malformed JSON body")


@pytest.mark.parametrize("spelling", ["view_accounting", "accounting.view_accounting"])
def test_create_api_token_grants_a_permission_spelled_as_the_403_spells_it(db, spelling):
    user = get_user_model().objects.create_user(username="dashboard")
    call_command("create_api_token", "dashboard", "--grant", spelling)
    assert get_user_model().objects.get(pk=user.pk).has_perm("accounting.view_accounting")


def test_create_api_token_refuses_an_unknown_permission_and_issues_nothing(db):
    get_user_model().objects.create_user(username="dashboard")
    with pytest.raises(CommandError, match="unknown permission 'accounting.everything'"):
        call_command("create_api_token", "dashboard", "--grant", "accounting.everything")
    assert not ApiToken.objects.exists()


def test_a_batch_answer_names_what_each_release_gave_back_and_a_gone_job_reads_so(farm, post):
    kept_job, kept_layer = farm.add_job()
    proc, gone = farm.add_proc(cores=100, layer=kept_layer), farm.add_proc(cores=100)
    farm.delete_job_as_cuebot_does(job=farm.job)
    body = post("/api/v1/procs/unbook", {"proc_ids": [proc.id, gone.id]}).json()
    names = [result["release"]["names"] for result in body["results"]]
    assert names[0] == {
        "show": farm.show.str_name,
        "alloc": farm.alloc.str_name,
        "folder": "root",
        "job": kept_job.str_name,
        "layer": "render",
        "dept": farm.dept.str_name,
    }
    assert names[1] == {
        "show": farm.show.str_name,
        "alloc": farm.alloc.str_name,
        "folder": None,
        "job": "gone",
        "layer": "gone",
        "dept": None,
    }


NAME_TABLES = ("show", "alloc", "folder", "job", "layer", "dept")


def name_reads(queries) -> list[str]:
    """The statements that read names: any SELECT of a name table's str_name."""
    return [
        q["sql"]
        for q in queries
        if q["sql"].lstrip().startswith("SELECT")
        and "str_name" in q["sql"]
        and any(f'"{table}"' in q["sql"] for table in NAME_TABLES)
    ]


def test_a_first_release_reads_every_name_in_one_query_and_a_second_reads_none(farm, post):
    # A job not seen lately misses all six names: one statement for them (issue 35), not one per kind.
    first, second = farm.add_proc(cores=100), farm.add_proc(cores=100)
    with CaptureQueriesContext(connection) as cold:
        body = post(f"/api/v1/procs/{first.id}/unbook").json()
    assert body["names"] == {
        "show": farm.show.str_name,
        "alloc": farm.alloc.str_name,
        "folder": "root",
        "job": farm.job.str_name,
        "layer": "render",
        "dept": farm.dept.str_name,
    }
    assert len(name_reads(cold.captured_queries)) == 1

    # The same job again: its names are in the process, no round trip for them.
    with CaptureQueriesContext(connection) as warm:
        assert post(f"/api/v1/procs/{second.id}/unbook").json()["names"] == body["names"]
    assert name_reads(warm.captured_queries) == []


def test_every_kind_of_release_answer_is_what_the_openapi_schema_declares(farm, post):
    # The endpoints return their answers rendered, not validated per request (infra.api.answered):
    # this holds a single answer and a batch's released, not-found and job-gone results to the models
    # the OpenAPI schema is built from, strictly (no coercion, nothing extra).
    from accounting.operators.release_api import ReleaseOut, UnbookBatchOut

    single = post(f"/api/v1/procs/{farm.add_proc(cores=250, gpus=1).id}/unbook")
    kept_job, kept_layer = farm.add_job()
    kept, gone = farm.add_proc(cores=100, layer=kept_layer), farm.add_proc(cores=100)
    farm.delete_job_as_cuebot_does(job=farm.job)
    batch = post("/api/v1/procs/unbook", {"proc_ids": [kept.id, "missing", gone.id]})

    assert single.status_code == batch.status_code == 200
    assert single["Content-Type"] == batch["Content-Type"] == "application/json; charset=utf-8"
    for model, body in ((ReleaseOut, single.json()), (UnbookBatchOut, batch.json())):
        assert model.model_validate(body, strict=True).model_dump(mode="json") == body
    assert [r["status"] for r in batch.json()["results"]] == ["released", "not_found", "released"]
    assert batch.json()["results"][2]["release"]["folder_id"] is None


def test_a_batchs_releases_of_one_layer_are_named_once(farm):
    # Named per distinct set of ids, that dict shared (a batch named proc by proc spent a quarter
    # of its request's CPU naming: issue 35); another job's release is named on its own.
    from accounting.operators.names import release_names
    from accounting.release.unbook import unbook_procs

    other_job, other_layer = farm.add_job()
    procs = [farm.add_proc(cores=100) for _ in range(3)] + [farm.add_proc(cores=100, layer=other_layer)]
    names = release_names(releases=[r for r in unbook_procs(proc_ids=[p.id for p in procs]) if r is not None])
    first, second, third, other = (names[p.id] for p in procs)
    assert first is second is third and other is not first
    assert (first["job"], other["job"]) == (farm.job.str_name, other_job.str_name)
    assert first["layer"] == other["layer"] == "render" and first["show"] == other["show"] == farm.show.str_name
