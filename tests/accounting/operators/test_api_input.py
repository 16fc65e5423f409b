"""Text that PostgreSQL cannot store (a NUL character) is refused at the API's edge with a
422, on every endpoint that looks something up, and nothing changes (found by fuzzing the
OpenAPI schema: each of these answered 500)."""

import json

import pytest

from accounting.models import FolderResource, JobResource, Point, Proc, Subscription
from accounting.operators import limits_api as accounting_api
from infra.api import bad_request, server_error
from infra.permissions import CHANGE_LIMITS, CHANGE_OWNERSHIP, RELEASE_PROCS, VIEW_ACCOUNTING

NUL = "%00"


@pytest.fixture
def staff_token(token_with) -> str:
    return token_with(RELEASE_PROCS, CHANGE_LIMITS, CHANGE_OWNERSHIP, VIEW_ACCOUNTING)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("post", f"/api/v1/procs/a{NUL}b/unbook", None),
        ("get", f"/api/v1/shows/a{NUL}b", None),
        ("put", f"/api/v1/shows/a{NUL}b/scheduler-managed", {"managed": True}),
        ("get", f"/api/v1/accounting/drift?show=a{NUL}b", None),
        ("patch", f"/api/v1/accounting/subscriptions/a{NUL}b/limits", {"size": 1}),
        ("patch", f"/api/v1/accounting/folders/a{NUL}b/limits", {"max_cores": 1}),
        ("patch", f"/api/v1/accounting/jobs/a{NUL}b/limits", {"max_cores": 1}),
        ("patch", f"/api/v1/accounting/points/a{NUL}b/limits", {"min_cores": 1}),
    ],
)
def test_a_nul_character_in_a_path_or_query_is_a_422(api_client, staff_token, method, url, body):
    data = json.dumps(body) if body is not None else None
    response = getattr(api_client, method)(
        url, data=data, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {staff_token}"
    )
    assert response.status_code == 422, response.content
    assert "NUL" in response.content.decode()


@pytest.mark.django_db
def test_a_nul_character_in_a_batch_is_a_422_and_releases_nothing(api_client, farm, staff_token):
    proc = farm.add_proc(cores=100)
    response = api_client.post(
        "/api/v1/procs/unbook",
        data=json.dumps({"proc_ids": [proc.id, "a\u0000b"]}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {staff_token}",
    )
    assert response.status_code == 422
    assert Proc.objects.filter(pk=proc.pk).exists()


# Out-of-range limits (found by fuzzing: PostgreSQL's "integer out of range", a 500): every
# field is bounded by its column, in the unit it is entered in (cores: the column's max / 100).
INT_MAX, BIGINT_MAX = 2**31 - 1, 2**63 - 1
SIZE_MAX = 10**14 - 1  # Cuebot's tier trigger keeps -size in a NUMERIC(16, 2) while nothing is booked
LIMIT_FIELDS = [
    ("subscriptions/{sub}", "size", SIZE_MAX // 100),
    ("subscriptions/{sub}", "burst", BIGINT_MAX // 100),
    ("folders/{folder}", "min_cores", INT_MAX // 100),
    ("folders/{folder}", "max_cores", INT_MAX // 100),
    ("folders/{folder}", "min_gpus", INT_MAX),
    ("folders/{folder}", "max_gpus", INT_MAX),
    ("jobs/{job}", "max_cores", INT_MAX // 100),
    ("jobs/{job}", "max_gpus", INT_MAX),
    ("jobs/{job}", "priority", INT_MAX),
    ("points/{point}", "min_cores", INT_MAX // 100),
    ("points/{point}", "min_gpus", INT_MAX),
]


@pytest.fixture
def limits_token(token_with) -> str:
    return token_with(CHANGE_LIMITS)


def patch_limits(client, farm, token: str, path: str, data, content_type: str = "application/json"):
    point = Point.objects.get_or_create(show=farm.show, dept=farm.dept)[0]
    url = (
        "/api/v1/accounting/"
        + path.format(sub=farm.subscription.id, folder=farm.folder.id, job=farm.job.id, point=point.id)
        + "/limits"
    )
    return client.patch(url, data=data, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}")


def limit_rows(farm) -> tuple:
    return (
        Subscription.objects.filter(pk=farm.subscription.pk).values_list("int_size", "int_burst").get(),
        FolderResource.objects.filter(folder=farm.folder)
        .values_list("int_min_cores", "int_max_cores", "int_min_gpus", "int_max_gpus")
        .get(),
        JobResource.objects.filter(job=farm.job).values_list("int_max_cores", "int_max_gpus", "int_priority").get(),
        tuple(Point.objects.filter(show=farm.show).values_list("int_min_cores", "int_min_gpus")),
    )


@pytest.mark.parametrize(("path", "field", "top"), LIMIT_FIELDS)
@pytest.mark.parametrize("beyond", [1, 2**64, 10**30])
def test_a_limit_beyond_its_column_is_a_422_naming_the_field(client, farm, limits_token, path, field, top, beyond):
    before = limit_rows(farm)
    response = patch_limits(client, farm, limits_token, path, json.dumps({field: top + beyond}))
    assert response.status_code == 422, response.content
    assert [error["loc"][-1] for error in response.json()["detail"]] == [field]
    assert limit_rows(farm) == before


@pytest.mark.parametrize(("path", "field", "top"), LIMIT_FIELDS)
def test_a_limit_at_its_columns_maximum_is_stored(client, farm, limits_token, path, field, top):
    response = patch_limits(client, farm, limits_token, path, json.dumps({field: top}))
    assert response.status_code == 200, response.content
    assert response.json()["limits"][field] == top


@pytest.mark.parametrize(
    "body",
    [
        "[]",
        '[{"size": 5}]',
        "5",
        '"size"',
        "null",
        "true",
        '{"sise": 5}',
        '{"size": -2}',
        '{"burst": false}',
        '{"size": true}',
        '{"size": "5"}',
        '{"size": 5.125}',
        '{"burst": -1}',
        '{"size": 1e3}',
        '{"size": NaN}',
        '{"size": -0.5}',
    ],
)
def test_a_limits_body_that_is_not_an_object_of_known_fields_is_a_422(client, farm, limits_token, body):
    before = limit_rows(farm)
    response = patch_limits(client, farm, limits_token, "subscriptions/{sub}", body)
    assert response.status_code == 422, response.content
    assert response.json()["detail"]
    assert limit_rows(farm) == before


def test_the_schema_states_each_limits_bounds_and_unique_proc_ids(client, db):
    schema = client.get("/api/v1/openapi.json").json()["components"]["schemas"]

    def bounds(name: str, field: str, kind: str) -> tuple:
        limit = next(option for option in schema[name]["properties"][field]["anyOf"] if option.get("type") == kind)
        return limit["minimum"], limit["maximum"]

    # Cores are numbers with up to two decimals: the exact maximum where a double holds it.
    assert bounds("FolderLimitsIn", "max_cores", "number") == (-1, 21474836.47)
    assert bounds("SubscriptionLimitsIn", "size", "number") == (0, 999999999999.99)
    assert bounds("SubscriptionLimitsIn", "burst", "number") == (0, BIGINT_MAX // 100)
    assert bounds("FolderLimitsIn", "min_gpus", "integer") == (0, INT_MAX)
    assert "two decimals" in schema["SubscriptionLimitsIn"]["properties"]["size"]["description"]
    assert schema["UnbookBatchIn"]["properties"]["proc_ids"]["uniqueItems"] is True
    assert schema["UnbookBatchIn"]["properties"]["proc_ids"]["items"]["pattern"] == "^[^\\u0000]*$"


def test_a_body_that_is_not_utf8_is_a_422(client, farm, limits_token):
    response = patch_limits(client, farm, limits_token, "subscriptions/{sub}", b'{"size": "\xff\xfe"}')
    assert response.status_code == 422
    assert "not UTF-8" in response.json()["detail"]


def test_an_oversized_body_is_a_json_413(client, farm, limits_token, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = patch_limits(
        client, farm, limits_token, "subscriptions/{sub}", json.dumps({"size": 1, "pad": "x" * 2000})
    )
    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json") and "too large" in response.json()["detail"]


def test_an_unexpected_failure_is_a_json_500_and_logged(client, farm, limits_token, monkeypatch, caplog):
    def broken(**kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(accounting_api, "set_subscription_limits", broken)
    response = patch_limits(client, farm, limits_token, "subscriptions/{sub}", json.dumps({"size": 1}))
    assert response.status_code == 500
    assert response.json() == {"detail": "internal server error; see the service's log"}
    assert any(record.exc_info and "boom" in str(record.exc_info[1]) for record in caplog.records)


def test_a_path_under_the_api_that_matches_nothing_is_a_json_404(client, db):
    response = client.get("/api/v1/no/such/endpoint")
    assert response.status_code == 404
    assert response.json() == {"detail": "no endpoint /api/v1/no/such/endpoint"}
    assert "json" not in client.get("/no-such-page")["Content-Type"]


@pytest.mark.parametrize(("handler", "status"), [(server_error, 500), (bad_request, 400)])
def test_djangos_error_pages_are_json_under_the_api_only(rf, handler, status):
    """For failures outside an endpoint (a middleware, the URL resolver): Django's handler500/400."""
    arguments = [] if handler is server_error else [ValueError("x")]
    api_answer = handler(rf.post("/api/v1/procs/unbook"), *arguments)
    assert api_answer.status_code == status and "detail" in json.loads(api_answer.content)
    page = handler(rf.get("/admin/"), *arguments)
    assert page.status_code == status and page["Content-Type"].startswith("text/html")


@pytest.mark.django_db
def test_a_limit_answer_speaks_cores_only(client, farm, staff_token):
    """`{"size": 160}` answers `"size": 160` (cores), and never the 16000 centicores stored beside it."""
    FolderResource.objects.filter(folder=farm.folder).update(int_min_cores=250)
    answers = {
        "sub": client.patch(
            f"/api/v1/accounting/subscriptions/{farm.subscription.id}/limits",
            data=json.dumps({"size": 160}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {staff_token}",
        ).json(),
        "folder": client.patch(
            f"/api/v1/accounting/folders/{farm.folder.id}/limits",
            data=json.dumps({"max_cores": -1}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {staff_token}",
        ).json(),
        "job": client.patch(
            f"/api/v1/accounting/jobs/{farm.job.id}/limits",
            data=json.dumps({"max_cores": 50}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {staff_token}",
        ).json(),
        "point": client.patch(
            f"/api/v1/accounting/points/{Point.objects.get(show=farm.show).id}/limits",
            data=json.dumps({"min_cores": 2}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {staff_token}",
        ).json(),
    }
    assert answers["sub"] == {"id": farm.subscription.id, "limits": {"size": 160, "burst": 200}}
    assert answers["job"] == {"job_id": farm.job.id, "limits": {"max_cores": 50, "max_gpus": 100, "priority": 1}}
    assert set(answers["folder"]) == {"folder_id", "limits"} and set(answers["point"]) == {"id", "limits"}
    assert answers["point"]["limits"] == {"min_cores": 2, "min_gpus": 0}
    assert answers["folder"]["limits"]["max_cores"] == -1 and answers["folder"]["limits"]["min_cores"] == 2.5
