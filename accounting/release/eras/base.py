"""The questions every era answers for a release, and the answer the flag-owned eras share."""

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from accounting.release.publish import NoopReleasePublisher, ReleasePublisher
from accounting.release.types import Branch, Release
from shows.selectors import ownership


@dataclass(frozen=True)
class Counting:
    """Who counts the non-local procs of each show a release touches."""

    branches: dict[str, Branch]  # show id -> SCHEDULER (the scheduler's counters) or CUEBOT (the five tables)
    # Shows switched back to Cuebot so recently that a booking on the old flag may yet commit:
    # their rows are recomputed from proc instead of decremented (accounting.ownership.switching),
    # but for procs the switch-back recompute counted, where that is known (`counted_below`).
    settling: frozenset[str]
    # settling show id -> the xid horizon its switch-back recompute counted below (shows.selectors.Ownership)
    counted_below: dict[str, int] = field(default_factory=dict)


class ReleaseEra(Protocol):
    name: str
    publisher: ReleasePublisher  # prepare: before any lock; publish: after commit (or to settle a rollback)
    reads_before_lock: bool  # whether the release reads its procs before locking them, for publisher.prepare
    sends_in_transaction: bool  # whether send() writes anything

    def counting(self, *, show_ids: Collection[str]) -> Counting: ...

    def publishable(self, releases: Sequence[Release]) -> tuple[list[Release], int]:
        """The releases `publisher` takes off the scheduler's counters, and how many it withholds."""

    def send(self, *, cursor, releases: Sequence[Release], commit: bool) -> None:
        """Inside the release transaction, last; commit: the outermost transaction's COMMIT may go with it."""


class FlagOwned:
    """Redis and NOTIFY eras: the scheduler counts a flagged show's procs (Cuebot's tables stop
    following them), Cuebot an unflagged one's; the flag is read through its shared cache."""

    def counting(self, *, show_ids: Collection[str]) -> Counting:
        owners = {show_id: ownership(show_id=show_id) for show_id in show_ids}
        return Counting(
            branches={
                show_id: Branch.SCHEDULER if owner.scheduler_managed else Branch.CUEBOT
                for show_id, owner in owners.items()
            },
            settling=frozenset(show_id for show_id, owner in owners.items() if owner.settling),
            counted_below={
                show_id: owner.counted_below
                for show_id, owner in owners.items()
                if owner.settling and owner.counted_below is not None
            },
        )


class SendsNothing:
    """An era whose scheduler hears nothing inside the transaction."""

    sends_in_transaction = False

    def send(self, *, cursor, releases: Sequence[Release], commit: bool) -> None:
        return None


class PublishesNothing:
    """An era with no scheduler counters in Redis."""

    publisher: ReleasePublisher = NoopReleasePublisher()
    reads_before_lock = False

    def publishable(self, releases: Sequence[Release]) -> tuple[list[Release], int]:
        return [], 0
