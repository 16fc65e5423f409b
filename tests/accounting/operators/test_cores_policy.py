"""One decimals policy for cores a person types, on the three faces: a command, the API and
the admin accept the same values (up to two decimals, what PostgreSQL's centicores hold
exactly), refuse the same ones with the same sentence (accounting.live.units.parse_cores),
and change nothing, in PostgreSQL or Redis, when they refuse."""

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.forms.models import model_to_dict
from django.urls import reverse

from accounting.live import keys
from accounting.live.units import NOT_UNLIMITED_HERE, TOO_FINE, WHOLE_CORES
from accounting.models import FolderResource, JobResource, Point, Subscription
from infra.permissions import CHANGE_LIMITS

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_redis")]

NUMBER = "Enter a number of cores such as 4, 2.5 or 0.25."
NUMBER_OR_UNLIMITED = "Enter a number of cores such as 4, 2.5 or 0.25, or -1 for unlimited."


def command_refusal(farm, field: str, text: str) -> str:
    """What `manage.py set_*` says when it refuses `text` for `field`."""
    show, alloc, folder, job = farm.show.str_name, farm.alloc.str_name, farm.folder.str_name, farm.job.str_name
    args = {
        "size": ["set_subscription", show, alloc, "--size"],
        "burst": ["set_subscription", show, alloc, "--burst"],
        "folder_max": ["set_folder_limits", show, folder, "--max-cores"],
        "job_max": ["set_job_limits", job, "--max-cores"],
    }[field]
    with pytest.raises(CommandError) as refused:
        call_command(*args, text)
    assert refused.value.returncode == 2
    return str(refused.value)


def api_patch(client, token: str, farm, field: str, json_value: str):
    """PATCH the limit with the JSON value written as given (the raw text: 2.125 stays 2.125)."""
    path, name = {
        "size": (f"subscriptions/{farm.subscription.id}", "size"),
        "burst": (f"subscriptions/{farm.subscription.id}", "burst"),
        "folder_max": (f"folders/{farm.folder.id}", "max_cores"),
        "job_max": (f"jobs/{farm.job.id}", "max_cores"),
    }[field]
    return client.patch(
        f"/api/v1/accounting/{path}/limits",
        f'{{"{name}": {json_value}}}',
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def api_refusal(client, token: str, farm, field: str, json_value: str) -> str:
    answer = api_patch(client, token, farm, field, json_value)
    assert answer.status_code == 422, answer.content
    [error] = answer.json()["detail"]
    assert error["loc"][-1] in ("size", "burst", "max_cores")
    return error["msg"]


ADMIN = {
    "size": ("subscription", "int_size"),
    "burst": ("subscription", "int_burst"),
    "folder_max": ("folderresource", "int_max_cores"),
    "job_max": ("jobresource", "int_max_cores"),
}


def admin_row(farm, field: str):
    model_name = ADMIN[field][0]
    return {
        "subscription": farm.subscription,
        "folderresource": farm.folder_resource,
        "jobresource": JobResource.objects.get(job=farm.job),
    }[model_name]


def admin_post(admin_client, farm, field: str, text: str):
    """Post the change form as a browser would: every field as shown, `field` typed anew."""
    row = admin_row(farm, field)
    url = reverse(f"admin:accounting_{ADMIN[field][0]}_change", args=[row.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {name: form[name].field.prepare_value(form[name].value()) for name in form.fields}
    data[ADMIN[field][1]] = text
    return admin_client.post(url, data)


def admin_refusal(admin_client, farm, field: str, text: str) -> str:
    response = admin_post(admin_client, farm, field, text)
    assert response.status_code == 200  # the form again, with the error
    [message] = response.context["adminform"].form.errors[ADMIN[field][1]]
    return message


def everything(farm, acct_redis) -> tuple:
    """Every limit row and every accounting key, to show a refusal changed nothing."""
    rows = tuple(
        tuple(model_to_dict(row).items())
        for model in (Subscription, FolderResource, JobResource, Point)
        for row in model.objects.order_by("pk")
    )
    return rows, {
        key: acct_redis.hgetall(key) if acct_redis.type(key) == "hash" else acct_redis.get(key)
        for key in acct_redis.keys("acct:*")
    }


REFUSED = [
    # (field, as typed, as a JSON value, the one message)
    ("size", "2.125", "2.125", TOO_FINE),
    ("size", "0.001", "0.001", TOO_FINE),
    ("job_max", "19.999", "19.999", TOO_FINE),
    ("burst", "1e3", "1e3", NUMBER),
    ("burst", "lots", '"lots"', NUMBER),
    ("burst", "-0.5", "-0.5", NUMBER),
    ("size", "-1", "-1", NOT_UNLIMITED_HERE),
    ("job_max", "-1", "-1", NOT_UNLIMITED_HERE),
    ("folder_max", "-2", "-2", NUMBER_OR_UNLIMITED),
    ("folder_max", "1.005", "1.005", TOO_FINE),
    ("job_max", "21474836.48", "21474836.48", "At most 21474836 cores here."),
    # Caps Cuebot keeps in whole cores (Convert.coresToWholeCoreUnits in its setters).
    ("folder_max", "1.5", "1.5", WHOLE_CORES),
    ("job_max", "2.5", "2.5", WHOLE_CORES),
    ("size", "1000000000000", "1000000000000", "At most 999999999999.99 cores here."),
]


@pytest.mark.parametrize(("field", "typed", "json_value", "message"), REFUSED)
def test_each_face_refuses_with_the_same_message_and_changes_nothing(
    farm, acct_redis, client, token_with, admin_client, field, typed, json_value, message
):
    token = token_with(CHANGE_LIMITS)
    before = everything(farm, acct_redis)

    assert f": {message} (got {typed!r}; nothing changed)" in command_refusal(farm, field, typed)
    assert api_refusal(client, token, farm, field, json_value) == message
    assert admin_refusal(admin_client, farm, field, typed) == message

    assert everything(farm, acct_redis) == before


@pytest.mark.parametrize(
    ("typed", "centicores", "in_redis", "echo"),
    [
        ("2.5", 250, "2", 2.5),
        ("0.25", 25, "0", 0.25),
        ("19.99", 1999, "19", 19.99),
        ("12", 1200, "12", 12),
        ("1.0", 100, "1", 1),
    ],
)
def test_each_face_takes_up_to_two_decimals_exactly(
    farm,
    acct_redis,
    client,
    token_with,
    admin_client,
    django_capture_on_commit_callbacks,
    typed,
    centicores,
    in_redis,
    echo,
):
    """A subscription's burst (Cuebot keeps hundredths there): stored exactly in centicores;
    Redis gets the whole cores (truncated, as every conversion does); the command and the API
    echo cores, never centicores."""
    token, key = token_with(CHANGE_LIMITS), keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)

    def stored() -> int:
        return Subscription.objects.get(pk=farm.subscription.pk).int_burst

    Subscription.objects.filter(pk=farm.subscription.pk).update(int_burst=9900)
    with django_capture_on_commit_callbacks(execute=True):
        call_command("set_subscription", farm.show.str_name, farm.alloc.str_name, "--burst", typed)
    assert (stored(), acct_redis.hget(key, "burst")) == (centicores, in_redis)

    Subscription.objects.filter(pk=farm.subscription.pk).update(int_burst=9900)
    with django_capture_on_commit_callbacks(execute=True):
        answer = api_patch(client, token, farm, "burst", typed)
    assert answer.status_code == 200, answer.content
    assert answer.json()["limits"] == {"size": 100, "burst": echo}
    assert (stored(), acct_redis.hget(key, "burst")) == (centicores, in_redis)

    Subscription.objects.filter(pk=farm.subscription.pk).update(int_burst=9900)
    with django_capture_on_commit_callbacks(execute=True):
        assert admin_post(admin_client, farm, "burst", typed).status_code == 302
    assert (stored(), acct_redis.hget(key, "burst")) == (centicores, in_redis)


def test_the_command_echoes_cores_exactly_however_large(farm, capsys, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        call_command(
            "set_subscription", farm.show.str_name, farm.alloc.str_name, "--size", "999999999999", "--burst", "2.5"
        )
    out = capsys.readouterr().out
    assert out.strip() == f"{farm.show.str_name}/{farm.alloc.str_name}: size 999999999999 cores, burst 2.5 cores"
    assert "e+" not in out


def test_the_api_answers_cores_exactly_however_large(farm, client, token_with):
    answer = api_patch(client, token_with(CHANGE_LIMITS), farm, "size", "999999999999")
    assert answer.status_code == 200
    # Written as digits (the API's JSON is compact: orjson writes no space after a colon).
    assert '"size":999999999999,' in answer.content.decode() and "e+" not in answer.content.decode()


@pytest.mark.parametrize(("typed", "json_value"), [("-1", "-1"), ("unlimited", None)])
def test_unlimited_is_minus_one_verbatim_where_cuebot_reads_it_so(
    farm, acct_redis, client, token_with, admin_client, django_capture_on_commit_callbacks, typed, json_value
):
    """A folder's max: -1 on every face ('unlimited' too where a person types text), stored and
    published as -1; 2 is one core or more, so Cuebot's folder DAO takes it."""
    key = keys.folder(folder_id=farm.folder.id)

    def reset() -> None:
        FolderResource.objects.filter(folder=farm.folder).update(int_max_cores=300)

    def stored() -> tuple:
        return FolderResource.objects.get(folder=farm.folder).int_max_cores, acct_redis.hget(key, "int_max_cores")

    reset()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("set_folder_limits", farm.show.str_name, farm.folder.str_name, "--max-cores", typed)
    assert stored() == (-1, "-1")
    if json_value is not None:
        reset()
        with django_capture_on_commit_callbacks(execute=True):
            answer = api_patch(client, token_with(CHANGE_LIMITS), farm, "folder_max", json_value)
        assert answer.json()["limits"]["max_cores"] == -1 and stored() == (-1, "-1")
    reset()
    with django_capture_on_commit_callbacks(execute=True):
        assert admin_post(admin_client, farm, "folder_max", typed).status_code == 302
    assert stored() == (-1, "-1")

    with django_capture_on_commit_callbacks(execute=True):
        call_command("set_folder_limits", farm.show.str_name, farm.folder.str_name, "--max-cores", "2")
    assert stored() == (200, "2")


def test_a_json_string_is_no_number_of_cores_even_unlimited(farm, client, token_with):
    token = token_with(CHANGE_LIMITS)
    before = FolderResource.objects.get(folder=farm.folder).int_max_cores
    for value in ('"unlimited"', '"2.5"', "true", "null"):
        answer = api_patch(client, token, farm, "folder_max", value)
        if value == "null":  # null leaves the field as it is, like an absent one
            assert answer.status_code == 200
            continue
        assert answer.status_code == 422 and answer.json()["detail"][0]["msg"] == NUMBER_OR_UNLIMITED, answer.content
    assert FolderResource.objects.get(folder=farm.folder).int_max_cores == before
    assert json.loads(api_patch(client, token, farm, "folder_max", "3").content)["limits"]["max_cores"] == 3
