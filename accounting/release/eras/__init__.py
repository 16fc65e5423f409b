"""Who counts and who hears a release, in each OpenCue a site may run (cuebot_acct.schedulers).

The release path (accounting.release.unbook) asks its era, chosen once per release, what to do
at its three moments: before any row lock (`publisher.prepare`: the Redis era registers the
release in flight), inside the transaction (`send`: the NOTIFY era queues pg_notify) and after
commit (`publisher.publish`: the Redis era's script). The era also says who counts each show's
procs (`counting`): a flagged show's rows are the scheduler's in the Redis and NOTIFY eras and
Cuebot's, like every show's, in the Maestro era. A fourth era is one more module here.
"""
from collections.abc import Iterable

from accounting.release.eras.base import Counting, ReleaseEra
from accounting.release.eras.maestro import MaestroEra
from accounting.release.eras.notify import NotifyEra
from accounting.release.eras.redis import RedisAndNotifyEra, RedisEra
from cuebot_acct import schedulers

__all__ = ["Counting", "ReleaseEra", "release_era"]

_ERAS: dict[str, ReleaseEra] = {
    schedulers.MAESTRO: MaestroEra(),
    schedulers.REDIS: RedisEra(),
    schedulers.NOTIFY: NotifyEra(),
    schedulers.REDIS_AND_NOTIFY: RedisAndNotifyEra(),
}


def release_era() -> ReleaseEra:
    """The era of this release, from the settings as they are now (a test's override included)."""
    return _ERAS[schedulers.current()]


def show_ids_of(rows: Iterable[tuple], *, show: int, local: int) -> set[str]:
    """The shows of a releasing statement's rows whose procs are not local (a local proc's
    counting does not depend on its show's owner)."""
    return {row[show] for row in rows if not row[local]}
