"""acct_limit_change: the five caps the scheduler enforces live, heard in the transaction of their
UPDATE for a scheduler-managed show, as Cuebot's DAOs send them (SubscriptionDaoJdbc.updateSubscriptionBurst,
GroupDaoJdbc.updateMaxCores/updateMaxGpus, JobDaoJdbc.updateMaxCores/updateMaxGpus), through every
path of this project: the services, the commands, the API and the admin."""

import json

import pytest
from django.core.management import call_command
from django.db import transaction

from accounting.limits.changes import (
    set_folder_limits,
    set_job_limits,
    set_point_limits,
    set_subscription_limits,
)
from accounting.models import JobResource, Point
from accounting.notify.listen import decode
from accounting.notify.payloads import LIMIT_CHANGE
from infra.permissions import CHANGE_LIMITS
from tests.farms import build_farm

pytestmark = pytest.mark.usefixtures("notify_on")


def test_notify_alone_writes_no_limit_to_redis(ear, acct_redis, settings):
    settings.ACCOUNTING_SCHEDULER = "notify"
    farm = build_farm(managed=True)
    set_subscription_limits(subscription=farm.subscription, burst=25000)
    assert len(ear.collect()) == 1
    assert acct_redis.keys("*") == []


def test_the_five_caps_are_heard_one_field_each(ear):
    farm = build_farm(managed=True)
    set_subscription_limits(subscription=farm.subscription, burst=25000)
    set_folder_limits(folder_resource=farm.folder_resource, max_cores=-1, max_gpus=3)
    set_job_limits(job_resource=JobResource.objects.get(job=farm.job), max_cores=1200, max_gpus=2)

    got = ear.collect()
    assert got == [
        (LIMIT_CHANGE, '{"vertex":"sub","show":"%s","alloc":"%s","burst":250}' % (farm.show.id, farm.alloc.id)),
        (LIMIT_CHANGE, '{"vertex":"folder","id":"%s","max_cores":-1}' % farm.folder.id),
        (LIMIT_CHANGE, '{"vertex":"folder","id":"%s","max_gpus":3}' % farm.folder.id),
        (LIMIT_CHANGE, '{"vertex":"job","id":"%s","max_cores":12}' % farm.job.id),
        (LIMIT_CHANGE, '{"vertex":"job","id":"%s","max_gpus":2}' % farm.job.id),
    ]
    assert [decode(channel=c, payload=p).problem for c, p in got] == [None] * 5


def test_sizes_minimums_priorities_and_points_are_left_to_the_limit_reseed(ear):
    farm = build_farm(managed=True)
    set_subscription_limits(subscription=farm.subscription, size=5000)
    set_folder_limits(folder_resource=farm.folder_resource, min_cores=100, min_gpus=1)
    set_job_limits(job_resource=JobResource.objects.get(job=farm.job), priority=50)
    set_point_limits(point=Point.objects.get(show=farm.show, dept=farm.dept), min_cores=300)
    assert ear.collect() == []


def test_a_cuebot_managed_shows_caps_are_not_heard(ear):
    farm = build_farm(managed=False)
    set_subscription_limits(subscription=farm.subscription, burst=25000)
    set_folder_limits(folder_resource=farm.folder_resource, max_cores=500)
    assert ear.collect() == []


def test_a_cap_change_that_rolls_back_is_not_heard(ear):
    farm = build_farm(managed=True)
    with pytest.raises(RuntimeError), transaction.atomic():
        set_subscription_limits(subscription=farm.subscription, burst=25000)
        raise RuntimeError("rolled back")
    assert ear.collect() == []


def test_the_command_the_api_and_the_admin_are_heard_too(ear, client, token_with, django_user_model):
    farm = build_farm(managed=True)
    call_command("set_subscription", farm.show.str_name, farm.alloc.str_name, "--burst", "300")
    response = client.patch(
        f"/api/v1/accounting/folders/{farm.folder.id}/limits",
        data=json.dumps({"max_cores": 40}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token_with(CHANGE_LIMITS)}",
    )
    assert response.status_code == 200
    admin = django_user_model.objects.create_superuser(username="root")
    client.force_login(admin)
    job_resource = JobResource.objects.get(job=farm.job)
    page = client.post(
        f"/admin/accounting/jobresource/{job_resource.pk}/change/",
        {
            "int_max_cores": "7",
            "int_max_gpus": str(job_resource.int_max_gpus),
            "int_priority": str(job_resource.int_priority),
        },
    )
    assert page.status_code == 302, page.content.decode()[:2000]

    assert ear.collect() == [
        (LIMIT_CHANGE, '{"vertex":"sub","show":"%s","alloc":"%s","burst":300}' % (farm.show.id, farm.alloc.id)),
        (LIMIT_CHANGE, '{"vertex":"folder","id":"%s","max_cores":40}' % farm.folder.id),
        (LIMIT_CHANGE, '{"vertex":"job","id":"%s","max_cores":7}' % farm.job.id),
    ]
