"""NOTIFY era (OpenCue main, #2472 to #2533; never released): acct_release in the release's transaction.

The scheduler keeps its own counters for flagged shows and hears each release as a pg_notify
that PostgreSQL delivers if, and only if, the transaction commits (accounting.notify.send).
"""

from collections import Counter
from collections.abc import Sequence

from django.db import transaction

from accounting.notify import send as notify_send
from accounting.notify.payloads import RELEASE, ReleasedAmount, release_payloads
from accounting.release.eras.base import FlagOwned, PublishesNothing
from accounting.release.types import Branch, Release
from infra import metrics
from infra.era import NOTIFY


def send_releases(*, cursor, releases: Sequence[Release], commit: bool) -> None:
    """acct_release for each scheduler-managed release, in this transaction.

    The scheduler's recompute (every 15 s) leaves out the procs of FINISHED jobs (a killed job
    is FINISHED before its procs go) and of jobs whose row is gone: once it has run, a
    decrement for such a proc takes its store below SUM(proc). Those releases are not sent
    (Cuebot sends them), which leaves the store high until the next recompute at worst: the
    safe direction. A release whose job row is gone could not name its folder anyway.
    commit: the notifications are the last thing the outermost transaction sends, and take
    its COMMIT with them (accounting.notify.send.notify_and_commit).
    """
    heard, withheld = _heard(releases)
    payloads = release_payloads(released=heard)
    if commit:
        notify_send.notify_and_commit(channel=RELEASE, payloads=payloads)
    else:
        notify_send.notify(cursor=cursor, channel=RELEASE, payloads=payloads)
    if withheld:

        def count_withheld() -> None:
            for reason, n in withheld.items():
                metrics.NOTIFY_WITHHELD.labels(reason=reason).inc(n)

        transaction.on_commit(count_withheld)


def _heard(releases: Sequence[Release]) -> tuple[list[ReleasedAmount], Counter[str]]:
    """The scheduler-managed releases sent, and those withheld, counted by why (send_releases)."""
    heard: list[ReleasedAmount] = []
    withheld: Counter[str] = Counter()
    for r in releases:
        if r.branch is not Branch.SCHEDULER:
            continue
        if r.job_gone or r.job_finished:
            withheld["job_gone" if r.job_gone else "job_finished"] += 1
            continue
        # The job row is there (job_gone is folder_id None): its pk_folder and pk_dept are NOT NULL.
        assert r.folder_id is not None and r.dept_id is not None
        heard.append(
            ReleasedAmount(
                show_id=r.show_id,
                alloc_id=r.alloc_id,
                folder_id=r.folder_id,
                job_id=r.job_id,
                layer_id=r.layer_id,
                dept_id=r.dept_id,
                cores=r.cores,
                gpus=r.gpus,
            )
        )
    return heard, withheld


class NotifyEra(FlagOwned, PublishesNothing):
    name = NOTIFY
    sends_in_transaction = True

    def send(self, *, cursor, releases: Sequence[Release], commit: bool) -> None:
        send_releases(cursor=cursor, releases=releases, commit=commit)
