"""System checks: accounting.W001 (the publish guardrail) and accounting.E001-E005 (a
site's Cuebot database lacks what the project reads or writes, OPENCUE_TABLES=existing)."""
from django.conf import settings
from django.core.checks import Error, Warning, register
from django.db import DatabaseError, transaction

from accounting.ownership.guardrail import MESSAGE, evaluate
from shows.attach import schema_problems


@register()
def cuebot_schema(app_configs=None, **kwargs) -> list[Error]:
    if settings.OPENCUE_TABLES != "existing":
        return []
    try:
        problems = schema_problems()
    except DatabaseError:
        return []  # unreachable: the start-up check says so in one line
    return [Error(problem.message, hint=problem.hint, id=problem.id) for problem in problems]


@register()
def publish_guardrail(app_configs=None, **kwargs) -> list[Warning]:
    try:
        # The savepoint keeps a failed query (tables not migrated yet) from breaking a caller's transaction.
        with transaction.atomic():
            report = evaluate()
    except DatabaseError:
        return []  # unreachable or not migrated: nothing to check yet, and `check` must not crash
    if not report.misconfigured:
        return []
    return [Warning(
        MESSAGE,
        hint=report.hint,
        id="accounting.W001",
    )]
