"""What every test shares: empty Redis test databases, Cuebot's tables emptied after a
transactional test, the documented role the suite runs as (tests/service_role.py), small
farms and API tokens."""

import itertools

import pytest
import redis
from django.conf import settings
from django.db import connection

from accounting.operators.auth import grant_permissions, issue_token
from infra.redis_factory import accounting_redis
from shows.cuebot_schema import TABLES as CUEBOT_TABLES
from tests import service_role
from tests.farms import build_farm
from tests.service_role import as_cuebot
from tests.wsgi_client import LaneClient


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, migrated as the superuser (as Cuebot's migrations made
    a site's tables); then every test runs as the documented role (tests/service_role.py)."""
    with django_db_blocker.unblock():
        service_role.create_role(database=connection.settings_dict["NAME"])
    yield
    with django_db_blocker.unblock():
        service_role.drop_role()


@pytest.fixture(autouse=True)
def database_role(request):
    """A test marked `superuser` keeps the superuser's connection throughout."""
    if request.node.get_closest_marker("superuser"):
        with service_role.superuser():
            yield
    else:
        yield


def redis_test_clients() -> list[redis.Redis]:
    return [
        redis.Redis.from_url(url)
        for url in (settings.ACCOUNTING_REDIS_URL, settings.CACHE_REDIS_URL, settings.TASK_BROKER_REDIS_URL)
    ]


@pytest.fixture(autouse=True)
def clean_redis():
    """Every test starts with empty accounting, cache and broker databases (test indexes only)."""
    assert settings.ACCOUNTING_REDIS_URL != "redis://127.0.0.1:6379/0", "tests must not flush the service's Redis"
    clients = redis_test_clients()
    for client in clients:
        client.flushdb()
    yield
    for client in clients:
        client.close()


@pytest.fixture(autouse=True)
def closed_breaker():
    """The release publisher's breaker is per process: a test that trips it must not skip
    Redis for the next one."""
    from accounting.release.publish import breaker

    breaker.close()
    yield
    breaker.close()


@pytest.fixture
def fresh_accounting_client():
    """The accounting client is built once per process: rebuilt around a test that changes
    its URL or timeout, before and after."""
    accounting_redis.cache_clear()
    yield
    accounting_redis.cache_clear()


@pytest.fixture(autouse=True)
def empty_cuebot_tables_after_transactional_tests(request, django_db_blocker):
    """Django's flush after a transactional test empties managed tables only; Cuebot's are
    unmanaged (shows.models.CuebotTable), so they are emptied here, or rows would leak
    into the next test."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if "transactional_db" in request.fixturenames or (marker and marker.kwargs.get("transaction")):
        with django_db_blocker.unblock(), as_cuebot(), connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {', '.join(CUEBOT_TABLES)}")


@pytest.fixture
def acct_redis() -> redis.Redis:
    """A plain client on the accounting database, decoding replies, for assertions."""
    client = redis.Redis.from_url(settings.ACCOUNTING_REDIS_URL, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def token_with(db, django_user_model):
    """token_with(*permissions) -> a raw API token whose user holds exactly those permissions."""
    made = itertools.count()

    def make(*permissions: str) -> str:
        user = django_user_model.objects.create_user(username=f"token-user-{next(made)}")
        grant_permissions(user=user, permissions=list(permissions))
        return issue_token(user=user)

    return make


@pytest.fixture
def reader_client(token_with):
    """A test client that sends a token holding only the read right, as a dashboard would."""
    from django.test import Client

    from infra.permissions import VIEW_ACCOUNTING

    return Client(HTTP_AUTHORIZATION=f"Bearer {token_with(VIEW_ACCOUNTING)}")


@pytest.fixture(params=["django", "lane"])
def api_client(request, client):
    """The API's client, twice: Django's test client (Django's handler alone), and a WSGI client
    through what cuebot_acct.wsgi serves, the release lane over Django (tests/wsgi_client.py)."""
    return client if request.param == "django" else LaneClient()


@pytest.fixture
def farm(db):
    return build_farm(managed=True)


@pytest.fixture
def cuebot_farm(db):
    return build_farm(managed=False)


@pytest.fixture
def seeded_redis(acct_redis) -> redis.Redis:
    """The accounting Redis as a running service has it: seeded since it came up (the
    acct:seeded marker), so limit writes reach it and reseeds need no bootstrap."""
    from accounting.live import keys

    acct_redis.set(keys.SEEDED, keys.SEEDED_VALUE)
    return acct_redis


@pytest.fixture
def maestro_era(settings, fresh_accounting_client):
    """The Maestro era (Cuebot owns every show's five tables) with the accounting Redis
    pointed at a closed port: whatever reaches for it fails loudly."""
    from tests.processes import closed_port

    settings.ACCOUNTING_SCHEDULER = "maestro"
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    return settings


@pytest.fixture
def notify_era(settings, fresh_accounting_client):
    """The notify era alone (the scheduler keeps its own counters, told by NOTIFY) with the
    accounting Redis pointed at a closed port, as maestro_era does."""
    from tests.processes import closed_port

    settings.ACCOUNTING_SCHEDULER = "notify"
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    return settings
