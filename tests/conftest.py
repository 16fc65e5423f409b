import pytest
import redis
from django.conf import settings

from tests.farms import build_farm


def redis_test_clients() -> list[redis.Redis]:
    return [redis.Redis.from_url(url) for url in (settings.ACCOUNTING_REDIS_URL, settings.CACHE_REDIS_URL, settings.TASK_BROKER_REDIS_URL)]


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


@pytest.fixture
def acct_redis() -> redis.Redis:
    """A plain client on the accounting database, decoding replies, for assertions."""
    client = redis.Redis.from_url(settings.ACCOUNTING_REDIS_URL, decode_responses=True)
    yield client
    client.close()


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
    from accounting import keys

    acct_redis.set(keys.SEEDED, keys.SEEDED_VALUE)
    return acct_redis
