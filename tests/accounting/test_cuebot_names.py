"""Names as a Cuebot site has them: job names repeat over time, show names are not unique."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from accounting.live import keys
from accounting.models import JobResource, Subscription
from accounting.operators.auth import grant_permissions, issue_token
from accounting.reconcile.reseed import reseed
from infra.permissions import VIEW_ACCOUNTING
from shows.models import Job, Show
from tests.farms import build_farm
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db


def test_set_job_limits_changes_the_live_job_of_a_name_not_a_finished_one(cuebot_farm):
    finished, _ = cuebot_farm.add_job(state="FINISHED")
    live, _ = cuebot_farm.add_job()
    with as_cuebot():
        Job.objects.filter(pk=live.pk).update(str_name=finished.str_name, str_visible_name=finished.str_name)

    call_command("set_job_limits", finished.str_name, "--max-cores", "7")

    assert JobResource.objects.get(job=live).int_max_cores == 700
    assert JobResource.objects.get(job=finished).int_max_cores == 10000


def test_a_finished_job_is_not_found_by_its_old_name(cuebot_farm):
    finished, _ = cuebot_farm.add_job(state="FINISHED")
    with pytest.raises(CommandError, match="no live job named") as error:
        call_command("set_job_limits", finished.str_name, "--max-cores", "7")
    assert error.value.returncode == 2


def test_a_job_can_be_named_by_its_id(cuebot_farm):
    call_command("set_job_limits", cuebot_farm.job.id, "--priority", "5")
    assert JobResource.objects.get(job=cuebot_farm.job).int_priority == 5


@pytest.mark.parametrize(
    "command",
    [
        ["set_scheduler_managed", "{name}", "true"],
        ["set_subscription", "{name}", "{alloc}", "--size", "5"],
        ["set_folder_limits", "{name}", "root", "--max-cores", "5"],
        ["acct_drift", "--show", "{name}"],
        ["acct_reseed", "--show", "{name}"],
    ],
)
def test_a_show_name_two_shows_carry_is_refused_not_guessed(command, seeded_redis):
    first, second = build_farm(managed=False), build_farm(managed=False)
    Show.objects.filter(pk=second.show.pk).update(str_name=first.show.str_name)
    before = list(Subscription.objects.order_by("pk").values_list("int_size", "int_burst"))

    with pytest.raises(CommandError, match="several shows are named") as error:
        call_command(*[part.format(name=first.show.str_name, alloc=first.alloc.str_name) for part in command])

    assert error.value.returncode == 2
    assert list(Subscription.objects.order_by("pk").values_list("int_size", "int_burst")) == before
    assert not Show.objects.filter(b_scheduler_managed=True).exists()


def test_the_api_answers_409_for_a_show_name_two_shows_carry(client, django_user_model):
    first, second = build_farm(managed=False), build_farm(managed=False)
    Show.objects.filter(pk=second.show.pk).update(str_name=first.show.str_name)
    user = django_user_model.objects.create_user(username="op", is_staff=True)
    grant_permissions(user=user, permissions=[VIEW_ACCOUNTING])
    token = issue_token(user=user)

    response = client.get(f"/api/v1/shows/{first.show.str_name}", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 409 and "several shows are named" in response.json()["detail"]


def test_a_burst_of_minus_one_already_in_postgres_reaches_redis_as_the_schedulers_reseed_writes_it(farm, seeded_redis):
    """An older tool may have stored -1; the scheduler's own limit reseed writes it as 0."""
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_burst=-1)

    reseed(show_ids=[farm.show.id], limits=True, booked=False)

    assert seeded_redis.hget(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "burst") == "0"
