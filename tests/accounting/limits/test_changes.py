"""Limit changes: PostgreSQL first, Redis after commit, only for scheduler-managed shows."""

import pytest
import redis
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.urls import reverse
from prometheus_client import REGISTRY

from accounting.limits import changes as limits
from accounting.limits.changes import (
    InvalidLimit,
    set_folder_limits,
    set_job_limits,
    set_point_limits,
    set_subscription_limits,
)
from accounting.live import keys
from accounting.live.units import NOT_UNLIMITED_HERE
from accounting.models import FolderResource, JobResource, Point, Subscription
from infra.metrics import LIMIT_PUBLISH_FAILURES
from infra.permissions import CHANGE_LIMITS
from tests.processes import manage

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_redis")]


def sub_key(farm) -> str:
    return keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)


def test_subscription_change_reaches_redis_after_commit_and_bumps_seq(
    farm, acct_redis, django_capture_on_commit_callbacks
):
    acct_redis.set(keys.SEQ, 41)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        set_subscription_limits(subscription=farm.subscription, size=25050, burst=30000)
    assert not acct_redis.exists(sub_key(farm))  # nothing before commit
    for callback in callbacks:
        callback()
    assert acct_redis.hmget(sub_key(farm), "size", "burst") == ["250", "300"]
    assert acct_redis.get(keys.SEQ) == "42"
    farm.subscription.refresh_from_db()
    assert (farm.subscription.int_size, farm.subscription.int_burst) == (25050, 30000)


def refused_writes() -> float:
    return REGISTRY.get_sample_value("cuebot_acct_limit_writes_refused_total") or 0.0


def test_change_on_a_redis_not_seeded_since_a_restart_opens_nothing_and_says_so(
    farm, acct_redis, caplog, capsys, django_capture_on_commit_callbacks
):
    """A burst written to a restarted Redis would open the subscription with its counters
    reading 0; the rebuild writes the committed value after rebuilding them. Meanwhile the
    refusal is loud: WARN, a metric, and the drift inspector names it."""
    acct_redis.flushdb()  # restart: the marker goes too
    before = refused_writes()
    with django_capture_on_commit_callbacks(execute=True):
        set_subscription_limits(subscription=farm.subscription, burst=30000)
    assert not acct_redis.exists(sub_key(farm))
    assert Subscription.objects.get(pk=farm.subscription.pk).int_burst == 30000
    assert refused_writes() == before + 1
    assert any(
        r.levelname == "WARNING" and "refused" in r.getMessage() and sub_key(farm) in r.getMessage()
        for r in caplog.records
    )
    with pytest.raises(SystemExit):
        call_command("acct_drift")
    out = capsys.readouterr().out
    assert (
        f"{farm.show.str_name} / {farm.alloc.str_name}\tburst in cores (burst)\tredis=None\tpg=300\tdiff=-300\tcause: limit write refused"
        in out
        and f"\t{sub_key(farm)}\n" in out
    )


def test_change_after_the_schedulers_own_rebuild_reaches_redis(farm, acct_redis, django_capture_on_commit_callbacks):
    """The scheduler's bootstrap rebuilds an empty Redis (counters, then limit fields) but
    knows nothing of acct:seeded. Its keys are open already: a limit change must reach them."""
    acct_redis.flushdb()
    acct_redis.hset(sub_key(farm), mapping={"int_cores": 0, "int_gpus": 0, "size": 100, "burst": 200})
    acct_redis.hset(
        keys.job(job_id=farm.job.id),
        mapping={"int_cores": 0, "int_gpus": 0, "int_max_cores": 10, "int_max_gpus": 0, "int_priority": 1},
    )
    acct_redis.set(keys.SEQ, 7)
    before = refused_writes()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("set_subscription", farm.show.str_name, farm.alloc.str_name, "--burst", "1500")
        set_job_limits(job_resource=farm.job.resource, max_cores=2000)
    assert acct_redis.hget(sub_key(farm), "burst") == "1500"
    assert acct_redis.hget(keys.job(job_id=farm.job.id), "int_max_cores") == "20"
    assert acct_redis.get(keys.SEQ) == "9"
    assert refused_writes() == before
    assert not acct_redis.exists(keys.SEEDED)  # opening keys is still the rebuild's job


def test_cuebot_managed_show_changes_stay_in_postgres(cuebot_farm, acct_redis, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        set_subscription_limits(subscription=cuebot_farm.subscription, size=500)
        set_job_limits(job_resource=cuebot_farm.job.resource, max_cores=5000)
    assert acct_redis.keys("acct:*") == [keys.SEEDED]
    assert Subscription.objects.get(pk=cuebot_farm.subscription.pk).int_size == 500


def test_folder_job_and_point_fields(farm, acct_redis, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        set_folder_limits(folder_resource=farm.folder_resource, min_cores=100, max_cores=-1, min_gpus=1, max_gpus=4)
        set_job_limits(job_resource=farm.job.resource, max_cores=1900, max_gpus=2, priority=50)
        set_point_limits(point=Point.objects.get(show=farm.show), min_cores=300, min_gpus=2)
    assert acct_redis.hmget(
        keys.folder(folder_id=farm.folder.id), "int_min_cores", "int_max_cores", "int_min_gpus", "int_max_gpus"
    ) == ["1", "-1", "1", "4"]
    assert acct_redis.hmget(keys.job(job_id=farm.job.id), "int_max_cores", "int_max_gpus", "int_priority") == [
        "19",
        "2",
        "50",
    ]
    assert acct_redis.hmget(
        keys.point(dept_id=farm.dept.id, show_id=farm.show.id), "int_min_cores", "int_min_gpus"
    ) == ["3", "2"]
    assert acct_redis.get(keys.SEQ) == "3"


def test_rolled_back_change_publishes_nothing(farm, acct_redis, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError), transaction.atomic():
            set_subscription_limits(subscription=farm.subscription, size=900)
            raise RuntimeError("abort")
    assert acct_redis.keys("acct:*") == [keys.SEEDED]
    assert Subscription.objects.get(pk=farm.subscription.pk).int_size == 10000


def test_redis_failure_is_counted_and_swallowed(farm, acct_redis, django_capture_on_commit_callbacks, monkeypatch):
    class Down:
        def evalsha(self, *args):
            raise redis.ConnectionError("down")

    monkeypatch.setattr(limits, "accounting_redis", lambda: Down())
    before = LIMIT_PUBLISH_FAILURES._value.get()
    with django_capture_on_commit_callbacks(execute=True):
        set_subscription_limits(subscription=farm.subscription, size=900)
    assert LIMIT_PUBLISH_FAILURES._value.get() == before + 1
    assert Subscription.objects.get(pk=farm.subscription.pk).int_size == 900


def test_a_value_beyond_the_column_is_refused_by_the_service_too(farm):
    with pytest.raises(InvalidLimit, match="int_max_gpus must be at most 2147483647"):
        set_job_limits(job_resource=farm.job.resource, max_gpus=2**31)
    with pytest.raises(InvalidLimit, match="int_size must be at most 99999999999999"):
        set_subscription_limits(subscription=farm.subscription, size=10**14)
    assert JobResource.objects.get(pk=farm.job.resource.pk).int_max_gpus == 100


def test_the_limit_commands_refuse_from_the_shell_with_exit_2_and_no_traceback(db):
    for value in ("\u0663", str(2**63)):
        done = manage("set_subscription", "show", "alloc", "--size", value, settings="settings.test")
        assert done.returncode == 2, done.stderr
        assert "--size:" in done.stderr and "Traceback" not in done.stderr


def test_invalid_value_changes_nothing(farm):
    with pytest.raises(InvalidLimit):
        set_job_limits(job_resource=farm.job.resource, max_cores=500, max_gpus=-5)
    assert JobResource.objects.get(pk=farm.job.resource.pk).int_max_cores == 10000


def test_set_subscription_command_in_cores(farm, acct_redis, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("set_subscription", farm.show.str_name, farm.alloc.str_name, "--size", "150", "--burst", "300")
    assert acct_redis.hmget(sub_key(farm), "size", "burst") == ["150", "300"]
    assert Subscription.objects.filter(pk=farm.subscription.pk, int_size=15000, int_burst=30000).exists()


def test_set_job_and_folder_limits_commands(farm, acct_redis, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("set_job_limits", farm.job.str_name, "--max-cores", "12", "--priority", "7")
        call_command(
            "set_folder_limits", farm.show.str_name, farm.folder.str_name, "--max-cores", "64", "--max-gpus", "2"
        )
    assert acct_redis.hmget(keys.job(job_id=farm.job.id), "int_max_cores", "int_priority") == ["12", "7"]
    assert acct_redis.hmget(keys.folder(folder_id=farm.folder.id), "int_max_cores", "int_max_gpus") == ["64", "2"]
    assert FolderResource.objects.get(folder=farm.folder).int_max_cores == 6400


@pytest.mark.parametrize(
    "command, args",
    [
        ("set_subscription", ["{show}", "{alloc}", "--size", "-3"]),
        ("set_subscription", ["{show}", "{alloc}", "--burst", "lots"]),
        ("set_subscription", ["{show}", "nosuchalloc", "--size", "10"]),
        ("set_subscription", ["{show}", "{alloc}"]),
        ("set_job_limits", ["nosuchjob", "--max-cores", "10"]),
        ("set_job_limits", ["{job}", "--max-cores", "1.125"]),
        ("set_job_limits", ["{job}", "--max-cores", "1e3"]),
        ("set_folder_limits", ["{show}", "{folder}", "--max-cores", "0.5"]),
        ("set_folder_limits", ["{show}", "nosuchfolder", "--max-cores", "10"]),
        ("set_folder_limits", ["{show}", "{folder}", "--min-gpus", "-2"]),
        # -1 is unlimited only for a folder's maxima: Cuebot compares these as numbers.
        ("set_subscription", ["{show}", "{alloc}", "--burst", "-1"]),
        ("set_job_limits", ["{job}", "--max-cores", "-1"]),
        ("set_job_limits", ["{job}", "--max-gpus", "-1"]),
        ("set_folder_limits", ["{show}", "{folder}", "--min-cores", "-1"]),
        # Only ASCII digits (int() takes these), and at most what the column holds.
        ("set_subscription", ["{show}", "{alloc}", "--size", " 7"]),
        ("set_subscription", ["{show}", "{alloc}", "--size", "\u0663"]),
        ("set_job_limits", ["{job}", "--priority", "+7"]),
        ("set_job_limits", ["{job}", "--max-gpus", "7\n"]),
        ("set_subscription", ["{show}", "{alloc}", "--size", str((10**14 - 1) // 100 + 1)]),
        ("set_subscription", ["{show}", "{alloc}", "--burst", str(2**63 // 100 + 1)]),
        ("set_job_limits", ["{job}", "--max-cores", str(2**31 // 100 + 1)]),
        ("set_job_limits", ["{job}", "--priority", str(2**31)]),
        ("set_folder_limits", ["{show}", "{folder}", "--max-cores", str(2**31 // 100 + 1)]),
        ("set_folder_limits", ["{show}", "{folder}", "--min-gpus", str(2**31)]),
    ],
)
def test_bad_command_input_exits_2_and_changes_nothing(
    farm, acct_redis, command, args, django_capture_on_commit_callbacks
):
    names = dict(show=farm.show.str_name, alloc=farm.alloc.str_name, job=farm.job.str_name, folder=farm.folder.str_name)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(CommandError) as error:
        call_command(command, *[a.format(**names) for a in args])
    assert error.value.returncode == 2
    assert acct_redis.keys("acct:*") == [keys.SEEDED]
    assert Subscription.objects.filter(pk=farm.subscription.pk, int_size=10000, int_burst=20000).exists()
    assert JobResource.objects.filter(pk=farm.job.resource.pk, int_max_cores=10000).exists()
    assert FolderResource.objects.filter(folder=farm.folder, int_max_cores=-1, int_min_gpus=0).exists()


def test_admin_change_form_publishes_after_commit(farm, acct_redis, client, django_capture_on_commit_callbacks):
    """The admin takes cores (docs/admin.md) and saves through set_subscription_limits."""
    admin = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(admin)
    sub = farm.subscription
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(
            f"/admin/accounting/subscription/{sub.pk}/change/", {"int_size": "42", "int_burst": "84"}
        )
    assert len(callbacks) == 1
    assert response.status_code == 302, response.content.decode()[:2000]
    assert acct_redis.hmget(sub_key(farm), "size", "burst") == ["42", "84"]
    assert Subscription.objects.filter(pk=sub.pk, int_size=4200, int_burst=8400).exists()


NOT_UNLIMITED = "Use a value of 0 or more (-1 is not unlimited here)."
NOT_CORES = "Enter a number of cores such as 4, 2.5 or 0.25."


@pytest.mark.parametrize(
    ("model_admin", "field", "value", "message"),
    [
        ("subscription", "int_burst", "-5", NOT_CORES),
        ("subscription", "int_burst", "-1", NOT_UNLIMITED_HERE),
        (
            "folderresource",
            "int_max_cores",
            "-2",
            "Enter a number of cores such as 4, 2.5 or 0.25, or -1 for unlimited.",
        ),
        ("jobresource", "int_max_cores", "-100", NOT_CORES),
        ("jobresource", "int_max_gpus", "-1", NOT_UNLIMITED),
        ("point", "int_min_cores", "-3", NOT_CORES),
    ],
)
def test_admin_change_form_refuses_a_negative_limit_other_than_unlimited(
    farm, acct_redis, client, model_admin, field, value, message
):
    from django.forms.models import model_to_dict

    from accounting.models import Point

    admin_user = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(admin_user)
    instance = {
        "subscription": farm.subscription,
        "folderresource": FolderResource.objects.get(folder=farm.folder),
        "jobresource": JobResource.objects.get(job=farm.job),
        "point": Point.objects.get(show=farm.show),
    }[model_admin]
    url = f"/admin/accounting/{model_admin}/{instance.pk}/change/"
    before = model_to_dict(type(instance).objects.get(pk=instance.pk))
    seq_before = acct_redis.get(keys.SEQ)
    shown = client.get(url).context["adminform"].form
    form = {name: shown[name].field.prepare_value(shown[name].value()) for name in shown.fields}
    form[field] = value

    response = client.post(url, form)

    assert response.status_code == 200  # the form comes back with the error; nothing was saved
    assert message in response.content.decode()
    assert model_to_dict(type(instance).objects.get(pk=instance.pk)) == before
    assert acct_redis.get(keys.SEQ) == seq_before


@pytest.mark.parametrize("max_cores", [0])
def test_a_folder_max_below_one_core_is_refused_on_every_path_as_cuebots_folder_dao_refuses_it(
    farm,
    max_cores,
    client,
    token_with,
    admin_client,
):
    token = token_with(CHANGE_LIMITS)
    # GroupDaoJdbc.updateMaxCores: "must be a whole core or greater" unless -1. A stored 0 is
    # "book nothing" to Cuebot's dispatcher and "no cap" to the scheduler (cap > 0 checks).
    with pytest.raises(InvalidLimit, match="one core or more"):
        set_folder_limits(folder_resource=farm.folder_resource, max_cores=max_cores)

    cores = f"{max_cores / 100:g}"
    with pytest.raises(CommandError, match=rf"one core or more .*; got {cores} cores"):
        call_command("set_folder_limits", farm.show.str_name, farm.folder.str_name, "--max-cores", cores)
    answer = client.patch(
        f"/api/v1/accounting/folders/{farm.folder.id}/limits",
        f'{{"max_cores": {cores}}}',
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code == 422 and "one core or more" in answer.json()["detail"]

    url = reverse("admin:accounting_folderresource_change", args=[farm.folder_resource.pk])
    refused = admin_client.post(
        url, {"int_min_cores": "0", "int_max_cores": cores, "int_min_gpus": "0", "int_max_gpus": "-1"}
    )
    assert "one core or more" in str(refused.context["adminform"].form.errors["int_max_cores"])

    assert FolderResource.objects.get(pk=farm.folder_resource.pk).int_max_cores == -1  # unchanged


def test_a_folder_max_of_one_core_or_unlimited_is_taken(farm):
    assert set_folder_limits(folder_resource=farm.folder_resource, max_cores=100).int_max_cores == 100
    assert set_folder_limits(folder_resource=farm.folder_resource, max_cores=200).int_max_cores == 200
    assert set_folder_limits(folder_resource=farm.folder_resource, max_cores=-1).int_max_cores == -1
