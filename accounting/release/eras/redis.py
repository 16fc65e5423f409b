"""Redis era (OpenCue main, #2323 to #2472; never released; the seed's design): Lua after commit.

The scheduler books flagged shows against the `acct:*` hashes; a release registers itself in
flight before any row lock and is taken off the hashes by one script after commit
(accounting.release.publish). While a site moves to the NOTIFY era both are done.
"""

from collections.abc import Sequence

from django.conf import settings

from accounting.release.eras.base import FlagOwned, SendsNothing
from accounting.release.eras.notify import send_releases
from accounting.release.publish import RedisReleasePublisher, ReleasePublisher
from accounting.release.types import Branch, Release
from infra.era import REDIS, REDIS_AND_NOTIFY

# Bound once: an enum member looked up on its class per release costs a batch a loop's worth of time
# (bench/release_micro.py; docs/benchmarks.md, "Figures behind the release path's comments").
_SCHEDULER = Branch.SCHEDULER


class PublishesToRedis:
    """The scheduler's counters are Redis's: a release is registered before any lock, published after commit."""

    reads_before_lock = True

    def publishable(self, releases: Sequence[Release]) -> tuple[list[Release], int]:
        """The scheduler-managed releases whose decrement may reach Redis, and how many are withheld.

        The Rust scheduler's own booked reseed (ACCOUNTING_SCHEDULER_RESEEDS) leaves out the procs of
        FINISHED jobs while they still run: after such a reseed their counters no longer hold them, and
        decrementing them again would read low. Their decrement is withheld, leaving Redis high by at
        most their amounts until the next reseed, which no longer sees the deleted procs: safe. Where
        only this service reseeds, it counts them (a proc is booked until it is released) and every
        release is published exactly."""
        to_redis = [r for r in releases if r.branch is _SCHEDULER]
        if not settings.ACCOUNTING_SCHEDULER_RESEEDS:
            return to_redis, 0
        publishable = [r for r in to_redis if not r.job_finished]
        return publishable, len(to_redis) - len(publishable)


class RedisEra(FlagOwned, PublishesToRedis, SendsNothing):
    name = REDIS
    publisher: ReleasePublisher = RedisReleasePublisher()


class RedisAndNotifyEra(FlagOwned, PublishesToRedis):
    name = REDIS_AND_NOTIFY
    publisher: ReleasePublisher = RedisReleasePublisher()
    sends_in_transaction = True

    def send(self, *, cursor, releases: Sequence[Release], commit: bool) -> None:
        send_releases(cursor=cursor, releases=releases, commit=commit)
