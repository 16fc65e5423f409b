"""The era object (infra.era): one answer per question, picked by ACCOUNTING_SCHEDULER alone."""

import pytest
from django.test import override_settings

from infra import era as eras
from infra.bad_setting import BadSetting
from infra.era import CUEBOT_TABLES, REDIS_FIELDS, era


@pytest.mark.parametrize(
    ("name", "redis", "notify", "owns_flagged"),
    [
        ("maestro", False, False, True),
        ("redis", True, False, False),
        ("notify", False, True, False),
        ("redis,notify", True, True, False),
    ],
)
def test_each_era_answers_from_its_name(name, redis, notify, owns_flagged):
    with override_settings(ACCOUNTING_SCHEDULER=name):
        current = era()
    assert (current.name, current.keeps_redis, current.sends_notify) == (name, redis, notify)
    assert current.cuebot_owns(flagged=True) is owns_flagged
    assert current.cuebot_owns(flagged=False) is True
    assert current.release_told == frozenset(way for way, on in (("redis", redis), ("notify", notify)) if on)
    assert current.template_context()["era"] is current


def test_the_drift_sources_follow_the_redis_the_era_keeps():
    assert eras.named("redis").drift_sources == (CUEBOT_TABLES, REDIS_FIELDS)
    assert eras.named("notify").drift_sources == eras.named("maestro").drift_sources == (CUEBOT_TABLES,)
    assert eras.named("redis").drift_source(flagged=True) == REDIS_FIELDS
    assert eras.named("notify").drift_source(flagged=True) is None  # the scheduler's own counters
    assert eras.named("maestro").drift_source(flagged=True) == CUEBOT_TABLES
    assert {eras.named(name).drift_source(flagged=False) for name in eras.CHOICES} == {CUEBOT_TABLES}


def test_a_redis_reseed_is_refused_with_the_eras_reason():
    assert eras.named("redis").no_redis_reseed(repair="R") is None
    assert eras.named("redis,notify").no_redis_reseed(repair="R") is None
    assert (
        eras.named("maestro").no_redis_reseed(repair="R")
        == "Maestro era: no Redis to reseed; R repairs Cuebot's tables."
    )
    assert eras.named("notify").no_redis_reseed(repair="R") == (
        "Notify era: no Redis to reseed; the scheduler recomputes its own counters from SUM(proc)."
    )


def test_what_books_a_flagged_show_is_maestro_or_the_rust_scheduler():
    assert eras.named("maestro").start_flagged_booker.startswith("turn Maestro on for it")
    assert {eras.named(name).start_flagged_booker for name in ("redis", "notify", "redis,notify")} == {
        "start the Rust scheduler that books flagged shows"
    }


def test_the_era_follows_an_override_and_comes_back():
    assert era().name == "redis"  # the suite's (settings.test)
    with override_settings(ACCOUNTING_SCHEDULER="maestro"):
        assert era().name == "maestro"
    assert era().name == "redis"


def test_unset_reads_as_maestro():
    with override_settings(ACCOUNTING_SCHEDULER=None):
        assert era().name == "maestro"


@pytest.mark.parametrize(
    ("value", "name"), [(" Notify , REDIS ", "redis,notify"), ("maestro", "maestro"), ("redis,", "redis")]
)
def test_parse_names_the_era_canonically(value, name):
    assert eras.parse(value=value) == name


def test_parse_refuses_an_unknown_name_in_one_line():
    with pytest.raises(BadSetting, match="^ACCOUNTING_SCHEDULER is 'cuebot'; accepted: maestro"):
        eras.parse(value="cuebot")


def test_the_old_switches_name_an_era():
    assert [eras.told_by(told) for told in (set(), {"redis"}, {"notify"}, {"redis", "notify"})] == list(eras.CHOICES)
