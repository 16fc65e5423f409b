"""Test settings: the real PostgreSQL and Redis, on databases of their own.

pytest-django creates test_<name> in PostgreSQL. Redis uses three database indexes
counted down from TEST_REDIS_DB (accounting, cache, broker); the suite flushes them
between tests, so they must not be ones a running service uses.
"""

import os

from settings import *  # noqa: F403
from settings import caches_for, env, q_cluster_for

TEST_REDIS_HOST = env.str("TEST_REDIS_HOST", default="127.0.0.1:6379")
TEST_REDIS_DB = env.int("TEST_REDIS_DB", default=15)

ACCOUNTING_REDIS_URL = f"redis://{TEST_REDIS_HOST}/{TEST_REDIS_DB}"
CACHE_REDIS_URL = f"redis://{TEST_REDIS_HOST}/{TEST_REDIS_DB - 1}"
TASK_BROKER_REDIS_URL = f"redis://{TEST_REDIS_HOST}/{TEST_REDIS_DB - 2}"
# Built as the service builds them (a list LOCATION, the factory's options), so the suite
# runs the shape production runs, whatever era the shell names.
CACHES = caches_for(cache_url=CACHE_REDIS_URL, broker_url=TASK_BROKER_REDIS_URL)
# The suite runs the design's Redis era unless a test names another, one way: its
# ACCOUNTING_SCHEDULER (infra.era; the fixtures maestro_era and notify_era). Set in the
# environment too, so that the processes the suite starts (gunicorn, manage.py) run it unless a
# test gives them another.
ACCOUNTING_SCHEDULER = os.environ["ACCOUNTING_SCHEDULER"] = "redis"
ACCOUNTING_REDIS_TIMEOUT = 1.0

# The suite reads Cuebot's tables from its own test database whatever the shell names: the standby
# tests make Cuebot's alias themselves (tests/cuebot_acct/test_cuebot_standby.py).
DATABASES.pop("cuebot", None)  # noqa: F405
CUEBOT_DATABASE_ALIAS = "default"
Q_CLUSTER = {**q_cluster_for(cache_url=CACHE_REDIS_URL, broker_url=TASK_BROKER_REDIS_URL), "sync": True}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
