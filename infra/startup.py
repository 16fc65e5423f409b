"""Start-up checks (services reachable; a site's Cuebot schema complete is shows.attach's)
that fail with one readable line, not a traceback."""

import re
import sys
from collections.abc import Callable
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.db import OperationalError, connection

from infra.bad_setting import BadSetting
from infra.era import era
from infra.outages import first_line, is_postgresql_outage
from infra.redis_factory import build_client, sentinel_target

# The one URL redactor (PostgreSQL's URLs too), by the name the commands that print a server use.
from infra.redis_factory import hide_password as redact


class StartupRefused(Exception):
    """The process must not start; the message says why and what to fix."""


class ServiceUnreachable(StartupRefused):
    """A backing service named by a URL setting does not answer."""


class CuebotSchemaIncomplete(StartupRefused):
    """OPENCUE_TABLES=existing and the site's database lacks what the project uses."""


def postgres_problem(error: Exception) -> ServiceUnreachable:
    return ServiceUnreachable(
        f"cannot reach PostgreSQL at {redact(settings.DATABASE_URL)} ({first_line(error)}); "
        "start it (`make services`) or set DATABASE_URL"
    )


def statement_refused(error: Exception) -> str:
    """A statement the server ended, said as such: the server is up, so "start it" would mislead."""
    state = next(filter(None, (getattr(cause, "sqlstate", None) for cause in (error.__cause__, error))), None)
    return (
        f"PostgreSQL at {redact(settings.DATABASE_URL)} is up but ended a statement ({first_line(error)}"
        f"{f'; SQLSTATE {state}' if state else ''}): a statement_timeout or lock_timeout on the role, "
        "a deadlock or pg_cancel_backend does this; run it again, or raise the timeout"
    )


def redis_problem(*, setting: str, url: str, error: Exception) -> ServiceUnreachable:
    return ServiceUnreachable(
        f"cannot reach Redis at {redact(url)} ({error}); start it (`make services`) or set {setting}"
    )


def check_secret_key() -> None:
    """A serving process never signs sessions and CSRF tokens with the published development key."""
    if not settings.DEBUG and settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY:
        raise StartupRefused(
            "DJANGO_SECRET_KEY is not set: refusing to serve with the development key while DEBUG is off; "
            "set a long random DJANGO_SECRET_KEY (`make run` keeps one in .local/secret_key)"
        )


def check_postgres() -> None:
    try:
        connection.ensure_connection()
    except OperationalError as error:
        raise postgres_problem(error) from None


def redis_urls() -> dict[str, str]:
    """Every Redis the process talks to, by the setting that names it: none in the Maestro era
    where no URL is set."""
    urls = {setting: getattr(settings, setting) for setting in ("CACHE_REDIS_URL", "TASK_BROKER_REDIS_URL")}
    if era().keeps_redis:
        urls["ACCOUNTING_REDIS_URL"] = settings.ACCOUNTING_REDIS_URL
    return {setting: url for setting, url in urls.items() if url}


REDIS_SETTINGS = ("ACCOUNTING_REDIS_URL", "CACHE_REDIS_URL", "TASK_BROKER_REDIS_URL")
# What each Redis is for, by the setting that names it. Without a cache or a broker Redis (the
# Maestro era with its URL unset, settings) PostgreSQL holds that role too.
REDIS_ROLES = {
    "ACCOUNTING_REDIS_URL": "the scheduler's counters",
    "CACHE_REDIS_URL": "the cache",
    "TASK_BROKER_REDIS_URL": "the task broker",
}


def servers_line() -> str:
    """Which servers this process uses and what for, as it says at start (check_services, each
    web worker, the task cluster)."""
    redis = redis_urls()
    held_by_postgres = [
        REDIS_ROLES[setting] for setting in ("CACHE_REDIS_URL", "TASK_BROKER_REDIS_URL") if setting not in redis
    ]
    in_postgres = ", ".join(["the database", *held_by_postgres])
    uses = ", ".join(f"{redact(url)} ({REDIS_ROLES[setting]})" for setting, url in redis.items())
    return f"servers: PostgreSQL {redact(settings.DATABASE_URL)} ({in_postgres}); " + (
        f"Redis {uses}" if redis else "no Redis"
    )


def redis_addresses(url: str) -> list[str]:
    """The host:port (or socket path) a Redis URL's client connects to, as redis-py's errors name them."""
    target = sentinel_target(url)
    if target is not None:
        return [f"{host}:{port}" for host, port in target.sentinels]
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return [parts.path]
    return [f"{parts.hostname or 'localhost'}:{parts.port or 6379}"]


def settings_of_failed_redis(error: Exception) -> list[str]:
    """The settings whose Redis a failed call went to, by the address its error names (a process
    may reach a Redis its era does not list, as the simulator's clean-up did); every Redis the
    process uses when the error names none of them."""
    text = str(error)
    named = [
        setting
        for setting in REDIS_SETTINGS
        if getattr(settings, setting)
        and any(
            re.search(re.escape(address) + r"(?![0-9])", text)
            for address in redis_addresses(getattr(settings, setting))
        )
    ]
    return named or list(redis_urls())


def check_redis() -> None:
    for setting, url in redis_urls().items():
        client = build_client(url=url, timeout=3.0)
        try:
            client.ping()
        except (redis.ConnectionError, redis.TimeoutError) as error:
            raise redis_problem(setting=setting, url=url, error=error) from None
        finally:
            client.close()


def check_services() -> None:
    check_postgres()
    check_redis()


# Django prints and exits, before any command acts, for these subcommands ("manage.py" alone is
# help too) and for these options of any command (argparse answers them wherever they stand).
PRINTING_COMMANDS = frozenset({"help", "version", "--help", "-h", "--version"})
PRINTING_OPTIONS = frozenset({"--help", "-h", "--version"})


def only_prints(argv: list[str]) -> bool:
    """Whether this command line prints help or a version and acts on nothing. Only the first
    word may be `help`: later it could be a show's name; after `--` an option is an argument."""
    words = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    return not words or words[0] in PRINTING_COMMANDS or not PRINTING_OPTIONS.isdisjoint(words[1:])


def run_with_clear_service_errors(argv: list[str], *, serving: dict[str, Callable[[list[str]], int]]) -> None:
    """Run a management command; a malformed setting or an unreachable service ends it with one
    line, exit 1. `serving` maps the commands that serve (the task cluster) to the function
    that runs each, given its arguments and returning the exit status: these are refused at
    once, in one line, when they could not work (the development key, a service down)."""
    from django.core.management import execute_from_command_line

    from infra.era import let_printing_through

    if only_prints(argv):
        let_printing_through()
    try:
        if len(argv) > 1 and argv[1] in serving:
            import django

            django.setup()
            check_secret_key()
            check_services()
            sys.exit(serving[argv[1]](argv[2:]))
        execute_from_command_line(argv)
    except BadSetting as problem:
        sys.stderr.write(f"cuebot-acct: {problem}\n")
        sys.exit(1)
    except StartupRefused as problem:
        sys.stderr.write(f"cuebot-acct: {problem}\n")
        sys.exit(1)
    except OperationalError as error:
        # A statement the server cancelled (a statement or lock timeout on the role) is no outage:
        # telling the operator to start PostgreSQL would send them the wrong way.
        said = postgres_problem(error) if is_postgresql_outage(error) else statement_refused(error)
        sys.stderr.write(f"cuebot-acct: {said}\n")
        sys.exit(1)
    except (redis.ConnectionError, redis.TimeoutError) as error:
        sys.stderr.write(
            f"cuebot-acct: a Redis call failed ({error}); check {', '.join(settings_of_failed_redis(error))}\n"
        )
        sys.exit(1)
