"""Which OpenCue scheduler a site runs (ACCOUNTING_SCHEDULER), and who owns Cuebot's tables because of it.

OpenCue has answered "who counts a scheduler-managed show's resources" three times
(docs/eras.md): the Redis era and the NOTIFY era lived only on OpenCue's main branch; the
Maestro era (v1.34.20 and later) gives the five accounting tables back to Cuebot for every
show. A wrong guess corrupts a site's counters, so the name is parsed here, once, for the
settings, and every other module asks the two functions below instead of reading flags.
"""

from django.conf import settings

from cuebot_acct.bad_setting import BadSetting

MAESTRO, REDIS, NOTIFY = "maestro", "redis", "notify"
REDIS_AND_NOTIFY = f"{REDIS},{NOTIFY}"
CHOICES = (MAESTRO, REDIS, NOTIFY, REDIS_AND_NOTIFY)
ACCEPTED = (
    "maestro (OpenCue v1.34.20 and later, and every release before: Cuebot owns the five tables for every show), "
    "redis (OpenCue main, #2323 to #2472, never released), notify (OpenCue main, #2472 to #2533, never released) "
    "or redis,notify (moving from one to the other)"
)


def parse(*, value: str) -> str:
    """The scheduler's canonical name; `redis,notify` in either order, spaces and case ignored."""
    words = sorted({word.strip().lower() for word in value.split(",")} - {""})
    name = ",".join(words if words != [NOTIFY, REDIS] else [REDIS, NOTIFY])
    if name not in CHOICES:
        raise BadSetting(setting="ACCOUNTING_SCHEDULER", problem=f"is {value!r}", accepted=ACCEPTED)
    return name


# Set by manage.py (cuebot_acct.startup) for a command line that only prints: help, a command's
# --help, --version. Django runs every app's ready() before printing those too, and a process
# that acts on nothing cannot corrupt a counter, so the refusal below lets it through.
_only_prints = False


def let_printing_through() -> None:
    """This process only prints help or a version: require_named() refuses nothing in it."""
    global _only_prints
    _only_prints = True


def require_named() -> None:
    """Refuse to start (one line, naming the choices) a process whose settings name no scheduler."""
    if settings.ACCOUNTING_SCHEDULER is None and not _only_prints:
        raise BadSetting(setting="ACCOUNTING_SCHEDULER", problem="is not set (DEBUG is off)", accepted=ACCEPTED)


def from_flags(*, redis: bool, notify: bool) -> str:
    """What the two booleans of earlier deployments name: both off is Cuebot owning every show's rows."""
    if redis and notify:
        return REDIS_AND_NOTIFY
    return REDIS if redis else NOTIFY if notify else MAESTRO


def flags_of(*, name: str) -> tuple[bool, bool]:
    """(ACCOUNTING_REDIS_ENABLED, ACCOUNTING_NOTIFY_ENABLED) for a canonical name."""
    return REDIS in name.split(","), NOTIFY in name.split(",")


def current() -> str:
    """The scheduler this process serves, from the two flags the settings derive from
    ACCOUNTING_SCHEDULER (so that a test's override of either is the era it runs)."""
    return from_flags(redis=settings.ACCOUNTING_REDIS_ENABLED, notify=settings.ACCOUNTING_NOTIFY_ENABLED)


def cuebot_owns_every_show() -> bool:
    """Maestro era: Cuebot writes the five tables for flagged and unflagged shows alike, and the
    flag only says that Maestro plans the show. In the other eras a flagged show's rows are the
    scheduler's and Cuebot's tables stop following its procs."""
    return current() == MAESTRO


def template_context(request=None) -> dict:
    """For every page (a context processor): the era, so that a page explains only what it has."""
    return {"scheduler": current()}
