"""The one place the simulator sets the service's era (infra.era): a NOTIFY or Maestro run holds
its own for the length of the run (the Redis era's run keeps the one it was started in), and the
web server it starts is told the era in force."""

from django.test.utils import override_settings

from infra.era import OLD_SWITCHES, era


def held(name: str):
    """The service in era `name` (infra.era.NOTIFY, MAESTRO...) for the block, as a site sets it."""
    return override_settings(ACCOUNTING_SCHEDULER=name)


def environment() -> dict[str, str]:
    """The era in force, for a process the run starts (the web server): its name, and the old
    switches in step with it (an environment that named them otherwise is refused at start-up)."""
    now = era()
    return {"ACCOUNTING_SCHEDULER": now.name, **dict(zip(OLD_SWITCHES, map(str, now.old_switches)))}
