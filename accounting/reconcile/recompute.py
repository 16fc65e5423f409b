"""Recomputation of the PG accounting tables from `proc`, the canonical record: a show's repair,
a settling release's recount, and what a recompute could not set. The statements are
accounting.reconcile.recompute_sql's (the counting rules and the caps moved on the way are told
there).

A repair (repair_pg_accounting) writes only the rows that differ, each set to the sums read if it
has not changed since (recomputed from its sums under its lock if it has): the read that finds them is the drift check's own statement, so a repair with nothing to do
costs what the check costs, and one with a few rows to fix adds their locks and their UPDATEs
(one round trip a table), not a second sum. Rewriting every row cost 2.0-2.5x the bare sums
on a farm of Maestro's size (docs/benchmarks.md): each row locked, summed again and written
anew for nothing.
"""

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from django.db import DatabaseError, connection, transaction

from accounting.reconcile.recompute_sql import READ_COLUMNS, TABLES, TableRecompute
from accounting.reconcile.tables_against_procs import TableDrift, drifted_rows
from infra import metrics
from infra.transactions import TRANSIENT_SQLSTATES, retry_transient, sqlstate
from infra.writes import Write
from shows.attach import ACCOUNTING_TABLES, writer_grant

logger = logging.getLogger(__name__)

# By table, for a release's recounts.
TABLE_RECOMPUTES = {table.table: table for table in TABLES}


# --- Which procs a recompute counted -------------------------------------------------------
#
# A recompute run once every transaction older than a horizon H (a 64-bit xid) has ended
# counts every proc inserted by a transaction below H that still exists: such a proc is
# committed (or gone) before the recompute's first statement, whatever savepoint inserted it
# (a subtransaction's xid is above its parent's, and was below H only if assigned before H
# was read). A proc inserted at or above H may or may not have been counted. H is the xmax of
# a snapshot (the next xid to be assigned then); waiting is bounded, and a recompute whose wait
# ran out has no horizon (every proc of its show then reads as uncounted).

XID_HORIZON = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
# The 32-bit xids of the transactions running in this database, this session's excepted (its
# own rows are visible to its own recompute): each holds the lock on its xid (and on each of
# its subtransactions' xids). Other databases of the cluster cannot insert procs here, so their
# transactions are not waited for. pg_locks and pg_stat_activity's pid and datname are readable
# by any role, the service's included.
RUNNING_HERE = """
SELECT l.transactionid::text::bigint FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'transactionid' AND l.granted AND a.datname = current_database() AND l.pid <> pg_backend_pid()
"""
XID_WRAP = 2**32


def xid_horizon(*, wait_seconds: float) -> int | None:
    """A horizon every older transaction has ended by (the caller's own excepted), or None if
    one still ran after `wait_seconds`."""
    deadline = time.monotonic() + wait_seconds
    with connection.cursor() as cursor:
        cursor.execute(XID_HORIZON)
        (horizon,) = cursor.fetchone()
        while True:
            cursor.execute(RUNNING_HERE)
            if not any(inserted_below(xmin=xid, horizon=horizon) for (xid,) in cursor.fetchall()):
                return horizon
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)  # PostgreSQL announces no transaction's end to a bystander


def inserted_below(*, xmin: int, horizon: int) -> bool:
    """Whether a row whose 32-bit xmin this is was inserted by a transaction below the 64-bit
    horizon. An unfrozen row's xmin lies within 2^31 xids of the horizon (PostgreSQL freezes
    rows before their xids wrap around), which places it; a frozen row, placed wrongly, can
    only read as old, which it is, or as new, which costs a recompute and nothing else."""
    full = (horizon - horizon % XID_WRAP) + xmin
    if full > horizon + XID_WRAP // 2:
        full -= XID_WRAP
    elif full < horizon - XID_WRAP // 2:
        full += XID_WRAP
    return full < horizon


@dataclass(frozen=True)
class RowFailure:
    """A row the recompute could not set to SUM(proc); the others were set."""

    table: str
    pk: str
    error: str


@dataclass(frozen=True)
class Repair:
    drifted: list[TableDrift]  # every row that differed from SUM(proc) when read, by name, in lock order
    failures: list[RowFailure]  # those it could not set (left as they were)


TABLE_REPAIR = Write(action="the repair of Cuebot's tables", grant=writer_grant(*ACCOUNTING_TABLES))


def recompute_pg_accounting(*, show_ids: Sequence[str]) -> list[RowFailure]:
    """The service's own repair (a switch back, the Redis era's reconcile), for a caller that needs
    only the rows it could not set: no operator's, so not counted as one (repair_pg_accounting)."""
    return _repaired(show_ids=show_ids).failures


def repair_pg_accounting(*, show_ids: Sequence[str]) -> Repair:
    """Make the five accounting tables of these shows equal SUM(proc), in one transaction.

    Table after table in the lock order: the rows that differ from their sums are read in one
    statement (cuebot_drift's, the check's), then those rows alone are locked in key order and
    each is set to the sums read if it still holds what was read, or recomputed from its sums once
    locked if it does not (the comment on recompute_sql.CORRECT_SUBSCRIPTIONS says why). A row equal to its sum
    in a snapshot is not drift (a booking or a release writes its procs and its rows in one
    transaction), so it is left alone, unlocked. With nothing drifted this is the check and
    nothing more. Returns every drifted row, named, and the rows it could not set.

    Every row it can: when PostgreSQL refuses a row (say a sum beyond the column's range) the
    repair is undone and run again with each table in a savepoint and, where one fails, each of
    its rows; the rows that still fail are logged, counted and returned. Idempotent (it reads the
    drift anew each run), so as the outermost transaction a deadlock victim is simply run again
    (infra.transactions); inside a caller's transaction that error propagates.
    """
    repair = _repaired(show_ids=show_ids)
    if repair.drifted:
        metrics.TABLE_REPAIRS.inc()  # the dashboard marks it
    return repair


def _repaired(*, show_ids: Sequence[str]) -> Repair:
    TABLE_REPAIR.require()
    return retry_transient(lambda: _repair_once(show_ids=list(show_ids)), operation="recompute")


# JIT off for the transaction (cuebot_table_drift says why) and whether the shows named are
# every show, in one round trip. With every show named the reads name none: an array of every show,
# tested against each proc, cost the farm-wide repair 1.3x the bare sums at Maestro's size where
# reading every proc costs 1.0x (docs/benchmarks.md). A show made between this and the reads is
# then read too, and written only if its rows drifted.
PREPARE_REPAIR = (
    "SELECT set_config('jit', 'off', true), NOT EXISTS (SELECT 1 FROM show WHERE pk_show <> ALL(%(shows)s))"
)


def _repair_once(*, show_ids: list[str]) -> Repair:
    # First without a savepoint per table, each table's lock and correction sent in one round
    # trip. A row PostgreSQL refuses (a sum beyond its column's range) is rare; then the whole
    # repair is undone and run again with a savepoint per table and, where one fails, per row,
    # which sets every row it can.
    try:
        with transaction.atomic():
            drifted, failures = _repair_pass(show_ids=show_ids, careful=False)
    except DatabaseError as error:
        if sqlstate(error) in TRANSIENT_SQLSTATES:
            raise
        with transaction.atomic():
            drifted, failures = _repair_pass(show_ids=show_ids, careful=True)
    # Debug, not info: in the redis era the two-minute reconcile recomputes the scheduler-managed
    # shows' rows, which nothing else writes, so rows found off there are the rule, not news.
    for row in drifted:
        logger.debug(
            "recompute set %s %s (%s) to SUM(proc): centicores %s -> %s, gpus %s -> %s",
            row.table,
            row.name,
            row.columns,
            row.stored_cores,
            row.true_cores,
            row.stored_gpus,
            row.true_gpus,
        )
    report_row_failures(failures, operation="recompute")
    return Repair(drifted=drifted, failures=failures)


def _repair_pass(*, show_ids: list[str], careful: bool) -> tuple[list[TableDrift], list[RowFailure]]:
    drifted: list[TableDrift] = []
    failures: list[RowFailure] = []
    with connection.cursor() as cursor:
        cursor.execute(PREPARE_REPAIR, {"shows": show_ids})
        (_, every_show) = cursor.fetchone()
        for table in TABLES:
            rows = drifted_rows(cursor=cursor, table=table.table, show_ids=None if every_show else show_ids)
            if rows:
                drifted += sorted(rows, key=lambda row: (row.name, row.columns, row.pk))
                failures += _correct(cursor=cursor, table=table, rows=rows, show_ids=show_ids, careful=careful)
    return drifted, failures


def _as_read(rows: list[TableDrift]) -> dict[str, list[int | None]]:
    """pk -> READ_COLUMNS as the read found them, None for a pair that did not drift."""
    read: dict[str, list[int | None]] = {}
    for row in rows:
        at = 4 if row.columns.startswith("int_local") else 0
        read.setdefault(row.pk, [None] * 8)[at : at + 4] = [
            row.stored_cores,
            row.stored_gpus,
            row.true_cores,
            row.true_gpus,
        ]
    return read


def _correct(
    *, cursor, table: TableRecompute, rows: list[TableDrift], show_ids: list[str], careful: bool
) -> list[RowFailure]:
    """One table's drifted rows locked in primary-key order, then each set to the sums read if it
    still holds what was read, and recomputed from its sums otherwise."""
    read = _as_read(rows)
    pks = sorted(read)

    def params(these: list[str]) -> dict:
        return {"pks": these, **{name: [read[pk][i] for pk in these] for i, name in enumerate(READ_COLUMNS)}}

    def set_or_recompute(these: list[str], corrected) -> None:
        moved = corrected.fetchall()
        if table.restore:
            restore_moved_caps(cursor=cursor, restore=table.restore, moved=moved)
        changed = sorted(set(these) - {row[0] for row in moved})
        if changed:
            _update(cursor=cursor, table=table, show_ids=show_ids, only=changed)

    if not careful:
        # One round trip: PostgreSQL runs the two statements in turn, so the correction (and its
        # snapshot) starts once every lock is held.
        with connection.cursor() as corrected:
            with connection.wrap_database_errors, connection.connection.pipeline():
                cursor.execute(table.lock_keys, {"pks": pks})
                corrected.execute(table.correct, params(pks))
            set_or_recompute(pks, corrected)
        return []
    cursor.execute(table.lock_keys, {"pks": pks})

    def run(only: str | None) -> list:
        these = pks if only is None else [only]
        cursor.execute(table.correct, params(these))
        set_or_recompute(these, cursor)
        return []

    _, failed = run_row_by_row_on_failure(table=table.table, keys=lambda: pks, run=run)
    return failed


# --- A settling show's release: its rows recounted, not decremented --------------------------


def recount_rows(*, cursor, table: TableRecompute, show_ids: list[str], named: Collection[tuple]) -> list[RowFailure]:
    """The rows named by these keys (tuples of table.keys' values) set to SUM(proc), locked
    first in primary-key order and summed once they are held: a release's rows, not its show's,
    so releases of one show wait for each other only where they share a row."""
    if not named:
        return []
    cursor.execute(table.lock_named, {f"k{i}": [key[i] for key in named] for i in range(len(table.keys))})
    pks = [pk for (pk,) in cursor.fetchall()]
    if not pks:
        return []
    _, failed = run_row_by_row_on_failure(
        table=table.table,
        keys=lambda: pks,
        run=lambda only: _update(cursor=cursor, table=table, show_ids=show_ids, only=pks if only is None else [only]),
    )
    return failed


def recount_rows_at_once(*, show_ids: list[str], named: Mapping[str, Collection[tuple]]) -> list[RowFailure]:
    """recount_rows for several tables at once, in two round trips: every named row locked,
    table after table in the lock order (one pipeline), then every table's UPDATE (a second one,
    whose statements each read a snapshot taken once all the locks are held). For a caller with
    nothing else to lock in these tables in between (a release whose rows all belong to settling
    shows). A statement that fails for a row is redone table by table, row by row (recount_rows)."""
    tables = [table for table in TABLES if named.get(table.table)]
    if not tables:
        return []
    with connection.wrap_database_errors, connection.connection.pipeline():
        locks = []
        for table in tables:
            rows = named[table.table]
            cursor = connection.cursor()
            cursor.execute(table.lock_named, {f"k{i}": [key[i] for key in rows] for i in range(len(table.keys))})
            locks.append(cursor)
    pks = {table.table: [pk for (pk,) in cursor.fetchall()] for table, cursor in zip(tables, locks)}
    try:
        with transaction.atomic():
            with connection.wrap_database_errors, connection.connection.pipeline():
                updates = []
                for table in tables:
                    cursor = connection.cursor()
                    cursor.execute(table.update, {"shows": show_ids, "only": pks[table.table]})
                    updates.append(cursor)
            for table, cursor in zip(tables, updates):
                if table.restore:
                    restore_moved_caps(cursor=cursor, restore=table.restore, moved=cursor.fetchall())
        return []
    except DatabaseError as error:
        if sqlstate(error) in TRANSIENT_SQLSTATES:
            raise
    with connection.cursor() as cursor:
        return [
            failure
            for table in tables
            for failure in recount_rows(cursor=cursor, table=table, show_ids=show_ids, named=named[table.table])
        ]


def _update(*, cursor, table: TableRecompute, show_ids: list[str], only: list[str]) -> list:
    cursor.execute(table.update, {"shows": show_ids, "only": only})
    if table.restore:
        restore_moved_caps(cursor=cursor, restore=table.restore, moved=cursor.fetchall())
    return []


def run_row_by_row_on_failure(
    *, table: str, run: Callable[[str | None], list], keys: Callable[[], Sequence[str]]
) -> tuple[list, list[RowFailure]]:
    """run(None) for every row at once; if PostgreSQL refuses it (anything but a deadlock or a
    serialization failure, which abort the whole transaction), run(key) for each row alone,
    each in its own savepoint. Returns what the runs that succeeded returned, and the rows
    that failed."""
    try:
        with transaction.atomic():
            return run(None), []
    except DatabaseError as error:
        if sqlstate(error) in TRANSIENT_SQLSTATES:
            raise
    results, failures = [], []
    for key in keys():
        try:
            with transaction.atomic():
                results += run(key)
        except DatabaseError as error:
            if sqlstate(error) in TRANSIENT_SQLSTATES:
                raise
            failures.append(RowFailure(table=table, pk=key, error=str(error).strip().splitlines()[0]))
    return results, failures


def report_row_failures(failures: Sequence[RowFailure], *, operation: str) -> None:
    for failure in failures:
        metrics.RECOMPUTE_ROW_FAILURES.labels(table=failure.table).inc()
        logger.warning(
            "%s could not set %s %s to SUM(proc), left as it was: %s",
            operation,
            failure.table,
            failure.pk,
            failure.error,
        )


def restore_moved_caps(*, cursor, restore: str, moved: list[tuple]) -> None:
    """Move back the caps an UPDATE moved: rows are (pk, cores cap moved[, gpus cap moved])."""
    cores = [row[0] for row in moved if row[1]]
    gpus = [row[0] for row in moved if len(row) > 2 and row[2]]
    if cores or gpus:
        cursor.execute(restore, {"cores": cores, "gpus": gpus})
