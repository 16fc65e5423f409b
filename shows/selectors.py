"""Reads about shows. The b_scheduler_managed flag is read through a shared cache; the shows nothing books are read from PostgreSQL."""

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.cache import cache
from django.db.models import Q, QuerySet

from infra.cuebot_database import cuebot_connection
from shows.flag_tracking import show_keys
from shows.models import Job, Show


def flag_cache_key(*, show_id: str) -> str:
    return f"show:scheduler_managed:{show_id}"


def settling_cache_key(*, show_id: str) -> str:
    return f"show:settling:{show_id}"


@dataclass(frozen=True)
class Ownership:
    scheduler_managed: bool
    # Switched back to Cuebot so recently that a booking made by a scheduler still seeing
    # the old flag may yet commit its proc (accounting.ownership.switching).
    settling: bool
    # While settling, once the switch-back recompute is done: the xid horizon it counted below
    # (accounting.reconcile.recompute.xid_horizon), a 64-bit xid; a proc inserted by a transaction
    # below it was counted by it (recompute.inserted_below). None until then, or if it has none.
    counted_below: int | None = None


def settling_mark(*, counted_below: int | None) -> bool | str:
    """The cached value that marks a show settling: True, or once known the horizon as decimal
    text. Text keeps the two kinds apart by type (Python counts True as the int 1, so an int
    horizon would need telling from it), and it is what the service has always cached there.
    Encoded here and decoded in ownership() only."""
    return True if counted_below is None else str(counted_below)


def is_scheduler_managed(*, show_id: str) -> bool:
    """The show's flag, from the cache shared by every process (TTL SHOW_FLAG_CACHE_SECONDS).

    A miss reads PostgreSQL and fills the cache. An unknown show reads as Cuebot-managed
    and is not cached, so a show created a moment later is not hidden for the TTL.
    """
    return ownership(show_id=show_id).scheduler_managed


def ownership(*, show_id: str) -> Ownership:
    """The flag and whether the show is settling after a switch back.

    Held in the process until Redis reports a change of either key (shows.flag_tracking):
    no round trip while nothing changed, one to the cache Redis otherwise.
    """
    flag_key, settling_key = flag_cache_key(show_id=show_id), settling_cache_key(show_id=show_id)
    cached = show_keys().get_many([flag_key, settling_key], cache.get_many)
    managed = cached.get(flag_key)
    if managed is None:
        managed = _read_flag(show_id=show_id)
    settling = cached.get(settling_key)
    return Ownership(
        scheduler_managed=managed,
        settling=bool(settling),
        counted_below=int(settling) if isinstance(settling, str) else None,
    )


def _read_flag(*, show_id: str) -> bool:
    key = flag_cache_key(show_id=show_id)
    managed = Show.objects.filter(pk=show_id).values_list("b_scheduler_managed", flat=True).first()
    if managed is None:
        return False
    cache.set(key, managed, timeout=settings.SHOW_FLAG_CACHE_SECONDS)
    return managed


def refresh_flag_cache(*, show_id: str, managed: bool) -> None:
    """Store a flag known to be committed. Call it from on_commit only: a flag cached before a
    rolled-back toggle would stay wrong for the cache's whole TTL (docs/design.md#lessons)."""
    cache.set(flag_cache_key(show_id=show_id), managed, timeout=settings.SHOW_FLAG_CACHE_SECONDS)


def count_scheduler_managed_shows() -> int:
    """Straight from PostgreSQL: the guardrail must not trust a 30 s old answer."""
    return Show.objects.filter(b_scheduler_managed=True).count()


@dataclass(frozen=True)
class StrandedShow:
    id: str
    name: str
    last_booked: datetime | None  # the newest booking of a proc still running, None when none runs


# Cuebot's dispatcher skips flagged shows, so a flagged show's bookings come from its scheduler
# alone; waiting frames of a live, unpaused job with no booking since `since` mean none comes.
# A paused job's frames wait on purpose. Driven by the flagged shows: each costs one probe of
# its pending jobs' frames and one of its procs (i_proc_pkshow).
STRANDED_SHOWS = """
SELECT s.pk_show, s.str_name, (SELECT max(p.ts_booked) FROM proc p WHERE p.pk_show = s.pk_show)
  FROM show s
 WHERE s.b_scheduler_managed
   AND EXISTS (SELECT 1 FROM job j JOIN frame f ON f.pk_job = j.pk_job
                WHERE j.pk_show = s.pk_show AND j.str_state = 'PENDING' AND NOT j.b_paused
                  AND f.str_state = 'WAITING')
   AND NOT EXISTS (SELECT 1 FROM proc p WHERE p.pk_show = s.pk_show AND p.ts_booked >= %(since)s)
 ORDER BY s.str_name, s.pk_show
"""


def stranded_shows(*, since: datetime) -> list[StrandedShow]:
    """Scheduler-managed shows with waiting frames and no proc booked since `since`: nothing books them."""
    with cuebot_connection().cursor() as cursor:
        cursor.execute(STRANDED_SHOWS, {"since": since})
        return [StrandedShow(id=id_, name=name, last_booked=last) for id_, name, last in cursor.fetchall()]


class AmbiguousName(LookupError):
    """Several rows carry the name: Cuebot's schema keeps show, facility, dept and folder names
    (and job names over time) unique nowhere, so a lookup must not pick one."""


def only_one(rows: QuerySet, *, what: str, name: str):
    """The one row of `rows`, None if there is none; AmbiguousName if there are several."""
    found = list(rows[:2])
    if len(found) > 1:
        raise AmbiguousName(f"several {what}s are named {name!r}; give its id instead")
    return found[0] if found else None


def get_show_by_name(*, name: str) -> Show | None:
    return only_one(Show.objects.filter(str_name=name), what="show", name=name)


class ShowNameUnusable(LookupError):
    """No show carries the name (`several` False), or several do (True); the message says which."""

    def __init__(self, message: str, *, several: bool):
        super().__init__(message)
        self.several = several


def show_named(*, name: str) -> Show:
    """The one show named `name`, for the faces that take a show's name (commands, API);
    ShowNameUnusable when there is none or several, so each face maps one error."""
    try:
        found = get_show_by_name(name=name)
    except AmbiguousName as error:
        raise ShowNameUnusable(str(error), several=True) from None
    if found is None:
        raise ShowNameUnusable(f"no show named {name!r}", several=False)
    return found


def get_live_job(*, name_or_id: str) -> Job | None:
    """A job by id, or by its live name: `str_visible_name`, which Cuebot clears when the job
    finishes, while `str_name` stays and repeats when the job is launched again."""
    return only_one(Job.objects.filter(Q(pk=name_or_id) | Q(str_visible_name=name_or_id)), what="job", name=name_or_id)


def list_shows() -> list[Show]:
    return list(Show.objects.order_by("str_name"))
