"""Where Cuebot's tables are read: one database alias, which a site may point at a hot standby.

Two places, named apart. The service's own state (sessions, tokens, drift records, the cache, the
task queue) lives in `default` (DATABASE_URL). Cuebot's tables are read through the alias
`cuebot_database()` names: `default` itself unless CUEBOT_DATABASE_URL names another database,
then `cuebot`. With one database everything runs on one connection, in one transaction, as
before: the writes of Cuebot's tables (releases, repairs, recalculate_subs, toggles) must commit
with what they write, so a second alias exists only for an observer (accounting.E006 refuses one
with writes on). No statement joins the two: the router (infra.db_router) sends the ORM's
reads of Cuebot's models to the alias, raw SQL asks `cuebot_connection()`.

A standby answers as of its last replayed transaction (`replay()`); it may cancel a read that
conflicts with replay (SQLSTATE 40001), which `read_cuebot` runs once more before it says so in
one line (`said`).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest, HttpResponse, JsonResponse

from infra.outages import first_line, is_postgresql_outage
from infra.redis_factory import hide_password

logger = logging.getLogger(__name__)

CUEBOT_ALIAS = "cuebot"
# A standby further behind than this has the faces that show Cuebot's state say "as of" its replay time.
AS_OF_SECONDS = 5.0
# serialization_failure: what a standby answers a read that replay had to cancel.
RECOVERY_CONFLICT = "40001"

T = TypeVar("T")


def cuebot_database() -> str:
    """The alias Cuebot's tables are read through: `cuebot` where CUEBOT_DATABASE_URL names a
    database of its own, else `default`."""
    return settings.CUEBOT_DATABASE_ALIAS


def cuebot_connection() -> BaseDatabaseWrapper:
    return connections[cuebot_database()]


def apart() -> bool:
    """Whether Cuebot's tables are read from a database other than the service's own."""
    return cuebot_database() != DEFAULT_DB_ALIAS


def cuebot_url() -> str:
    """The URL Cuebot's tables are read from, its password hidden, as every line names it."""
    return hide_password(settings.CUEBOT_DATABASE_URL if apart() else settings.DATABASE_URL)


@dataclass(frozen=True)
class Replay:
    """How current Cuebot's tables are as read: live on a primary; on a standby, as of its last
    replayed transaction (`replayed_at`) and `lag` seconds behind (0 once it has replayed all it
    received: an idle primary commits nothing, and that is no lag)."""

    standby: bool
    replayed_at: datetime | None
    lag: float

    @property
    def as_of(self) -> datetime | None:
        """The replay time a face says, where the standby is more than AS_OF_SECONDS behind."""
        return self.replayed_at if self.standby and self.lag > AS_OF_SECONDS else None


LIVE = Replay(standby=False, replayed_at=None, lag=0.0)


def as_of_line(state: Replay) -> str | None:
    """What a face that shows Cuebot's state says when the standby is behind; None when current."""
    if state.as_of is None:
        return None
    return (
        f"Cuebot's tables as of {state.as_of:%Y-%m-%d %H:%M:%S} UTC, the standby's last replayed transaction "
        f"({state.lag:.0f} s behind the primary)"
    )


_REPLAY = """
SELECT pg_is_in_recovery(), pg_last_xact_replay_timestamp(),
       CASE WHEN NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) END"""


def replay() -> Replay:
    """Cuebot's database's replay state now; LIVE without a query where it is the service's own."""
    if not apart():
        return LIVE
    with cuebot_connection().cursor() as cursor:
        cursor.execute(_REPLAY)
        standby, replayed_at, lag = cursor.fetchone()
    return Replay(standby=standby, replayed_at=replayed_at if standby else None, lag=max(float(lag), 0.0))


def in_recovery(alias: str) -> bool:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_is_in_recovery()")
        return cursor.fetchone()[0]


def is_recovery_conflict(error: BaseException) -> bool:
    state = getattr(error.__cause__, "sqlstate", None) or getattr(error, "sqlstate", None)
    return state == RECOVERY_CONFLICT and apart()


def read_cuebot(fn: Callable[[], T], *, what: str) -> T:
    """fn, which reads Cuebot's tables through the alias, run once more when replay cancelled it
    (a standby's recovery conflict); a second cancellation propagates, for its face to say."""
    try:
        return fn()
    except OperationalError as error:
        if not is_recovery_conflict(error) or cuebot_connection().in_atomic_block:
            raise
        logger.info("%s: cancelled by the standby's replay (%s); reading once more", what, first_line(error))
        cuebot_connection().close_if_unusable_or_obsolete()
        try:
            return fn()
        except OperationalError as again:
            again.reread = True  # type: ignore[attr-defined]  # read twice already: a page says it, not reruns it
            raise


def from_cuebot_database(error: BaseException) -> bool:
    """Whether a database error came from Cuebot's alias, where that is a database of its own
    (infra.postgresql marks each error with the alias that raised it)."""
    return apart() and getattr(error, "alias", None) == CUEBOT_ALIAS


def said(error: DatabaseError) -> str:
    """One line for a read of Cuebot's database that failed: which database, and what to do."""
    where = f"Cuebot's database at {cuebot_url()}"
    if is_recovery_conflict(error):
        return (
            f"{where} cancelled the read in conflict with recovery, twice ({first_line(error)}); "
            "raise max_standby_streaming_delay or turn hot_standby_feedback on (docs/production.md, "
            "reading from a standby), or run it again"
        )
    if is_postgresql_outage(error):
        return f"cannot reach {where} ({first_line(error)}); nothing was read and the service's own state is untouched"
    return f"{where} ended the read ({first_line(error)})"


def template_context(request) -> dict:
    """For every admin page: the "as of" line, read only where a page shows it (a callable), and
    left out when the standby cannot say (the page's own reads then say so)."""

    def as_of() -> str | None:
        try:
            return as_of_line(replay())
        except DatabaseError:
            return None

    return {"cuebot_as_of": as_of}


class CuebotReadErrors:
    """Middleware: a page or an API call whose read of Cuebot's database apart failed answers one
    line, 503 (JSON under /api/), never a traceback or a 500; a GET that the standby's replay
    cancelled is run once more first. An error of the service's own database passes untouched."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, DatabaseError) or not from_cuebot_database(exception):
            return None
        if (
            request.method in ("GET", "HEAD")
            and is_recovery_conflict(exception)
            and not getattr(exception, "reread", False)
            and request.resolver_match
        ):
            try:
                return _view_again(request)
            except DatabaseError as again:
                if not from_cuebot_database(again):
                    raise
                exception = again
        line = said(exception)
        logger.warning("%s %s: %s", request.method, request.path, line)
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": line}, status=503)
        return HttpResponse(line, status=503, content_type="text/plain; charset=utf-8")


def _view_again(request: HttpRequest) -> HttpResponse:
    """The request's view run once more on a fresh connection to Cuebot's database, rendered."""
    logger.info("%s: cancelled by the standby's replay; reading once more", request.path)
    cuebot_connection().close_if_unusable_or_obsolete()
    match = request.resolver_match
    assert match is not None  # process_exception checked it
    response = match.func(request, *match.args, **match.kwargs)
    render = getattr(response, "render", None)
    return render() if callable(render) else response
