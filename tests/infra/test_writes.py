"""ACCOUNTING_WRITES as a process reads it: its default follows who made Cuebot's tables, and each
process says at start whether it writes or only observes (infra.writes)."""

import pytest
import redis

from infra.startup import settings_of_failed_redis
from infra.writes import mode_line
from tests.processes import manage

PRINT_WRITES = "from django.conf import settings; print(settings.ACCOUNTING_WRITES)"


@pytest.mark.parametrize(
    ("tables", "writes", "expected"),
    [
        ("existing", None, "False"),  # a site's database: observe until the site says otherwise
        ("create", None, "True"),  # the demo and the suite, whose tables are the project's own
        ("existing", "on", "True"),
        ("create", "off", "False"),
        ("existing", "TRUE", "True"),
    ],
)
def test_the_default_follows_opencue_tables_and_a_value_is_taken_as_written(tables, writes, expected):
    env = {"OPENCUE_TABLES": tables, "ACCOUNTING_SCHEDULER": "maestro"}
    if writes is not None:
        env["ACCOUNTING_WRITES"] = writes
    done = manage("shell", "--no-imports", "-c", PRINT_WRITES, **env)
    assert done.stdout.strip() == expected, done.stderr


def test_the_start_up_line_says_what_the_instance_may_change(settings):
    settings.ACCOUNTING_WRITES = False
    assert mode_line() == (
        "ACCOUNTING_WRITES=off: this instance observes and writes nothing of Cuebot's (nor the scheduler's Redis counters)"
    )
    settings.ACCOUNTING_SCHEDULER = "maestro"
    assert mode_line() == "ACCOUNTING_WRITES=off: this instance observes and writes nothing of Cuebot's"
    settings.ACCOUNTING_WRITES = True
    assert mode_line() == "ACCOUNTING_WRITES=on: this instance writes Cuebot's tables when its faces are asked to"


def test_a_failed_redis_call_names_the_setting_of_the_redis_it_went_to(settings):
    settings.ACCOUNTING_REDIS_URL = "redis://127.0.0.1:1/0"
    settings.CACHE_REDIS_URL = "redis://127.0.0.1:15/1"
    settings.TASK_BROKER_REDIS_URL = "redis+sentinel://sentinel-a:26379,sentinel-b:26380/acct/2"
    refused = redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    assert settings_of_failed_redis(refused) == ["ACCOUNTING_REDIS_URL"]  # not 127.0.0.1:15's
    assert settings_of_failed_redis(redis.ConnectionError("Error connecting to sentinel-b:26380.")) == [
        "TASK_BROKER_REDIS_URL"
    ]
    settings.ACCOUNTING_SCHEDULER = "maestro"
    assert settings_of_failed_redis(redis.TimeoutError("Timeout reading from socket")) == [
        "CACHE_REDIS_URL",
        "TASK_BROKER_REDIS_URL",
    ]
