"""The release path: a proc given back, written as Cuebot writes it, told to the scheduler after commit."""

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection, transaction

from accounting.release.after_commit import at_once, publish_and_count_on_commit
from accounting.release.decrements import WritePlan, plan_writes
from accounting.release.eras import Counting, ReleaseEra, release_era
from accounting.release.in_flight import Registered, in_flight
from accounting.release.rows import PROC_ID, branch_of, release_from_row, releases_from_rows, show_ids_of
from accounting.release.statements import read_rows, release_rows
from accounting.release.transport import Mode, release_cursor, send_writes, write_mode
from accounting.release.types import Branch, Release
from infra.metrics import RELEASE_BATCH_SIZE, RELEASE_SECONDS
from infra.transactions import retry_transient
from infra.writes import Write
from shows.attach import RELEASE_TABLES, writer_grant

# --- Release path (Cuebot's ProcDaoJdbc.unbookProc) -----------------------------------
#
# One transaction per call, whatever the batch size, writing what Cuebot writes (a lone
# scheduler-managed proc outside any caller's transaction: one statement, its own transaction):
# 1. one DELETE ... RETURNING, by pk_proc alone (proc has no foreign key to job: a proc
#    whose job row is gone is released too), takes each proc's reserved amounts as they
#    are at delete time, with the ids of its keys: alloc via the host; folder, department
#    and the point's show via the job, when the job row still exists. Row locks make
#    concurrent releases of one proc release it once: the loser's DELETE finds it gone.
# 2. one host UPDATE gives the idle resources back (summed per host), in the same statement.
# 3. the branch, per proc, as the site's era counts it (accounting.release.eras, chosen once):
#    - local (b_local): layer_resource, job_resource int_local_* and the job's host_local
#      reservation on that host (idle amounts back; deleted once the job is FINISHED or
#      gone, as Cuebot removes it), whatever the show's flag;
#    - counted by the scheduler (a flagged show in the Redis and NOTIFY eras): no
#      accounting-table writes; the NOTIFY era sends acct_release in the transaction, the
#      Redis era registers it in flight before the transaction (accounting.release.in_flight) and publishes it to
#      Redis after commit (accounting.release.publish);
#    - counted by Cuebot (every show in the Maestro era, an unflagged one in the others):
#      subscription, layer_resource, job_resource, folder_resource (the job's folder) and
#      point (the job's department and show) decremented in centicores in the same
#      transaction, as Cuebot's procDestroyed and batchDeleteVirtualProcs do.
# Local and Cuebot-managed procs share one set-based statement per table, in the lock order
# (accounting.release.statements); the sums are accounting.release.decrements'.
# What a proc whose job is gone cannot resolve (its folder, its point) is logged and counted.
# What follows the releasing statement, and where the transaction ends (the statement alone on
# autocommit, the COMMIT pipelined with the writes or sent with the notifications, the atomic
# block's exit), is chosen in one place: accounting.release.transport.write_mode, from the
# release's WritePlan; what follows its commit (publish, metrics) in one too:
# accounting.release.after_commit.publish_and_count_on_commit.
# The steps by name: the read before any lock and the in-flight registration settle what the
# release will take off (_read_before_lock, accounting.release.in_flight); _do_release_* write;
# publish_and_count_on_commit tells Redis and the metrics once the commit is known.


def _counting(rows: list[tuple], era: ReleaseEra) -> Counting:
    """Who counts a releasing statement's rows' procs, per show (the era reads the flag once per
    show, and only for shows with procs that are not local)."""
    return era.counting(show_ids=show_ids_of(rows))


@dataclass(frozen=True)
class _PreRead:
    """The procs about to go, read before any lock, as the releasing statements return them."""

    rows: dict[str, tuple]  # proc id -> (the row read, its Release)
    branches: dict[str, Branch]  # per show of a proc that is not local
    plan: WritePlan  # what the release would write after its releasing statement, were the read its rows


def _read_before_lock(proc_ids: list[str], era: ReleaseEra) -> _PreRead:
    """Redis era: what is registered in flight before the release locks anything (a plain
    SELECT, in the caller's transaction if there is one)."""
    with release_cursor() as cursor:
        rows = read_rows(cursor, proc_ids=proc_ids)
    counting = _counting(rows, era)
    releases = [release_from_row(row, branch=branch_of(row, branches=counting.branches)) for row in rows]
    return _PreRead(
        rows={row[PROC_ID]: (row, release) for row, release in zip(rows, releases)},
        branches=counting.branches,
        plan=plan_writes(rows=rows, releases=releases, counting=counting),
    )


def _release(proc_ids: list[str]) -> dict[str, Release]:
    # A deadlock victim is rerun whole when this is the outermost transaction (why that is
    # safe: infra.transactions); inside a caller's transaction the error propagates.
    # The era is chosen once, here: every step of the release (and of a rerun) asks the same one.
    era = release_era()
    return retry_transient(lambda: _release_once(proc_ids, era), operation="release")


def _release_once(proc_ids: list[str], era: ReleaseEra) -> dict[str, Release]:
    pre = _read_before_lock(proc_ids, era) if era.reads_before_lock else None
    with in_flight(releases=pre.plan.releases if pre is not None else None, era=era) as registered:
        if (
            pre is not None
            and len(pre.rows) == len(proc_ids)
            and write_mode(pre.plan, era=era, outermost=not connection.in_atomic_block, begun=False)
            is Mode.ONE_STATEMENT
        ):
            return _do_release_in_one_statement(proc_ids, pre=pre, registered=registered, era=era)
        return _do_release_in_transaction(proc_ids, registered, era=era, read=pre.rows if pre is not None else None)


def _do_release_in_one_statement(
    proc_ids: list[str], *, pre: _PreRead, registered: Registered | None, era: ReleaseEra
) -> dict[str, Release]:
    """The releasing statement on an autocommit connection: one implicit transaction, committed
    when it returns, so what follows a commit follows it at once."""
    with release_cursor() as cursor:
        rows = release_rows(cursor, proc_ids=proc_ids)
    # The owner as the read found it (a proc's show and b_local do not change; a flag that
    # flipped since is the next release's business, as it would be a moment later).
    releases = releases_from_rows(rows, branches=pre.branches, read=pre.rows)
    publish_and_count_on_commit(releases, registered, era=era, at_commit=at_once)
    return {r.proc_id: r for r in releases}


def _do_release_in_transaction(
    proc_ids: list[str], registered: Registered | None, *, era: ReleaseEra, read: dict[str, tuple] | None = None
) -> dict[str, Release]:
    """The release in a transaction (the caller's, or an atomic block of its own): the releasing
    statement, then what the era and the accounting tables need written, the publish on commit."""
    outermost = not connection.in_atomic_block
    with transaction.atomic(), release_cursor() as cursor:
        rows = release_rows(cursor, proc_ids=proc_ids)
        counting = _counting(rows, era)
        releases = releases_from_rows(rows, branches=counting.branches, read=read)
        publish_and_count_on_commit(releases, registered, era=era, at_commit=transaction.on_commit)
        plan = plan_writes(rows=rows, releases=releases, counting=counting)
        send_writes(cursor, plan=plan, mode=write_mode(plan, era=era, outermost=outermost), era=era)
    return {r.proc_id: r for r in releases}


# A release, as its faces declare it and its refusal names it while ACCOUNTING_WRITES is off.
RELEASE = Write(action="release", grant=writer_grant(*RELEASE_TABLES))


def unbook_proc(*, proc_id: str) -> Release | None:
    """Release one proc; None if it does not exist (already released included)."""
    RELEASE.require()
    RELEASE_BATCH_SIZE.observe(1)
    with RELEASE_SECONDS.time():
        return _release([proc_id]).get(proc_id)


def unbook_procs(*, proc_ids: Sequence[str]) -> list[Release | None]:
    """Release many procs in one transaction; one result per id, in order (None: not found)."""
    RELEASE.require()
    ids = list(proc_ids)
    if len(set(ids)) != len(ids):
        raise ValueError("proc_ids must not repeat")
    RELEASE_BATCH_SIZE.observe(len(ids))
    if not ids:
        return []
    # In key order: PostgreSQL sorts an = ANY array before it probes the primary key with it, and
    # finds a sorted one sorted at a glance (docs/benchmarks.md, "The batch's read, cheaper").
    with RELEASE_SECONDS.time():
        released = _release(sorted(ids))
    return [released.get(proc_id) for proc_id in ids]
