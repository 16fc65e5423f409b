"""A malformed setting stops every entry point in one line that names the variable, says what
was wrong and what is accepted, with a status a supervisor sees (issue 21): manage.py commands,
a gunicorn worker (and so gunicorn), and the task cluster."""

import os
import subprocess
import sys

import pytest

from infra.bad_setting import BadSetting
from infra.redis_factory import check_redis_url
from tests.processes import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import server  # noqa: E402  (scripts/server.py: the deployed gunicorn command)

BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL", "OPENCUE_", "TASK_"))}
SECRET = {"DJANGO_SECRET_KEY": "bad-settings-test-" + "k" * 40}
ACCEPTED_URLS = (
    "accepted: redis://[:password@]host:port/<db>, rediss://... (TLS), unix:///path/to/socket, "
    "redis+sentinel://[:password@]host:port[,host:port...]/<master name>/<db>"
)

CASES = {
    "OPENCUE_TABLES": (
        "exist",
        "cuebot-acct: OPENCUE_TABLES is 'exist'; accepted: 'create' (the project creates "
        "Cuebot's tables) or 'existing' (a site's Cuebot database)",
    ),
    "ACCOUNTING_REDIS_URL": (
        "redis+sentinel://:s3cret@sentinel-a:x/acct/0",
        "cuebot-acct: ACCOUNTING_REDIS_URL is 'redis+sentinel://:***@sentinel-a:x/acct/0': "
        f"sentinel 'sentinel-a:x' is not host:port; {ACCEPTED_URLS}",
    ),
    "CACHE_REDIS_URL": (
        "redis+sentinel://sentinel-a:26379/",
        "cuebot-acct: CACHE_REDIS_URL is "
        "'redis+sentinel://sentinel-a:26379/': expected redis+sentinel://[:password@]host:port"
        f"[,host:port...]/<master name>/<db>; {ACCEPTED_URLS}",
    ),
    "ACCOUNTING_WRITES": ("maybe", "cuebot-acct: ACCOUNTING_WRITES is 'maybe'; accepted: on or off (true or false)"),
    "TASK_BROKER_REDIS_URL": (
        "redis://127.0.0.1:6379/two",
        "cuebot-acct: TASK_BROKER_REDIS_URL is "
        f"'redis://127.0.0.1:6379/two': the database 'two' is not a number; {ACCEPTED_URLS}",
    ),
}


def run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**BASE_ENV, "DJANGO_SETTINGS_MODULE": "settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("setting", CASES)
@pytest.mark.parametrize(
    "command", [["manage.py", "check"], ["manage.py", "migrate", "--check"], ["manage.py", "qcluster"]], ids=" ".join
)
def test_a_manage_py_command_says_it_in_one_line_and_exits_1(setting, command):
    value, line = CASES[setting]
    done = run(command, **SECRET, **{setting: value})
    assert done.returncode == 1
    assert done.stderr.splitlines() == [line]
    assert "s3cret" not in done.stderr


@pytest.mark.parametrize("setting", CASES)
def test_a_web_worker_says_it_in_one_line_with_gunicorns_boot_error_status(setting):
    value, line = CASES[setting]
    done = run(["-c", "import cuebot_acct.wsgi"], **SECRET, **{setting: value})
    assert done.returncode == 3  # WORKER_BOOT_ERROR: gunicorn's arbiter stops
    assert done.stderr.splitlines() == [line]


def test_gunicorn_stops_with_status_1_the_line_and_no_traceback():
    value, line = CASES["OPENCUE_TABLES"]
    from tests.processes import closed_port

    done = subprocess.run(
        server.gunicorn_command(f"127.0.0.1:{closed_port()}"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**BASE_ENV, "DJANGO_SETTINGS_MODULE": "settings", **SECRET, "OPENCUE_TABLES": value},
    )
    assert done.returncode == 1  # its master refuses (gunicorn.conf.py) before binding or booting a worker
    assert [entry for entry in done.stderr.splitlines() if "cuebot-acct" in entry] == [line]
    assert "Booting worker" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (
            "http://127.0.0.1:6379/0",
            "Redis URL must specify one of the following schemes (redis://, rediss://, unix://)",
        ),
        ("redis://127.0.0.1:port/0", "Port could not be cast to integer value as 'port'"),
        ("redis://:pw@127.0.0.1:6379/zero", "the database 'zero' is not a number"),
        ("redis+sentinel:///acct/0", "expected redis+sentinel://"),
    ],
)
def test_a_redis_url_no_client_could_use_is_refused_naming_the_setting(url, reason):
    with pytest.raises(BadSetting) as refused:
        check_redis_url(setting="CACHE_REDIS_URL", url=url)
    assert str(refused.value).startswith("CACHE_REDIS_URL is '") and reason in str(refused.value)
    assert ":pw@" not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://127.0.0.1:6379",
        "rediss://:pw@cache.example.com:6380/3",
        "unix:///run/redis/redis.sock",
        "redis+sentinel://s1:26379,s2/acct/2",
    ],
)
def test_the_documented_redis_url_forms_are_accepted(url):
    check_redis_url(setting="CACHE_REDIS_URL", url=url)


def test_a_drift_check_interval_the_alerts_cannot_follow_is_refused_in_one_line():
    done = run(["manage.py", "check"], **SECRET, ACCOUNTING_DRIFT_CHECK_MINUTES="30")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "cuebot-acct: ACCOUNTING_DRIFT_CHECK_MINUTES is 30; accepted: whole minutes from 1 to 10 "
        "(CuebotAcctCuebotTablesCheckStale fires after 15 minutes without a check)"
    ]
