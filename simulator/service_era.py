"""The one place the simulator sets or asks the service's era (cuebot_acct.schedulers): an era
run holds its own for the length of the run, and the farm's clean-up and the web server follow
the era in force."""

from django.conf import settings
from django.test.utils import override_settings

from cuebot_acct import schedulers


def held(name: str):
    """The service in era `name` (schedulers.REDIS, NOTIFY or MAESTRO) for the block, as a site
    sets it; the Redis era's run keeps the era it was started in."""
    if name == schedulers.REDIS:
        return override_settings()
    redis, notify = schedulers.flags_of(name=name)
    return override_settings(ACCOUNTING_REDIS_ENABLED=redis, ACCOUNTING_NOTIFY_ENABLED=notify)


def keeps_accounting_redis() -> bool:
    """Only the Redis era has the scheduler's acct:* keys."""
    return settings.ACCOUNTING_REDIS_ENABLED


def environment() -> dict[str, str]:
    """The era in force, for a process the run starts (the web server)."""
    return {
        "ACCOUNTING_SCHEDULER": schedulers.current(),
        "ACCOUNTING_REDIS_ENABLED": str(settings.ACCOUNTING_REDIS_ENABLED),
        "ACCOUNTING_NOTIFY_ENABLED": str(settings.ACCOUNTING_NOTIFY_ENABLED),
    }
