"""How a release's writes reach PostgreSQL, and where its transaction ends.

The release statements go through a cursor that prepares them on the server; what follows the
releasing statement is sent as one Mode says (one statement on autocommit, the COMMIT at the
atomic block's exit, with the notifications, or pipelined with the decrements), chosen in one
place: write_mode, from the release's WritePlan (accounting.release.decrements).
"""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from enum import Enum

import psycopg
from django.db import connection

from accounting.reconcile.recompute import (
    TABLE_RECOMPUTES,
    recount_rows,
    recount_rows_at_once,
    report_row_failures,
)
from accounting.release.decrements import WritePlan, decrements
from accounting.release.eras import ReleaseEra
from accounting.release.statements import ADJUSTMENTS, adjust, remove_local_reservations
from infra.cursors import django_cursor


class PreparedStatementCursor(psycopg.Cursor):
    """Server-side binding, each statement prepared on its connection at first use.

    The release statements are few and run at a high rate: parsing and planning them anew
    each time was most of their PostgreSQL cost. psycopg prepares only on a connection
    whose prepare_threshold is not None (Django's default is None): settings set it.
    Django's own cursors bind client-side and never prepare; a deployment behind a
    transaction-mode pooler must route this service to PostgreSQL directly.
    """

    def execute(self, query, params=None, **kwargs):
        return super().execute(query, params, prepare=True)


def release_cursor():
    """A Django cursor wrapper (execute_wrappers, broken-transaction checks) over the above."""
    return django_cursor(PreparedStatementCursor)


@contextmanager
def committed_with_the_writes() -> Iterator[None]:
    """The outermost release transaction with accounting-table writes, once the releasing
    statement has answered: what is left to send needs nothing back (the decrements, the
    notifications), so it goes to PostgreSQL pipelined, with the COMMIT, in one round trip.
    (With notifications alone, accounting.notify.send.notify_and_commit does the same with one
    simple query: a pipeline's own work costs more than that round trip.)

    The COMMIT is sent only if the block ends normally. A failure of a statement sent before it
    (a deadlock found in the accounting tables) makes PostgreSQL skip the rest, COMMIT included,
    as a pipeline does after an error; it is raised here as the Django error a failed execute
    raises (40P01 as its cause, so retry_transient reruns the release), and the atomic block
    around rolls back and runs no on_commit callback. A COMMIT that fails (a deferred
    constraint) is raised the same way. When the atomic block then commits, the transaction is
    already over and psycopg sends nothing; Django runs the on_commit callbacks as usual.
    (The releasing statement is not pipelined: psycopg would wait on the BEGIN it sends
    first anyway, and the pipeline's own work cost more than the round trip it saved.)
    """
    with one_round_trip():
        yield
        connection.connection.execute("COMMIT", prepare=False)


@contextmanager
def one_round_trip() -> Iterator[None]:
    """The statements run in the block go to PostgreSQL in one round trip (psycopg's
    pipeline mode), still one by one through the Django cursor wrapper.

    The server runs pipelined statements one after the other in the order sent, so the
    lock order (accounting.release.statements) holds; each statement is sent (and runs) as it is executed, only its
    result is awaited at the end. A failure of a statement whose result arrives at the
    end (the common case: a deadlock is found while the client has sent everything) is
    raised by the pipeline's exit, outside the cursor wrapper: converting it here makes it
    the Django error a failed execute raises (40P01 as its cause, so retry_transient
    reruns the release), and the atomic block rolls the transaction back as usual.
    """
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


class Mode(Enum):
    """How a release's writes after its releasing statement reach PostgreSQL, and where its
    transaction ends. Where the release opened the transaction (outermost), the COMMIT goes with
    the last of what it sends when that needs nothing back: one round trip less."""

    ONE_STATEMENT = "nothing to write after it, no transaction around: the releasing statement on autocommit"
    COMMIT_AT_EXIT = "nothing to write after it: the atomic block's exit commits (or the caller's transaction)"
    NOTIFY = "the era's notifications alone, in the caller's transaction"
    NOTIFY_AND_COMMIT = "the era's notifications alone and the COMMIT: one simple query (notify_and_commit)"
    PIPELINE = "the decrements and the notifications, in one round trip (one_round_trip), in the caller's transaction"
    PIPELINE_AND_COMMIT = (
        "the decrements, the notifications and the COMMIT in one round trip (committed_with_the_writes)"
    )
    # A settling show's recompute reads results back and redoes a failed row in a savepoint (which
    # a pipeline, skipping all after an error, would not run).
    STATEMENT_BY_STATEMENT = "the writes one statement at a time; the atomic block's exit commits"


def write_mode(plan: WritePlan, *, era: ReleaseEra, outermost: bool, begun: bool = True) -> Mode:
    """The one choice of how a release writes after its releasing statement and where it ends.

    Asked in the transaction, of what the releasing statement returned. In the Redis era it is
    asked first before any lock, of the read (begun False, and only if the read found every proc
    asked for): if nothing would follow the releasing statement and no transaction is open, the
    statement is a transaction on its own, with no BEGIN and COMMIT round trips (ONE_STATEMENT).
    """
    if plan.in_pg:
        if plan.settling and any(map(plan.recounts, plan.in_pg)):
            return Mode.STATEMENT_BY_STATEMENT
        return Mode.PIPELINE_AND_COMMIT if outermost else Mode.PIPELINE
    if era.sends_in_transaction:
        return Mode.NOTIFY_AND_COMMIT if outermost else Mode.NOTIFY
    return Mode.ONE_STATEMENT if outermost and not begun else Mode.COMMIT_AT_EXIT


# How each mode with accounting-table writes sends them.
_SENT_IN: dict[Mode, Callable[[], AbstractContextManager]] = {
    Mode.PIPELINE_AND_COMMIT: committed_with_the_writes,
    Mode.PIPELINE: one_round_trip,
    Mode.STATEMENT_BY_STATEMENT: nullcontext,
}


def send_writes(cursor, *, plan: WritePlan, mode: Mode, era: ReleaseEra) -> None:
    """The writes after the releasing statement, as `mode` says; last in the transaction's block,
    since the COMMIT may go with them."""
    if mode is Mode.NOTIFY or mode is Mode.NOTIFY_AND_COMMIT:
        era.send(cursor=cursor, releases=plan.releases, commit=mode is Mode.NOTIFY_AND_COMMIT)
    elif (sent_in := _SENT_IN.get(mode)) is not None:
        with sent_in():
            write_accounting(cursor, plan=plan)
            era.send(cursor=cursor, releases=plan.releases, commit=False)


def write_accounting(cursor, *, plan: WritePlan) -> None:
    """Local and Cuebot-managed procs: one ordered statement per table with rows to change
    (a plain one-row UPDATE where a single row changes), in the lock order.

    A show settling after its switch back to Cuebot (accounting.ownership.switching) may hold procs
    its rows never counted (bookings made on the old flag): decrementing would take them
    below the truth. The rows its releases touch are recounted from SUM(proc) instead, table
    by table in the same lock order; only those rows, so that the show's other releases, and
    the releases of other shows waiting on the same hosts, do not queue behind a lock on all
    of the show's rows. A proc the switch-back recompute counted (`plan.counted`) is
    decremented as usual: its rows hold it, whatever else they miss.
    """
    sums, recounted = decrements(plan)
    if recounted and not any(sums.values()):
        # Only settling rows to write: all of them locked, then all of them set, in two round trips.
        failures = recount_rows_at_once(show_ids=plan.settling, named=recounted)
    else:
        failures = []
        for a in ADJUSTMENTS:
            adjust(cursor, adjustment=a, rows=sums[a.table])
            if recounted.get(a.table):
                table = TABLE_RECOMPUTES[a.table]
                failures += recount_rows(
                    cursor=cursor, table=table, show_ids=plan.settling, named=sorted(recounted[a.table])
                )
        remove_local_reservations(cursor, releases=plan.in_pg)
    report_row_failures(failures, operation="release of a settling show")
