"""Redis era (OpenCue main, #2323 to #2472; never released; the seed's design): Lua after commit.

The scheduler books flagged shows against the `acct:*` hashes; a release registers itself in
flight before any row lock and is taken off the hashes by one script after commit
(accounting.release.publish). While a site moves to the NOTIFY era both are done.
"""

from collections.abc import Sequence

from accounting.release.eras.base import FlagOwned, SendsNothing
from accounting.release.eras.notify import send_releases
from accounting.release.publish import RedisReleasePublisher, ReleasePublisher
from accounting.release.types import Release
from cuebot_acct import schedulers


class RedisEra(FlagOwned, SendsNothing):
    name = schedulers.REDIS
    publisher: ReleasePublisher = RedisReleasePublisher()
    reads_before_lock = True


class RedisAndNotifyEra(FlagOwned):
    name = schedulers.REDIS_AND_NOTIFY
    publisher: ReleasePublisher = RedisReleasePublisher()
    reads_before_lock = True
    sends_in_transaction = True

    def send(self, *, cursor, releases: Sequence[Release], commit: bool) -> None:
        send_releases(cursor=cursor, releases=releases, commit=commit)
