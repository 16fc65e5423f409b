"""ACCOUNTING_WRITES: whether this instance changes anything of Cuebot's, or only observes (a
site on current OpenCue watches drift and its counters before it lets a new service write).
Each kind of write is one `Write`, declared beside its service, which refuses it while observing."""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.http import HttpResponse, HttpResponseForbidden

from infra.era import era

# How the setting is spelt; unset, it follows OPENCUE_TABLES (settings).
WRITES_WORDS = {"on": True, "true": True, "off": False, "false": False}
# What a write of the scheduler's Redis counters (the Redis era's reseeds and rebuilds) needs.
REDIS_ONLY = "no grant in PostgreSQL (it writes the scheduler's acct:* counters in Redis)"


# While observing the service runs under a role that may only SELECT Cuebot's tables
# (shows.attach lists both roles' grants). Every entry point that writes (API operations, pages,
# admin actions, commands, tasks) declares its Write and answers the refusal in its own form:
# the API's JSON body, a page's 403 line, a command's CommandError, a task's warning.
class WritesOff(Exception):
    """An entry point that writes was asked to change something while ACCOUNTING_WRITES is off."""

    def __init__(self, *, action: str, grant: str) -> None:
        self.action, self.grant = action, grant
        super().__init__(
            f"{action} refused: ACCOUNTING_WRITES is off, so this instance only observes and nothing was changed; "
            f"it needs {grant} and ACCOUNTING_WRITES=on (docs/attaching.md, the writer's grants)"
        )


def writes_on() -> bool:
    """The one reading of the setting."""
    return settings.ACCOUNTING_WRITES


def require_writes(*, action: str, grant: str) -> None:
    """Raise WritesOff, naming the action and what it would need, unless writes are on."""
    if not writes_on():
        raise WritesOff(action=action, grant=grant)


@dataclass(frozen=True)
class Write:
    """A kind of change: the action as its refusal names it (`of` adds what it changes) and its grant."""

    action: str
    grant: str

    @property
    def allowed(self) -> bool:
        return writes_on()

    def require(self, *, of: str = "") -> None:
        require_writes(action=f"{self.action} of {of}" if of else self.action, grant=self.grant)


F = TypeVar("F", bound=Callable[..., Any])


def writes(write: Write, *, refused: Callable[[Write], Any] = Write.require) -> Callable[[F], F]:
    """Declare that an entry point (a view, an API operation, an action) makes `write`: while
    observing, `refused(write)` answers in its stead, by default WritesOff before its body runs
    (an API operation's, which the API answers); a page's view is declared with refused=refused_page."""

    def declare(entry: F) -> F:
        @functools.wraps(entry)
        def declared(*args, **kwargs):
            return entry(*args, **kwargs) if write.allowed else refused(write)

        declared.writes = write  # type: ignore[attr-defined]
        return declared  # type: ignore[return-value]

    return declare


def refused_page(write: Write) -> HttpResponse:
    """A page's refusal: 403 and the one line, no traceback anywhere (nothing raised)."""
    refusal = WritesOff(action=write.action, grant=write.grant)
    return HttpResponseForbidden(str(refusal), content_type="text/plain; charset=utf-8")


def mode_line() -> str:
    """What a process says at start about what it may change."""
    if writes_on():
        redis = " and the scheduler's Redis counters" if era().keeps_redis else ""
        return f"ACCOUNTING_WRITES=on: this instance writes Cuebot's tables{redis} when its faces are asked to"
    redis = " (nor the scheduler's Redis counters)" if era().keeps_redis else ""
    return f"ACCOUNTING_WRITES=off: this instance observes and writes nothing of Cuebot's{redis}"


def template_context(request) -> dict:
    """For every page: whether writes are on, and an observer's reason for the actions it leaves out."""
    return {"accounting_writes": writes_on(), "observing": mode_line()}
