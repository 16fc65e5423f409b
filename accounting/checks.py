"""System check accounting.W001: the publish guardrail, as `manage.py check` shows it."""
from django.core.checks import Warning, register
from django.db import DatabaseError, transaction

from accounting.guardrail import MESSAGE, evaluate


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
        hint=(f"{report.managed_shows} show(s) are scheduler-managed. Set ACCOUNTING_REDIS_ENABLED=true on: "
              + "; ".join(report.culprits())),
        id="accounting.W001",
    )]
