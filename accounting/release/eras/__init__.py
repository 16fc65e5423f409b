"""Who counts and who hears a release, in each OpenCue a site may run (infra.era).

The release path (accounting.release.unbook) asks its era, chosen once per release, what to do
at its three moments: before any row lock (`publisher.prepare`: the Redis era registers the
release in flight), inside the transaction (`send`: the NOTIFY era queues pg_notify) and after
commit (`publisher.publish`: the Redis era's script). The era also says who counts each show's
procs (`counting`): a flagged show's rows are the scheduler's in the Redis and NOTIFY eras and
Cuebot's, like every show's, in the Maestro era. A fourth era is one more module here.

`publishers_wrapped` is the one seam for standing between a release and its scheduler's
counters (the simulator's publish-drop fault, tests): nothing patches this package's names.
"""

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from accounting.release.eras.base import Counting, ReleaseEra
from accounting.release.eras.maestro import MaestroEra
from accounting.release.eras.notify import NotifyEra
from accounting.release.eras.redis import RedisAndNotifyEra, RedisEra
from accounting.release.publish import ReleasePublisher
from infra.era import MAESTRO, NOTIFY, REDIS, REDIS_AND_NOTIFY, era

__all__ = ["Counting", "ReleaseEra", "publishers_wrapped", "release_era"]

_ERAS: dict[str, ReleaseEra] = {
    MAESTRO: MaestroEra(),
    REDIS: RedisEra(),
    NOTIFY: NotifyEra(),
    REDIS_AND_NOTIFY: RedisAndNotifyEra(),
}


# The eras with a wrapped publisher, while publishers_wrapped's block runs; empty otherwise.
_WRAPPED: dict[str, ReleaseEra] = {}


def release_era() -> ReleaseEra:
    """The era of this release, from the settings as they are now (a test's override included)."""
    name = era().name
    return _WRAPPED.get(name) or _ERAS[name]


@contextmanager
def publishers_wrapped(wrap: Callable[[ReleasePublisher], ReleasePublisher]) -> Iterator[None]:
    """For the block, every release of this process, in any thread, gets its era with the
    publisher `wrap(era.publisher)`; everything else about the era is unchanged. One block at
    a time: a second, nested or from another thread, is refused rather than silently undone."""
    if _WRAPPED:
        raise RuntimeError("the release publishers are wrapped already")
    _WRAPPED.update({name: _with_publisher(era, wrap(era.publisher)) for name, era in _ERAS.items()})
    try:
        yield
    finally:
        _WRAPPED.clear()


def _with_publisher(era: ReleaseEra, publisher: ReleasePublisher) -> ReleaseEra:
    twin = copy.copy(era)  # the era's other answers stay its class's
    twin.publisher = publisher
    return twin
