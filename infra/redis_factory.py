"""Every Redis client of the service (accounting, cache, task broker) is built here, from a
plain URL or a Sentinel one, and none of them retries a command."""

import os
import threading
import weakref
from dataclasses import dataclass
from functools import cache
from urllib.parse import unquote, urlsplit

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django_redis.pool import ConnectionFactory, SentinelConnectionFactory
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from infra.bad_setting import BadSetting

# A Sentinel URL: the client asks the sentinels for the current master, and asks again after a
# connection to it fails, so a failover needs no restart. The password is the data nodes'; the
# sentinels are reached without one. The accounting client uses redis-py's Sentinel pool; the
# cache and the task broker (django-q2 on the django-redis "broker" cache) use django-redis's
# Sentinel connection factory, set up by django_cache().
SENTINEL_SCHEME = "redis+sentinel://"
SENTINEL_DEFAULT_PORT = 26379
SENTINEL_FORM = "redis+sentinel://[:password@]host:port[,host:port...]/<master name>/<db>"
ACCEPTED_FORMS = f"redis://[:password@]host:port/<db>, rediss://... (TLS), unix:///path/to/socket, {SENTINEL_FORM}"


class BadRedisUrl(ImproperlyConfigured):
    """A redis+sentinel:// URL that does not parse; `reason` says what is wrong, without the URL."""

    def __init__(self, url: str, reason: str):
        self.reason = reason
        super().__init__(f"{hide_password(url)!r}: {reason}")


def hide_password(url: str) -> str:
    """The URL as it may be printed: a password between '//' and '@' becomes ***."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{hosts}"


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int
    password: str | None


def sentinel_target(url: str) -> SentinelTarget | None:
    """The parts of a redis+sentinel:// URL; None for any other URL; BadRedisUrl when malformed."""
    if not url.startswith(SENTINEL_SCHEME):
        return None
    rest = url[len(SENTINEL_SCHEME) :]
    netloc, _, path = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    password = unquote(userinfo.partition(":")[2]) if userinfo else None
    sentinels = []
    for part in filter(None, hosts.split(",")):
        host, _, port = part.rpartition(":") if ":" in part else (part, "", str(SENTINEL_DEFAULT_PORT))
        if not host or not port.isdigit():
            raise BadRedisUrl(url, f"sentinel {part!r} is not host:port")
        sentinels.append((host, int(port)))
    name, _, db = path.strip("/").partition("/")
    if not sentinels or not name or (db and not db.isdigit()):
        raise BadRedisUrl(url, f"expected {SENTINEL_FORM}")
    return SentinelTarget(sentinels=tuple(sentinels), master_name=name, db=int(db or 0), password=password or None)


def check_redis_url(*, setting: str, url: str) -> None:
    """Refuse, naming `setting`, a Redis URL no client could use, when the settings load rather
    than at a first call minutes later. redis-py alone reads a db path that is not a number as
    db 0: a different database from the one meant, which the suite would then flush."""
    try:
        if sentinel_target(url) is not None:
            return
        redis.connection.parse_url(url)  # the scheme and the port
    except BadRedisUrl as error:
        reason = error.reason
    except ValueError as error:
        reason = str(error)
    else:
        parts = urlsplit(url)
        db = parts.path.strip("/")
        if parts.scheme == "unix" or db == "" or db.isdigit():
            return
        reason = f"the database {db!r} is not a number"
    raise BadSetting(setting=setting, problem=f"is {hide_password(url)!r}: {reason}", accepted=ACCEPTED_FORMS)


# redis-py retries a command on connection errors and timeouts by default. A release script that
# timed out may already have run on the server, so a resend could decrement twice, the one bug
# this service must never have: a failed call fails once and the caller decides (the release
# publisher logs it and the recompute heals Redis high). A pooled connection that died while
# idle is still replaced before use: redis-py checks it when handing it out.
def _no_retry() -> Retry:
    return Retry(NoBackoff(), retries=0)


def _pool_options() -> dict:
    return {"retry": _no_retry(), "retry_on_error": [], "health_check_interval": 30}


def build_pool(*, url: str, timeout: float) -> redis.ConnectionPool:
    timeouts = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    target = sentinel_target(url)
    if target is None:
        return redis.ConnectionPool.from_url(url, **timeouts, **_pool_options())
    sentinels = Sentinel(list(target.sentinels), sentinel_kwargs=timeouts)
    return SentinelConnectionPool(
        target.master_name, sentinels, db=target.db, password=target.password, **timeouts, **_pool_options()
    )


def connection_options(*, url: str, timeout: float) -> dict:
    """Keyword arguments for one redis.Connection to the server `url` names now (for a
    Sentinel URL: the master its sentinels name at this moment), for a caller that keeps
    a connection of its own outside a pool."""
    timeouts = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    target = sentinel_target(url)
    if target is None:
        return redis.connection.parse_url(url) | timeouts
    host, port = Sentinel(list(target.sentinels), sentinel_kwargs=timeouts).discover_master(target.master_name)
    return {"host": host, "port": port, "db": target.db, "password": target.password, **timeouts}


def build_client(*, url: str, timeout: float) -> redis.Redis:
    return redis.Redis(connection_pool=build_pool(url=url, timeout=timeout))


@cache
def accounting_redis() -> redis.Redis:
    """The Redis holding the acct:* live view; one pool per process."""
    return build_client(url=settings.ACCOUNTING_REDIS_URL, timeout=settings.ACCOUNTING_REDIS_TIMEOUT)


_held = threading.local()


def held_connection(client: redis.Redis) -> redis.connection.AbstractConnection:
    """This thread's own connection to `client`'s server: taken from the client's pool and kept by
    the thread between calls, for a caller that sends on it directly (the release's scripts,
    accounting.live.scripts run_held), without the client's checkout and return at each command.

    It has the pool's settings (timeouts, retries off, health checks) and stays counted among
    the pool's connections in use. One found disconnected (a failed command disconnects it, and
    so does disconnecting the pool) is given back and another taken, through the pool's checks
    as for any command: a Sentinel pool asks the sentinels for the master again. One taken
    before a fork is left to the parent."""
    pool = client.connection_pool
    held = getattr(_held, "connections", None)
    if held is None:
        held = _held.connections = weakref.WeakKeyDictionary()
    connection = held.get(pool)
    if connection is not None and connection.pid == os.getpid() and connection.is_connected:
        return connection
    if connection is not None and connection.pid == os.getpid():
        pool.release(connection)
    connection = held[pool] = pool.get_connection()
    return connection


def master_address(client: redis.Redis) -> str:
    """host:port of the server `client` writes to (for Sentinel: the master it names now)."""
    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        host, port = pool.get_master_address()
    else:
        host, port = pool.connection_kwargs.get("host"), pool.connection_kwargs.get("port")
    return f"{host}:{port}"


def replication_state(client: redis.Redis, *keys: str) -> tuple[str, str, list]:
    """(role, master_replid, values of `keys`), all read on one connection, so they describe one
    server. The replication id is new at every start and on a promoted replica, while a
    replica reports its master's."""
    with client.pipeline(transaction=False) as pipe:
        pipe.info("replication")
        for key in keys:
            pipe.get(key)
        info, *values = pipe.execute()
    return info["role"], info["master_replid"], values


def django_cache(*, url: str, options: dict) -> dict:
    """A CACHES entry (django-redis) for a plain or a Sentinel URL."""
    target = sentinel_target(url)
    if target is None:
        # A list, so that django-redis does not split the URL at commas into several servers.
        return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": [url], "OPTIONS": options}
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": [f"redis://{target.master_name}/{target.db}"],
        "OPTIONS": {
            **options,
            "CONNECTION_FACTORY": "infra.redis_factory.DjangoRedisSentinelConnectionFactory",
            "SENTINELS": list(target.sentinels),
            "PASSWORD": target.password,
        },
    }


class DjangoRedisConnectionFactory(ConnectionFactory):
    """django-redis (cache) and django-q2 (broker, through django-redis) use this for plain URLs."""

    def get_connection_pool(self, params: dict) -> redis.ConnectionPool:
        return build_pool(url=params["url"], timeout=self.options.get("SOCKET_TIMEOUT", 5.0))


class DjangoRedisSentinelConnectionFactory(SentinelConnectionFactory):
    """django-redis's own Sentinel support, with this module's policy: retries off, timeouts set."""

    def __init__(self, options: dict) -> None:
        timeout = options.get("SOCKET_TIMEOUT", 5.0)
        super().__init__(
            {
                **options,
                "SOCKET_TIMEOUT": timeout,
                "SOCKET_CONNECT_TIMEOUT": timeout,
                "SENTINEL_KWARGS": {"socket_timeout": timeout, "socket_connect_timeout": timeout},
                "CONNECTION_POOL_KWARGS": {**options.get("CONNECTION_POOL_KWARGS", {}), **_pool_options()},
            }
        )
