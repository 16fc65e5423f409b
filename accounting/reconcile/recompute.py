"""Set-based recomputation of the PG accounting tables from `proc`, the canonical record.

Counting rules (docs/cuebot-schema.md): a proc counts against the subscription
(its show, its host's alloc), its job's folder, its job, its layer and the point (its
job's dept and show). Local procs (b_local) count only in Cuebot's own local
bookkeeping: layer_resource and job_resource.int_local_cores/int_local_gpus. All sums
stay in centicores: PostgreSQL never sees cores.

A true SUM(proc) can be legitimately above a cap (an operator lowered a burst or a job's
max below current use). Cuebot's checks reject an UPDATE that raises a counter past a
cap it leaves unchanged, so the statements that meet such checks (subscription,
job_resource) move the cap in the same UPDATE, to -cap - 1 (never equal to cap, never
overflowing, and its own inverse), and a second UPDATE moves it back, as Cuebot's own
recalculate_subs() does. The caps end as they were; the counters end at SUM(proc).

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

from accounting.reconcile.cuebot_drift import TableDrift, drifted_rows, in_lock_order
from infra import metrics
from infra.transactions import TRANSIENT_SQLSTATES, retry_transient, sqlstate
from infra.writes import Write
from shows.attach import ACCOUNTING_TABLES, writer_grant

logger = logging.getLogger(__name__)

SUBSCRIPTIONS = """
UPDATE subscription s
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0),
       int_burst = CASE WHEN COALESCE(t.cores, 0) > s.int_cores AND COALESCE(t.cores, 0) > s.int_burst
                        THEN -s.int_burst - 1 ELSE s.int_burst END
  FROM subscription s2
  LEFT JOIN (
        SELECT p.pk_show, h.pk_alloc, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p JOIN host h ON h.pk_host = p.pk_host
         WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
         GROUP BY p.pk_show, h.pk_alloc
       ) t ON t.pk_show = s2.pk_show AND t.pk_alloc = s2.pk_alloc
 WHERE s.pk_subscription = s2.pk_subscription AND s2.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR s.pk_subscription = ANY(%(only)s::text[]))
RETURNING s.pk_subscription, COALESCE(t.cores, 0) > s2.int_cores AND COALESCE(t.cores, 0) > s2.int_burst
"""
RESTORE_BURSTS = "UPDATE subscription SET int_burst = -int_burst - 1 WHERE pk_subscription = ANY(%(cores)s)"

FOLDERS = """
UPDATE folder_resource r
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0)
  FROM folder f
  LEFT JOIN (
        SELECT j.pk_folder, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p JOIN job j ON j.pk_job = p.pk_job
         WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
         GROUP BY j.pk_folder
       ) t ON t.pk_folder = f.pk_folder
 WHERE r.pk_folder = f.pk_folder AND f.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR r.pk_folder_resource = ANY(%(only)s::text[]))
"""

JOBS = """
UPDATE job_resource r
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0),
       int_local_cores = COALESCE(t.local_cores, 0), int_local_gpus = COALESCE(t.local_gpus, 0),
       int_max_cores = CASE WHEN COALESCE(t.cores, 0) > r.int_cores AND COALESCE(t.cores, 0) > r.int_max_cores
                            THEN -r.int_max_cores - 1 ELSE r.int_max_cores END,
       int_max_gpus = CASE WHEN COALESCE(t.gpus, 0) > r.int_gpus AND COALESCE(t.gpus, 0) > r.int_max_gpus
                           THEN -r.int_max_gpus - 1 ELSE r.int_max_gpus END
  FROM job j
  JOIN job_resource before ON before.pk_job = j.pk_job
  LEFT JOIN (
        SELECT p.pk_job,
               SUM(p.int_cores_reserved) FILTER (WHERE NOT p.b_local) AS cores,
               SUM(p.int_gpus_reserved) FILTER (WHERE NOT p.b_local) AS gpus,
               SUM(p.int_cores_reserved) FILTER (WHERE p.b_local) AS local_cores,
               SUM(p.int_gpus_reserved) FILTER (WHERE p.b_local) AS local_gpus
          FROM proc p
         WHERE p.pk_show = ANY(%(shows)s)
         GROUP BY p.pk_job
       ) t ON t.pk_job = j.pk_job
 WHERE r.pk_job_resource = before.pk_job_resource AND j.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR r.pk_job_resource = ANY(%(only)s::text[]))
RETURNING r.pk_job_resource,
          COALESCE(t.cores, 0) > before.int_cores AND COALESCE(t.cores, 0) > before.int_max_cores,
          COALESCE(t.gpus, 0) > before.int_gpus AND COALESCE(t.gpus, 0) > before.int_max_gpus
"""
RESTORE_JOB_MAXIMA = """
UPDATE job_resource
   SET int_max_cores = CASE WHEN pk_job_resource = ANY(%(cores)s) THEN -int_max_cores - 1 ELSE int_max_cores END,
       int_max_gpus = CASE WHEN pk_job_resource = ANY(%(gpus)s) THEN -int_max_gpus - 1 ELSE int_max_gpus END
 WHERE pk_job_resource = ANY(%(cores)s) OR pk_job_resource = ANY(%(gpus)s)
"""

LAYERS = """
UPDATE layer_resource r
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0)
  FROM layer l
  JOIN job j ON j.pk_job = l.pk_job
  LEFT JOIN (
        SELECT p.pk_layer, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p
         WHERE p.pk_show = ANY(%(shows)s)
         GROUP BY p.pk_layer
       ) t ON t.pk_layer = l.pk_layer
 WHERE r.pk_layer = l.pk_layer AND j.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR r.pk_layer_resource = ANY(%(only)s::text[]))
"""

POINTS = """
UPDATE point pt
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0)
  FROM point pt2
  LEFT JOIN (
        SELECT j.pk_dept, j.pk_show, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p JOIN job j ON j.pk_job = p.pk_job
         WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
         GROUP BY j.pk_dept, j.pk_show
       ) t ON t.pk_dept = pt2.pk_dept AND t.pk_show = pt2.pk_show
 WHERE pt.pk_point = pt2.pk_point AND pt2.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR pt.pk_point = ANY(%(only)s::text[]))
"""


# A repair's correction of drifted rows, the arrays in primary-key order: each row set to the sums
# read, only if it still holds what was read (drifted pairs only; a pair given NULL is left as it
# is). A row that changed between the read and its lock (a booking or a release, or another repair
# or recompute that set it) is left to the caller, who recomputes it from its sums now that the lock
# is held: corrected by its drift instead, a row another repair had set meanwhile would be
# corrected twice. A writer that moves procs and leaves the rows alone (the scheduler's, on a show
# whose flag is changing) is missed in that window of milliseconds as it is after the lock by any
# recompute: the settling recompute of a switch is there for it. A rise past a cap moves the cap
# (as above); RETURNING names the rows set and which caps were moved.
_READ = "unnest(%(pks)s::text[], %(stored_cores)s::bigint[], %(stored_gpus)s::bigint[], %(cores)s::bigint[], %(gpus)s::bigint[])"
_READ_AS = "AS d(pk, stored_cores, stored_gpus, cores, gpus)"
CORRECT_SUBSCRIPTIONS = f"""
UPDATE subscription s
   SET int_cores = d.cores, int_gpus = d.gpus,
       int_burst = CASE WHEN d.cores > s2.int_cores AND d.cores > s2.int_burst THEN -s2.int_burst - 1 ELSE s2.int_burst END
  FROM subscription s2, {_READ} {_READ_AS}
 WHERE s.pk_subscription = d.pk AND s2.pk_subscription = d.pk
   AND s2.int_cores = d.stored_cores AND s2.int_gpus = d.stored_gpus
RETURNING s.pk_subscription, d.cores > s2.int_cores AND d.cores > s2.int_burst
"""
CORRECT_JOBS = """
UPDATE job_resource r
   SET int_cores = COALESCE(d.cores, b.int_cores), int_gpus = COALESCE(d.gpus, b.int_gpus),
       int_local_cores = COALESCE(d.local_cores, b.int_local_cores),
       int_local_gpus = COALESCE(d.local_gpus, b.int_local_gpus),
       int_max_cores = CASE WHEN d.cores > b.int_cores AND d.cores > b.int_max_cores
                            THEN -b.int_max_cores - 1 ELSE b.int_max_cores END,
       int_max_gpus = CASE WHEN d.gpus > b.int_gpus AND d.gpus > b.int_max_gpus
                           THEN -b.int_max_gpus - 1 ELSE b.int_max_gpus END
  FROM job_resource b,
       unnest(%(pks)s::text[], %(stored_cores)s::bigint[], %(stored_gpus)s::bigint[], %(cores)s::bigint[],
              %(gpus)s::bigint[], %(stored_local_cores)s::bigint[], %(stored_local_gpus)s::bigint[],
              %(local_cores)s::bigint[], %(local_gpus)s::bigint[])
         AS d(pk, stored_cores, stored_gpus, cores, gpus, stored_local_cores, stored_local_gpus, local_cores, local_gpus)
 WHERE r.pk_job_resource = d.pk AND b.pk_job_resource = d.pk
   AND (d.cores IS NULL OR (b.int_cores, b.int_gpus) = (d.stored_cores, d.stored_gpus))
   AND (d.local_cores IS NULL OR (b.int_local_cores, b.int_local_gpus) = (d.stored_local_cores, d.stored_local_gpus))
RETURNING r.pk_job_resource, COALESCE(d.cores > b.int_cores AND d.cores > b.int_max_cores, false),
          COALESCE(d.gpus > b.int_gpus AND d.gpus > b.int_max_gpus, false)
"""


# What a correction is given per row: the pair compared (stored and true, as read), then
# job_resource's local pair.
_READ_COLUMNS = (
    "stored_cores",
    "stored_gpus",
    "cores",
    "gpus",
    "stored_local_cores",
    "stored_local_gpus",
    "local_cores",
    "local_gpus",
)


def _correct_uncapped(*, table: str, pk: str) -> str:
    return (
        f"UPDATE {table} t SET int_cores = d.cores, int_gpus = d.gpus FROM {_READ} {_READ_AS} "
        f"WHERE t.{pk} = d.pk AND t.int_cores = d.stored_cores AND t.int_gpus = d.stored_gpus RETURNING t.{pk}"
    )


@dataclass(frozen=True)
class TableRecompute:
    table: str
    update: str  # %(only)s NULL: every row of the shows; an array of keys: those rows alone
    correct: str  # the rows of %(pks)s still as read set to the sums read, returning those set
    keys: tuple[str, ...]  # the columns a release names the table's rows by (unique together)
    pk: str
    restore: str | None = None  # moves back the caps `update` or `correct` moved

    @property
    def lock_keys(self) -> str:
        """The rows of %(pks)s, locked in primary-key order."""
        return f"SELECT {self.pk} FROM {self.table} WHERE {self.pk} = ANY(%(pks)s) ORDER BY {self.pk} FOR NO KEY UPDATE"

    @property
    def lock_named(self) -> str:
        """The rows named by one text[] per key column (%(k0)s, %(k1)s), locked in primary-key
        order, returning their primary keys: the rows a release touches, not the show's."""
        arrays = ", ".join(f"%(k{i})s::text[]" for i in range(len(self.keys)))
        names = ", ".join(f"k{i}" for i in range(len(self.keys)))
        match = " AND ".join(f"t.{key} = k.k{i}" for i, key in enumerate(self.keys))
        return (
            f"SELECT t.{self.pk} FROM {self.table} t JOIN unnest({arrays}) AS k({names}) ON {match} "
            f"ORDER BY t.{self.pk} FOR NO KEY UPDATE OF t"
        )


TABLES = in_lock_order(
    (
        TableRecompute(
            "subscription",
            SUBSCRIPTIONS,
            CORRECT_SUBSCRIPTIONS,
            keys=("pk_show", "pk_alloc"),
            pk="pk_subscription",
            restore=RESTORE_BURSTS,
        ),
        TableRecompute(
            "layer_resource",
            LAYERS,
            _correct_uncapped(table="layer_resource", pk="pk_layer_resource"),
            keys=("pk_layer",),
            pk="pk_layer_resource",
        ),
        TableRecompute(
            "job_resource", JOBS, CORRECT_JOBS, keys=("pk_job",), pk="pk_job_resource", restore=RESTORE_JOB_MAXIMA
        ),
        TableRecompute(
            "folder_resource",
            FOLDERS,
            _correct_uncapped(table="folder_resource", pk="pk_folder_resource"),
            keys=("pk_folder",),
            pk="pk_folder_resource",
        ),
        TableRecompute(
            "point", POINTS, _correct_uncapped(table="point", pk="pk_point"), keys=("pk_dept", "pk_show"), pk="pk_point"
        ),
    )
)


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
    locked if it does not (the comment on CORRECT_SUBSCRIPTIONS says why). A row equal to its sum
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


TABLE_RECOMPUTES = {table.table: table for table in TABLES}


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
    """pk -> _READ_COLUMNS as the read found them, None for a pair that did not drift."""
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
        return {"pks": these, **{name: [read[pk][i] for pk in these] for i, name in enumerate(_READ_COLUMNS)}}

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
