"""ACCOUNTING_WRITES: whether this instance changes anything of Cuebot's, or only observes.

A site on current OpenCue wants to see drift, stranded shows and its counters in cores before it
lets a new service write its farm's tables. With writes off the service runs under a role that
may only SELECT Cuebot's tables (shows.attach lists both roles' grants), and every face that
would write, whether a table of Cuebot's or, in the main-branch eras, the scheduler's Redis
counters, asks `require_writes` before it changes anything. The refusal is one sentence naming
this setting and the grant the write would need; it is raised before the first statement, so
PostgreSQL never has to deny the role anything and nothing is left half-done.
"""

from django.conf import settings

# How the setting is spelt; unset, it follows OPENCUE_TABLES (settings).
WRITES_WORDS = {"on": True, "true": True, "off": False, "false": False}
# What a write of the scheduler's Redis counters (the Redis era's reseeds and rebuilds) needs.
REDIS_ONLY = "no grant in PostgreSQL (it writes the scheduler's acct:* counters in Redis)"


class WritesOff(Exception):
    """A write face was asked to change something while ACCOUNTING_WRITES is off."""

    def __init__(self, *, action: str, grant: str) -> None:
        self.action, self.grant = action, grant
        super().__init__(
            f"{action} refused: ACCOUNTING_WRITES is off, so this instance only observes and nothing was changed; "
            f"it needs {grant} and ACCOUNTING_WRITES=on (docs/attaching.md, the writer's grants)"
        )


def require_writes(*, action: str, grant: str) -> None:
    """Raise WritesOff, naming the action and what it would need, unless writes are on."""
    if not settings.ACCOUNTING_WRITES:
        raise WritesOff(action=action, grant=grant)


def mode_line() -> str:
    """What a process says at start about what it may change."""
    if settings.ACCOUNTING_WRITES:
        redis = " and the scheduler's Redis counters" if settings.ACCOUNTING_REDIS_ENABLED else ""
        return f"ACCOUNTING_WRITES=on: this instance writes Cuebot's tables{redis} when its faces are asked to"
    redis = " (nor the scheduler's Redis counters)" if settings.ACCOUNTING_REDIS_ENABLED else ""
    return f"ACCOUNTING_WRITES=off: this instance observes and writes nothing of Cuebot's{redis}"


def template_context(request) -> dict:
    """For every page: whether writes are on, and an observer's reason for the faces it leaves out."""
    return {"accounting_writes": settings.ACCOUNTING_WRITES, "observing": mode_line()}
