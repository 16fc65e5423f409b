"""accounting.E001-E005 and W001 query PostgreSQL, so they are registered with Tags.database:
they run where a command names the database (`check --database default`, `migrate`), and a
plain `check` (any other command) sends it no query."""

import pytest
from django.core import checks
from django.core.checks import Tags
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounting.checks import cuebot_schema, publish_guardrail

pytestmark = pytest.mark.django_db


def test_both_are_registered_as_database_checks():
    database_checks = checks.registry.registry.get_checks()
    assert {cuebot_schema, publish_guardrail} <= {check for check in database_checks if Tags.database in check.tags}


def test_a_check_that_names_no_database_sends_no_query(settings):
    settings.OPENCUE_TABLES = "existing"
    with CaptureQueriesContext(connection) as queries:
        call_command("check", verbosity=0)
    assert [query["sql"] for query in queries] == []


def test_a_check_of_the_default_database_runs_them(settings):
    settings.OPENCUE_TABLES = "existing"
    with CaptureQueriesContext(connection) as queries:
        assert checks.run_checks(databases=["default"]) == []  # the suite's database has all Cuebot uses
    assert queries  # both read it: the catalogue (E001-E005), the fleet register (W001)
