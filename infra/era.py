"""The OpenCue a site runs (ACCOUNTING_SCHEDULER), as one object every module asks.

OpenCue has answered "who counts a scheduler-managed show's resources" three times
(docs/eras.md). `era()` returns the answer for this process: whether it keeps an accounting
Redis, whether it sends NOTIFY, who owns a show, which drift sources it has, how a release is
told, why a Redis reseed is refused and what the pages call it. Callers ask the object and never
which era it is; a new era is one more instance below. Tests set the era one way:
`override_settings(ACCOUNTING_SCHEDULER=...)` (pytest's `settings` fixture does the same).
"""

from dataclasses import dataclass

from django.conf import settings

from infra.bad_setting import BadSetting

MAESTRO, REDIS, NOTIFY = "maestro", "redis", "notify"
REDIS_AND_NOTIFY = f"{REDIS},{NOTIFY}"
CHOICES = (MAESTRO, REDIS, NOTIFY, REDIS_AND_NOTIFY)
ACCEPTED = (
    "maestro (OpenCue v1.34.20 and later, and every release before: Cuebot owns the five tables for every show), "
    "redis (OpenCue main, #2323 to #2472, never released), notify (OpenCue main, #2472 to #2533, never released) "
    "or redis,notify (moving from one to the other)"
)
# The two booleans of earlier deployments, which the settings still map to a name.
OLD_SWITCHES = ("ACCOUNTING_REDIS_ENABLED", "ACCOUNTING_NOTIFY_ENABLED")
# The drift sources, as DriftRecord.Source stores them (accounting.models).
CUEBOT_TABLES, REDIS_FIELDS = "cuebot_tables", "redis"


@dataclass(frozen=True)
class Era:
    name: str  # the canonical ACCOUNTING_SCHEDULER value
    label: str  # what the pages and messages call it: "Maestro era", ...
    keeps_redis: bool  # acct:* keys in an accounting Redis the scheduler books against
    sends_notify: bool  # pg_notify on acct_release / acct_limit_change in the writing transaction
    cuebot_owns_every_show: bool  # a flagged show's five tables stay Cuebot's
    start_flagged_booker: str  # what to start when nothing books a flagged show

    def cuebot_owns(self, *, flagged: bool) -> bool:
        """Whether Cuebot writes the show's five tables (flagged: its b_scheduler_managed)."""
        return not flagged or self.cuebot_owns_every_show

    @property
    def release_told(self) -> frozenset[str]:
        """How a release reaches the scheduler: "redis" (a script after commit) and/or "notify"."""
        return frozenset(way for way, on in ((REDIS, self.keeps_redis), (NOTIFY, self.sends_notify)) if on)

    @property
    def drift_sources(self) -> tuple[str, ...]:
        """What the drift checks compare: Cuebot's tables always, the acct:* fields where Redis is kept."""
        return (CUEBOT_TABLES, REDIS_FIELDS) if self.keeps_redis else (CUEBOT_TABLES,)

    def drift_source(self, *, flagged: bool) -> str | None:
        """The one source a show's drift is read from; None where its counters are the scheduler's own."""
        if self.cuebot_owns(flagged=flagged):
            return CUEBOT_TABLES
        return REDIS_FIELDS if self.keeps_redis else None

    def no_redis_reseed(self, *, repair: str) -> str | None:
        """Why a Redis reseed is refused in this era (None: there is a Redis to reseed); `repair`
        names the command that repairs Cuebot's tables instead."""
        if self.keeps_redis:
            return None
        if self.cuebot_owns_every_show:
            return f"{self.label}: no Redis to reseed; {repair} repairs Cuebot's tables."
        return f"{self.label}: no Redis to reseed; the scheduler recomputes its own counters from SUM(proc)."

    @property
    def old_switches(self) -> tuple[bool, bool]:
        """(ACCOUNTING_REDIS_ENABLED, ACCOUNTING_NOTIFY_ENABLED) as earlier deployments set them for this era."""
        return self.keeps_redis, self.sends_notify

    def template_context(self) -> dict:
        return {"era": self}


_RUST_SCHEDULER = "start the Rust scheduler that books flagged shows"
_ERAS = {
    era.name: era
    for era in (
        Era(
            name=MAESTRO,
            label="Maestro era",
            keeps_redis=False,
            sends_notify=False,
            cuebot_owns_every_show=True,
            start_flagged_booker="turn Maestro on for it (maestro.enabled=managed, or facility for every show)",
        ),
        Era(
            name=REDIS,
            label="Redis era",
            keeps_redis=True,
            sends_notify=False,
            cuebot_owns_every_show=False,
            start_flagged_booker=_RUST_SCHEDULER,
        ),
        Era(
            name=NOTIFY,
            label="Notify era",
            keeps_redis=False,
            sends_notify=True,
            cuebot_owns_every_show=False,
            start_flagged_booker=_RUST_SCHEDULER,
        ),
        Era(
            name=REDIS_AND_NOTIFY,
            label="Redis and notify era",
            keeps_redis=True,
            sends_notify=True,
            cuebot_owns_every_show=False,
            start_flagged_booker=_RUST_SCHEDULER,
        ),
    )
}


def era() -> Era:
    """This process's era, from ACCOUNTING_SCHEDULER as the settings hold it now (a test's
    override included). Unset (a process refused at start-up that only prints) reads as Maestro:
    nothing published, nothing sent."""
    return _ERAS[settings.ACCOUNTING_SCHEDULER or MAESTRO]


def named(name: str) -> Era:
    """The era a canonical name (parse()'s) stands for."""
    return _ERAS[name]


def parse(*, value: str) -> str:
    """The scheduler's canonical name; `redis,notify` in either order, spaces and case ignored."""
    words = sorted({word.strip().lower() for word in value.split(",")} - {""})
    name = ",".join(words if words != [NOTIFY, REDIS] else [REDIS, NOTIFY])
    if name not in CHOICES:
        raise BadSetting(setting="ACCOUNTING_SCHEDULER", problem=f"is {value!r}", accepted=ACCEPTED)
    return name


def told_by(told: frozenset[str] | set[str]) -> str:
    """The name of the era whose releases are told the ways `told` holds ("redis", "notify"):
    what the two booleans of earlier deployments name, both off being Maestro."""
    return next(era.name for era in _ERAS.values() if era.release_told == frozenset(told))


def from_old_switches(*, redis: bool, notify: bool) -> str:
    """The era the two booleans of earlier deployments name (both off: Maestro)."""
    return told_by({way for way, on in ((REDIS, redis), (NOTIFY, notify)) if on})


# Set by manage.py (infra.startup) for a command line that only prints: help, a command's
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


def template_context(request=None) -> dict:
    """For every page (a context processor): the era, so that a page explains only what it has."""
    return era().template_context()
