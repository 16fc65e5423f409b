"""What follows a release's commit: its publish to the scheduler's Redis counters and its metrics.

Both are handed to an `at_commit` runner, the release's commit being where they may happen:
transaction.on_commit inside a transaction (publish if, and only if, it commits), at_once where
the releasing statement committed on its own.
"""

import logging
from collections import Counter
from collections.abc import Callable, Sequence

from accounting.release.eras import ReleaseEra
from accounting.release.in_flight import Registered
from accounting.release.types import Branch, Release
from infra import metrics
from infra.metrics import RELEASES

logger = logging.getLogger(__name__)

AtCommit = Callable[[Callable[[], object]], None]


def at_once(callback: Callable[[], object]) -> None:
    """Runs the callback now: the at_commit of a releasing statement that committed on its own."""
    callback()


def publish_and_count_on_commit(
    releases: list[Release], registered: Registered | None, *, era: ReleaseEra, at_commit: AtCommit
) -> None:
    """What follows the releasing statement in every release, one statement or a transaction:
    the registered releases made as registered published (the entry settled whatever else it
    held), the releases counted; each run by `at_commit`."""
    to_redis, withheld = era.publishable(releases)
    changed = 0
    if registered is not None:
        covered, changed = registered.covering(to_redis)
        publisher, prepared = era.publisher, registered.narrowed_to(covered)
        at_commit(lambda: publisher.publish(prepared=prepared))
    if releases:  # a release that found nothing has nothing to count
        at_commit(lambda: _count(releases, withheld=withheld, changed=changed))


def _count(releases: Sequence[Release], *, withheld: int, changed: int) -> None:
    for branch, n in Counter(r.branch for r in releases).items():
        RELEASES.labels(branch=branch.value).inc(n)
    if withheld:
        metrics.RELEASE_WITHHELD.labels(reason="job_finished").inc(withheld)
    if changed:
        metrics.RELEASE_WITHHELD.labels(reason="changed_since_registered").inc(changed)
    _report_jobs_gone(releases)


def _report_jobs_gone(releases: Sequence[Release]) -> None:
    """A proc whose job row is gone was released, but its folder and point are unknown."""
    for r in releases:
        if r.job_gone and r.branch is not Branch.LOCAL:
            metrics.RELEASE_UNRESOLVED.labels(branch=r.branch.value).inc()
            logger.warning(
                "proc %s released although its job %s is gone: host given back, subscription, job and layer "
                "taken off; its folder and point cannot be resolved and keep counting it until the next recompute",
                r.proc_id,
                r.job_id,
            )
