"""Failure and retry of the seeding after a switch to the scheduler.

Here the seeding (accounting.reconcile.reseed.seed_show) is replaced through the module attribute
accounting.ownership.switching.seed_show so a failure can be injected; tests/accounting/ownership/test_switch_seeding.py
runs the real one.
"""

import ast
import logging

import pytest
from django.utils import timezone
from django_q.models import Schedule, Success
from prometheus_client import REGISTRY

from accounting.ownership import switching
from accounting.ownership.toggle import set_scheduler_managed
from shows.models import Show

pytestmark = pytest.mark.django_db(transaction=True)  # the retry runs as a (sync) django-q2 task


def failures() -> float:
    return REGISTRY.get_sample_value("cuebot_acct_switch_seed_failures_total") or 0.0


class FlakySeeding:
    def __init__(self, *, failures: int):
        self.failures_left = failures
        self.calls = []

    def __call__(self, *, show_id: str) -> None:
        self.calls.append(show_id)
        if self.failures_left:
            self.failures_left -= 1
            raise TimeoutError("Redis did not answer")


def test_a_failed_seeding_keeps_the_switch_and_is_retried_in_the_task_cluster(cuebot_farm, monkeypatch, caplog):
    seeding = FlakySeeding(failures=1)
    monkeypatch.setattr(switching, "seed_show", seeding)
    before = failures()
    with caplog.at_level(logging.WARNING, logger="accounting.ownership.switching"):
        assert set_scheduler_managed(show=cuebot_farm.show, managed=True) == (False, True)
    assert Show.objects.get(pk=cuebot_farm.show.pk).b_scheduler_managed is True  # never undone
    assert seeding.calls == [cuebot_farm.show.id, cuebot_farm.show.id]  # the retry task ran and succeeded
    assert failures() == before + 1
    assert any("seeding Redis for show" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert Success.objects.filter(func="accounting.tasks.retry_seed_show").count() == 1
    assert not Schedule.objects.filter(func="accounting.tasks.retry_seed_show").exists()


def test_a_retry_that_fails_again_schedules_the_next_one_later(cuebot_farm, monkeypatch):
    monkeypatch.setattr(switching, "seed_show", FlakySeeding(failures=99))
    before = failures()
    set_scheduler_managed(show=cuebot_farm.show, managed=True)
    assert failures() == before + 2  # the seeding at the switch, then retry 1
    later = Schedule.objects.get(func="accounting.tasks.retry_seed_show")
    assert later.schedule_type == Schedule.ONCE
    assert ast.literal_eval(later.kwargs) == {"show_id": cuebot_farm.show.id, "attempt": 2}
    assert later.next_run > timezone.now()


def test_the_last_retry_gives_up_to_the_periodic_reseed(farm, monkeypatch, caplog):
    monkeypatch.setattr(switching, "seed_show", FlakySeeding(failures=99))
    with caplog.at_level(logging.ERROR, logger="accounting.ownership.switching"):
        switching.retry_seed_show(show_id=farm.show.id, attempt=switching.SEED_RETRIES)
    assert not Schedule.objects.exists()
    assert any("periodic reseed" in r.getMessage() for r in caplog.records)


def test_a_retry_for_a_show_switched_back_meanwhile_does_nothing(cuebot_farm, monkeypatch):
    seeding = FlakySeeding(failures=0)
    monkeypatch.setattr(switching, "seed_show", seeding)
    switching.retry_seed_show(show_id=cuebot_farm.show.id, attempt=1)
    assert seeding.calls == []


def test_an_unreachable_task_broker_does_not_fail_the_committed_switch(cuebot_farm, monkeypatch, caplog):
    def broker_down(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(switching, "seed_show", FlakySeeding(failures=99))
    monkeypatch.setattr(switching, "async_task", broker_down)
    with caplog.at_level(logging.ERROR, logger="accounting.ownership.switching"):
        assert set_scheduler_managed(show=cuebot_farm.show, managed=True) == (False, True)
    assert Show.objects.get(pk=cuebot_farm.show.pk).b_scheduler_managed is True
    assert any("could not enqueue" in r.getMessage() for r in caplog.records)
