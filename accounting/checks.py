"""System checks: accounting.W001 (the publish guardrail), accounting.E001-E005 (a site's
Cuebot database lacks what the project reads or writes, OPENCUE_TABLES=existing) and
accounting.W002 (the release lane is off), accounting.E006 (writes on over Cuebot's tables read
from a standby or a database apart: the settings alone, or a query where the command names the database).

The first two query PostgreSQL, so AccountingConfig.ready() registers them with Tags.database, as
django.contrib.auth does its own: Django then runs them only where a command names the database
(`manage.py check --database default`, `migrate`), and `help`, `makemigrations` and every other
command start without touching it. The lane's reads the settings alone and is a deployment
check (`manage.py check --deploy`): it is about how the web workers will serve."""

from collections.abc import Sequence

from django.conf import settings
from django.core.checks import Error, Warning
from django.db import DEFAULT_DB_ALIAS, DatabaseError, transaction

from accounting.operators.release_lane import off_because
from accounting.ownership.guardrail import MESSAGE, evaluate
from infra.startup import writes_apart, writes_on_standby
from shows.attach import schema_problems

WRITES_OVER_STANDBY = "accounting.E006"


def asks_for_our_database(databases: Sequence[str] | None) -> bool:
    """Whether the command named the one database these checks read (every query here goes to default)."""
    return DEFAULT_DB_ALIAS in (databases or ())


def cuebot_schema(app_configs=None, databases: Sequence[str] | None = None, **kwargs) -> list[Error]:
    if settings.OPENCUE_TABLES != "existing" or not asks_for_our_database(databases):
        return []
    try:
        problems = schema_problems()
    except DatabaseError:
        return []  # unreachable: the start-up check says so in one line
    return [Error(problem.message, hint=problem.hint, id=problem.id) for problem in problems]


def publish_guardrail(app_configs=None, databases: Sequence[str] | None = None, **kwargs) -> list[Warning]:
    if not asks_for_our_database(databases):
        return []
    try:
        # The savepoint keeps a failed query (tables not migrated yet) from breaking a caller's transaction.
        with transaction.atomic():
            report = evaluate()
    except DatabaseError:
        return []  # unreachable or not migrated: nothing to check yet, and `check` must not crash
    if not report.misconfigured:
        return []
    return [
        Warning(
            MESSAGE,
            hint=report.hint,
            id="accounting.W001",
        )
    ]


def release_lane(app_configs=None, **kwargs) -> list[Warning]:
    reasons = off_because()
    if not reasons:
        return []
    return [
        Warning(
            "The release lane is off: every release goes through Django's middleware and handler, which "
            "serves the same answers at a lower rate (docs/benchmarks.md, the release over HTTP).",
            hint=f"{'; '.join(reasons)}. If the change is meant, review accounting/operators/release_lane.py "
            "against it and record it there (REVIEWED_MIDDLEWARE, REVIEWED_SETTINGS).",
            id="accounting.W002",
        )
    ]


def writes_over_standby(app_configs=None, databases: Sequence[str] | None = None, **kwargs) -> list[Error]:
    """Writes on with Cuebot's tables apart (any command), or over a standby (where the command names
    the database): one line, the start refused."""
    problem = writes_apart()
    if problem is None and asks_for_our_database(databases):
        try:
            problem = writes_on_standby()
        except DatabaseError:
            return []  # unreachable: the start-up check says so in one line
    return [] if problem is None else [Error(problem, id=WRITES_OVER_STANDBY)]
