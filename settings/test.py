"""Test settings: the real PostgreSQL and Redis, on databases of their own.

pytest-django creates test_<name> in PostgreSQL. Redis uses three database indexes
counted down from TEST_REDIS_DB (accounting, cache, broker); the suite flushes them
between tests, so they must not be ones a running service uses.
"""
from cuebot_acct.redis_factory import django_cache
from settings import *  # noqa: F403
from settings import CACHES, Q_CLUSTER, env

TEST_REDIS_HOST = env.str("TEST_REDIS_HOST", default="127.0.0.1:6379")
TEST_REDIS_DB = env.int("TEST_REDIS_DB", default=15)

ACCOUNTING_REDIS_URL = f"redis://{TEST_REDIS_HOST}/{TEST_REDIS_DB}"
CACHE_REDIS_URL = f"redis://{TEST_REDIS_HOST}/{TEST_REDIS_DB - 1}"
TASK_BROKER_REDIS_URL = f"redis://{TEST_REDIS_HOST}/{TEST_REDIS_DB - 2}"
# Built as the service builds them (a list LOCATION, the factory's options), so the suite
# runs the shape production runs.
CACHES = {
    "default": {**CACHES["default"], **django_cache(url=CACHE_REDIS_URL, options=CACHES["default"]["OPTIONS"])},
    "broker": django_cache(url=TASK_BROKER_REDIS_URL, options=CACHES["broker"]["OPTIONS"]),
}
ACCOUNTING_REDIS_ENABLED = True
# The NOTIFY era's tests turn it on (tests/accounting/notify/), alone or beside Redis.
ACCOUNTING_NOTIFY_ENABLED = False
ACCOUNTING_REDIS_TIMEOUT = 1.0

Q_CLUSTER = {**Q_CLUSTER, "sync": True}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The suite never runs collectstatic; without a root, whitenoise has nothing to scan.
STATIC_ROOT = None
