"""Functions the task cluster runs, by dotted path (schedules in accounting.schedules)."""
from accounting import switching
from accounting.guardrail import run_guardrail
from accounting.instances import delete_stale_instances
from accounting.services import recalculate_subs


def recalculate_subs_task() -> int:
    """Rows corrected, or -1 when another instance held the lock."""
    result = recalculate_subs()
    return len(result.changes) if result.ran else -1


def accounting_guardrail_task() -> bool:
    """Drops records of vanished processes, then checks the live fleet; True when misconfigured."""
    delete_stale_instances()
    return run_guardrail().misconfigured


def retry_seed_show(*, show_id: str, attempt: int) -> None:
    switching.retry_seed_show(show_id=show_id, attempt=attempt)
