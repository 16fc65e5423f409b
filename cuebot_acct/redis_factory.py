"""The one place Redis clients are built: accounting, cache and task broker alike.

Switching to Sentinel later means changing this module's pool construction, not
every caller.

Retry policy, decided on purpose: redis-py retries a command on connection errors and
timeouts by default. A release script that timed out may already have run on the
server, so resending it could decrement twice, the one bug this service must never
have. Every client built here has retries switched off; a failed call fails once and
the caller decides (the release publisher logs it and lets the recompute heal Redis
high). A pooled connection that died while idle is still replaced before use:
redis-py checks it when handing it out, which is before anything is sent.
"""
from functools import cache

import redis
from django.conf import settings
from django_redis.pool import ConnectionFactory
from redis.backoff import NoBackoff
from redis.retry import Retry


def _no_retry() -> Retry:
    return Retry(NoBackoff(), retries=0)


def build_pool(*, url: str, timeout: float) -> redis.ConnectionPool:
    return redis.ConnectionPool.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=_no_retry(),
        retry_on_error=[],
        health_check_interval=30,
    )


def build_client(*, url: str, timeout: float) -> redis.Redis:
    return redis.Redis(connection_pool=build_pool(url=url, timeout=timeout))


@cache
def accounting_redis() -> redis.Redis:
    """The Redis holding the acct:* live view; one pool per process."""
    return build_client(url=settings.ACCOUNTING_REDIS_URL, timeout=settings.ACCOUNTING_REDIS_TIMEOUT)


class DjangoRedisConnectionFactory(ConnectionFactory):
    """django-redis (cache) and django-q2 (broker, through django-redis) use this."""

    def get_connection_pool(self, params: dict) -> redis.ConnectionPool:
        return build_pool(url=params["url"], timeout=self.options.get("SOCKET_TIMEOUT", 5.0))


def server_run_id(client: redis.Redis) -> str:
    """The run id of the server behind `client`: new at every start, and different on a
    promoted replica than on the master it replaces."""
    return client.info("server")["run_id"]
