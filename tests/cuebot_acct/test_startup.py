"""An unreachable PostgreSQL or Redis at start-up: one clear line naming the URL, exit 1."""

import pytest
from django.conf import settings
from django.db import connection, transaction

from tests.processes import closed_port, manage
from tests.service_role import service_database


@pytest.fixture
def test_services(db) -> dict[str, str]:
    """The suite's own database and Redis indexes, so the command checks nothing else."""
    return {
        **service_database(),
        "ACCOUNTING_REDIS_URL": settings.ACCOUNTING_REDIS_URL,
        "CACHE_REDIS_URL": settings.CACHE_REDIS_URL,
        "TASK_BROKER_REDIS_URL": settings.TASK_BROKER_REDIS_URL,
    }


def test_unreachable_postgres_names_the_url_in_one_line():
    port = closed_port()
    result = manage("check_services", DATABASE_URL=f"postgres://postgres:s3cret@127.0.0.1:{port}/nowhere")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"cannot reach PostgreSQL at postgres://postgres:***@127.0.0.1:{port}/nowhere" in lines[0]
    assert "DATABASE_URL" in lines[0] and "s3cret" not in lines[0] and "Traceback" not in result.stderr


def test_unreachable_postgres_during_any_command_is_one_line_too():
    result = manage("migrate", "--check", DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/nowhere")
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "cannot reach PostgreSQL" in result.stderr


@pytest.mark.parametrize("setting", ["ACCOUNTING_REDIS_URL", "CACHE_REDIS_URL", "TASK_BROKER_REDIS_URL"])
def test_unreachable_redis_names_the_setting_and_url(test_services, setting):
    url = f"redis://127.0.0.1:{closed_port()}/0"
    result = manage("check_services", **{**test_services, setting: url})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"cannot reach Redis at {url}" in lines[0] and setting in lines[0]


def test_accounting_redis_is_not_required_in_the_maestro_era(test_services):
    result = manage(
        "check_services",
        **{
            **test_services,
            "ACCOUNTING_SCHEDULER": "maestro",
            "ACCOUNTING_REDIS_URL": f"redis://127.0.0.1:{closed_port()}/0",
        },
    )
    assert result.returncode == 0, result.stderr
    assert "ACCOUNTING_REDIS_URL" not in result.stdout


def test_reachable_services_pass(test_services):
    result = manage("check_services", **test_services)
    assert result.returncode == 0, result.stderr
    assert "PostgreSQL ok" in result.stdout
    # The Redis era: PostgreSQL for the database alone, a Redis for each other role.
    assert (
        f"(the database); Redis {settings.CACHE_REDIS_URL} (the cache), {settings.TASK_BROKER_REDIS_URL} "
        f"(the task broker), {settings.ACCOUNTING_REDIS_URL} (the scheduler's counters)\n" in result.stdout
    )


@pytest.mark.django_db(transaction=True)
def test_a_statement_the_server_ends_is_said_as_such_not_as_an_outage(test_services):
    """A lock timeout (as a role's statement_timeout would) ends acct_drift in one line that says
    the server is up and which statement error it was, never "cannot reach PostgreSQL"."""
    with connection.cursor() as cursor, transaction.atomic():
        cursor.execute("LOCK TABLE proc IN ACCESS EXCLUSIVE MODE")
        result = manage("acct_drift", **test_services, PGOPTIONS="-c lock_timeout=200")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "is up but ended a statement (canceling statement due to lock timeout; SQLSTATE 55P03)" in lines[0]
    assert "cannot reach" not in lines[0] and "Traceback" not in result.stderr
