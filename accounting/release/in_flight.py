"""A release registered in flight before its transaction locks a row (the Redis era), and settled.

The Redis era's publisher registers what a release is about to take off (release_prepare.lua,
accounting.release.publish) before any PostgreSQL lock, so no row lock is held while Redis is
waited on; after commit the release publishes exactly what was registered and made
(accounting.release.after_commit). Eras without Redis register nothing.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from accounting.release.eras import ReleaseEra
from accounting.release.publish import PreparedRelease, made
from accounting.release.types import Release


@dataclass(frozen=True)
class Registered:
    """What was registered in flight before the transaction, per proc."""

    prepared: PreparedRelease
    releases: dict[str, Release]

    def covering(self, releases: Sequence[Release]) -> tuple[list[Release], int]:
        """The releases made exactly as registered, and how many were not: a proc whose amounts,
        keys or owner changed between the read and the DELETE is not published, or a reseed
        between could take its counters below SUM(proc)."""
        covered = [r for r in releases if (registered := self.releases.get(r.proc_id)) is r or registered == r]
        return covered, len(releases) - len(covered)

    def narrowed_to(self, covered: Sequence[Release]) -> PreparedRelease:
        """What the publish takes off: the registration as it is when every registered release
        was made as registered (the usual case: its sums are reused), else made() of those that were."""
        if len(covered) == len(self.releases):  # covered are registered ones, each once
            return self.prepared
        return made(prepared=self.prepared, releases=covered)


def register_in_flight(*, releases: list[Release], era: ReleaseEra) -> Registered | None:
    """Register the releases the era publishes, as read before any lock; None where nothing was
    registered (none to publish, or the publisher declined: its breaker open, Redis failing)."""
    candidates, _ = era.publishable(releases)
    if not candidates:
        return None
    prepared = era.publisher.prepare(releases=candidates)
    return None if prepared is None else Registered(prepared=prepared, releases={r.proc_id: r for r in candidates})


@contextmanager
def in_flight(*, releases: list[Release] | None, era: ReleaseEra) -> Iterator[Registered | None]:
    """The releases registered in flight for the block (None read: nothing to register), and the
    entry settled at once, nothing taken off, if the block raises (a rerun registers its own).
    A transaction that raised rolled back, and nothing it deleted is gone. A releasing statement
    that ran on its own may have committed before the error (in the publish, the metrics): its
    procs are gone and the counters keep them until the next reseed, high, the safe direction.
    A settle that fails leaves the entry to expire: high as well."""
    registered = register_in_flight(releases=releases, era=era) if releases is not None else None
    if registered is None:
        yield None
        return
    try:
        yield registered
    except BaseException:
        era.publisher.publish(prepared=made(prepared=registered.prepared, releases=[]))
        raise
