"""The demo farm command leaves Redis seeded for its scheduler-managed shows."""

import pytest
from django.core.management import call_command

from accounting.reconcile.redis_against_pg import drift_report
from shows.models import Show
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db


def test_seed_demo_farm_seeds_redis_for_managed_shows(acct_redis):
    with as_cuebot():  # the demo's seed writes Cuebot's rows as Cuebot would
        call_command("seed_demo_farm", "--shows", "2", "--hosts", "4", "--procs", "40")
    managed = Show.objects.get(b_scheduler_managed=True)
    report = drift_report()
    assert report.shows == [managed.id] and report.rows == [] and report.fields_checked > 0
    cuebot = Show.objects.get(b_scheduler_managed=False)
    assert not any(cuebot.id in key for key in acct_redis.keys("acct:sub:*"))
