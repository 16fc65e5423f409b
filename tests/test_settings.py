"""Which Redis servers the settings give an instance, era by era (settings/__init__.py): none in the
Maestro era unless a site names one, and the defaults of old in the eras that need them."""

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT

URLS = ("ACCOUNTING_REDIS_URL", "CACHE_REDIS_URL", "TASK_BROKER_REDIS_URL")
# One process reads the settings module once per environment (each case's variables, and no Redis
# URL or era of the suite's own), as a process started with it would.
REPORT = """
import importlib, json, os, sys
base = {k: v for k, v in os.environ.items() if k not in %r and not k.startswith(("ACCOUNTING_", "DJANGO_"))}
import settings
found = []
for case in json.loads(sys.stdin.read()):
    os.environ.clear()
    os.environ.update({**base, **case})
    importlib.reload(settings)
    found.append({
        "urls": [settings.ACCOUNTING_REDIS_URL, settings.CACHE_REDIS_URL, settings.TASK_BROKER_REDIS_URL],
        "cache": settings.CACHES["default"]["BACKEND"].rsplit(".", 1)[1],
        "broker": settings.Q_CLUSTER["broker_class"].rsplit(".", 1)[1],
        "caches": sorted(settings.CACHES),
    })
print(json.dumps(found))
""" % (URLS,)
DEFAULTS = ["redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/1", "redis://127.0.0.1:6379/2"]
CASES = {
    "maestro": {"ACCOUNTING_SCHEDULER": "maestro"},
    **{f"maestro, {name} empty": {"ACCOUNTING_SCHEDULER": "maestro", name: ""} for name in URLS},
    "maestro, a broker": {"ACCOUNTING_SCHEDULER": "maestro", "TASK_BROKER_REDIS_URL": "redis://broker.example:6379/2"},
    "maestro, a cache": {"ACCOUNTING_SCHEDULER": "maestro", "CACHE_REDIS_URL": "redis://cache.example:6379/1"},
    "redis": {"ACCOUNTING_SCHEDULER": "redis"},
    "redis,notify": {"ACCOUNTING_SCHEDULER": "redis,notify"},
    "notify": {"ACCOUNTING_SCHEDULER": "notify"},
    "unnamed": {},
    "unnamed, DEBUG": {"DJANGO_DEBUG": "true"},
}


@pytest.fixture(scope="module")
def read() -> dict[str, dict]:
    """Each case's settings, by the case's name."""
    done = subprocess.run(
        [sys.executable, "-c", REPORT],
        cwd=ROOT,
        input=json.dumps(list(CASES.values())),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return dict(zip(CASES, json.loads(done.stdout), strict=True))


def test_the_maestro_era_without_a_url_uses_no_redis(read):
    assert read["maestro"] == {
        "urls": ["", "", ""],
        "cache": "DatabaseCache",
        "broker": "OutageTolerantORM",
        "caches": ["default", "task_status"],
    }


@pytest.mark.parametrize("empty", URLS)
def test_an_empty_url_is_an_unset_one(read, empty):
    assert read[f"maestro, {empty} empty"] == read["maestro"]


def test_a_redis_a_maestro_site_names_is_used_for_what_it_names(read):
    broker = read["maestro, a broker"]
    assert (broker["urls"], broker["cache"], broker["broker"]) == (
        ["", "", "redis://broker.example:6379/2"],
        "DatabaseCache",
        "OutageTolerantRedis",
    )
    cache = read["maestro, a cache"]
    assert (cache["urls"], cache["cache"], cache["broker"], cache["caches"]) == (
        ["", "redis://cache.example:6379/1", ""],
        "RedisCache",
        "OutageTolerantORM",
        ["default"],
    )


@pytest.mark.parametrize(
    ("era", "urls"),
    [
        ("redis", DEFAULTS),
        ("redis,notify", DEFAULTS),
        # The NOTIFY era reads the flag on every release, through the cache Redis; no accounting Redis.
        ("notify", ["", *DEFAULTS[1:]]),
    ],
)
def test_the_eras_that_read_the_flag_keep_their_redis(read, era, urls):
    assert read[era] == {
        "urls": urls,
        "cache": "RedisCache",
        "broker": "OutageTolerantRedis",
        "caches": ["broker", "default"],
    }


def test_an_unnamed_era_keeps_every_default(read):
    """Refused at start-up (DEBUG off), or the Redis era (DEBUG on): `make run` and the suite's defaults."""
    assert read["unnamed"]["urls"] == read["unnamed, DEBUG"]["urls"] == DEFAULTS
