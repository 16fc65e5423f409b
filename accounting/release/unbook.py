"""The release path: a proc given back, written as Cuebot writes it, told to the scheduler after commit."""

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from enum import Enum

import psycopg
from django.db import connection, transaction

from accounting.live.units import cores_from_centicores
from accounting.reconcile.cuebot_drift import in_lock_order
from accounting.reconcile.recompute import (
    TABLE_RECOMPUTES,
    inserted_below,
    recount_rows,
    recount_rows_at_once,
    report_row_failures,
)
from accounting.release.eras import Counting, ReleaseEra, release_era, show_ids_of
from accounting.release.publish import PreparedRelease, made
from accounting.release.types import Branch, Release
from infra import metrics
from infra.cursors import django_cursor
from infra.metrics import RELEASE_BATCH_SIZE, RELEASE_SECONDS, RELEASES
from infra.transactions import retry_transient
from infra.writes import Write
from shows.attach import RELEASE_TABLES, writer_grant

logger = logging.getLogger(__name__)

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
#      Redis era registers it in flight before the transaction (below) and publishes it to
#      Redis after commit (accounting.release.publish);
#    - counted by Cuebot (every show in the Maestro era, an unflagged one in the others):
#      subscription, layer_resource, job_resource, folder_resource (the job's folder) and
#      point (the job's department and show) decremented in centicores in the same
#      transaction, as Cuebot's procDestroyed and batchDeleteVirtualProcs do.
# Local and Cuebot-managed procs share one set-based statement per table (lock order below).
# What a proc whose job is gone cannot resolve (its folder, its point) is logged and counted.
# What follows the releasing statement, and where the transaction ends (the statement alone on
# autocommit, the COMMIT pipelined with the writes or sent with the notifications, the atomic
# block's exit), is chosen in one place: _write_mode, from the release's _WritePlan; what follows
# its commit (publish, metrics) in one too: _published_and_counted.


# Lock order. Concurrent releases, and Cuebot's own releases beside them, lock the same
# rows; two transactions that lock an overlapping set in different orders deadlock, and
# PostgreSQL aborts one (40P01). Cuebot's release locks the proc, its host, then
# subscription, layer_resource, job_resource, folder_resource, point (a local one: host,
# layer_resource, job_resource, host_local). Every release here takes the same table order:
# proc rows, host rows, then the accounting tables in accounting.reconcile.cuebot_drift.LOCK_ORDER,
# the one statement of that order (one statement per table; the recompute takes the same),
# so it waits for Cuebot, or Cuebot for it, and neither deadlocks. Within a table, rows
# are locked in primary-key order: a MATERIALIZED CTE with ORDER BY ... FOR [NO KEY]
# UPDATE locks row by row in sorted order (the order a plan visits rows in is not stable,
# and the data-modifying CTEs of one statement run in an unspecified order), and the
# statement then only writes rows that CTE returned, i.e. rows this transaction holds.
# A release's proc and host rows are locked by one statement: its host rows are locked
# from the sums over every deleted proc (per_host reads all of the DELETE's output), so
# after all of its proc rows, whatever order the statement's parts otherwise run in.
# A batch reads each proc's allocation from its host row as locked (proc.pk_host has a
# foreign key, so the row is there), not by a second probe of host per proc in the DELETE.
# Its DELETE finds the locked rows again by primary key, not by the ctid the lock returned
# (a TID scan, 0.2 ms less a batch of 100): a row Cuebot updated while the lock waited (its
# memory and ping reports) comes back with the ctid of the version before, and the DELETE
# would skip that proc (tests/accounting/release/test_cuebot_writes.py).
# Writers outside this order (an operator's SQL) can still deadlock with a release: that
# is what the rerun in infra.transactions is for.
# The row the releasing statements and the pre-reads return, column by column, each from its
# Cuebot table (PROC, HOST or JOB: the proc's, its host's, its job's) and column there: Release's
# fields in Release's order, but for `cores` (Redis's unit, converted from cores_centicores) and
# `branch` (its show's owner's), then what the path reads and Release does not keep. Every SELECT
# list below is rendered from it, so a column's place in the row is its place here.
PROC, HOST, JOB = "proc", "host", "job"
ROW_SOURCES = {
    "proc_id": (PROC, "pk_proc"),
    "host_id": (PROC, "pk_host"),
    "show_id": (PROC, "pk_show"),
    "alloc_id": (HOST, "pk_alloc"),
    "folder_id": (JOB, "pk_folder"),
    "job_id": (PROC, "pk_job"),
    "layer_id": (PROC, "pk_layer"),
    "dept_id": (JOB, "pk_dept"),
    "point_show_id": (JOB, "pk_show"),
    "job_state": (JOB, "str_state"),
    "cores_centicores": (PROC, "int_cores_reserved"),
    "gpus": (PROC, "int_gpus_reserved"),
    "memory": (PROC, "int_mem_reserved"),
    "gpu_memory": (PROC, "int_gpu_mem_reserved"),
    "is_local": (PROC, "b_local"),
    "inserted_by": (PROC, "xmin::text::bigint"),  # the inserting transaction (_counted_at_switch_back)
}
ROW = tuple(ROW_SOURCES)
PROC_ID, SHOW_ID, CORES_CENTICORES, IS_LOCAL, INSERTED_BY = (
    ROW.index(name) for name in ("proc_id", "show_id", "cores_centicores", "is_local", "inserted_by")
)
# A Release is the row up to IS_LOCAL with cores put in after cores_centicores and the branch at
# the end (_release_from_row): said once here, and refused at import if Release's fields move.
_BEFORE_CORES, _AFTER_CORES = slice(0, CORES_CENTICORES + 1), slice(CORES_CENTICORES + 1, IS_LOCAL)
if Release._fields != (*ROW[_BEFORE_CORES], "cores", *ROW[_AFTER_CORES], "branch"):
    raise TypeError(
        f"accounting.release.unbook: ROW_SOURCES no longer lines up with Release's fields {Release._fields}"
    )


def _select_list(*, proc: str, host: str, job: str, named: dict[str, str] | None = None) -> str:
    """ROW's columns in order, each `<alias>.<column> AS <name>` with the alias the statement gives
    its proc, host and job; `named` gives a column an earlier CTE of the statement already returned."""
    aliases, named = {PROC: proc, HOST: host, JOB: job}, named or {}
    return ", ".join(
        f"{named.get(name) or aliases[table] + '.' + column} AS {name}" for name, (table, column) in ROW_SOURCES.items()
    )


RELEASE_MANY = """
WITH doomed AS MATERIALIZED (
     SELECT p.pk_proc, j.pk_folder, j.pk_dept, j.pk_show AS point_show, j.str_state AS job_state
       FROM proc p LEFT JOIN job j ON j.pk_job = p.pk_job
      WHERE p.pk_proc = ANY(%(ids)b::text[]) ORDER BY p.pk_proc FOR UPDATE OF p
), gone AS (
     DELETE FROM proc p
      USING doomed d
      WHERE p.pk_proc = d.pk_proc
     RETURNING p.pk_proc, p.pk_host, p.pk_show, d.pk_folder, p.pk_job, p.pk_layer, d.pk_dept, d.point_show,
               d.job_state, p.int_cores_reserved, p.int_gpus_reserved, p.int_mem_reserved, p.int_gpu_mem_reserved, p.b_local,
               p.xmin::text::bigint AS inserted_by
), per_host AS (
     SELECT pk_host, SUM(int_cores_reserved) AS cores, SUM(int_mem_reserved) AS mem, SUM(int_gpus_reserved) AS gpus,
            SUM(int_gpu_mem_reserved) AS gpu_mem
       FROM gone GROUP BY pk_host
), locked AS MATERIALIZED (
     SELECT h.pk_host, h.pk_alloc, t.cores, t.mem, t.gpus, t.gpu_mem FROM host h JOIN per_host t ON t.pk_host = h.pk_host
      ORDER BY h.pk_host FOR NO KEY UPDATE OF h
), given_back AS (
     UPDATE host h
        SET int_cores_idle = h.int_cores_idle + l.cores, int_mem_idle = h.int_mem_idle + l.mem,
            int_gpus_idle = h.int_gpus_idle + l.gpus, int_gpu_mem_idle = h.int_gpu_mem_idle + l.gpu_mem
       FROM locked l
      WHERE h.pk_host = l.pk_host
)
SELECT {select}
  FROM gone g JOIN locked l ON l.pk_host = g.pk_host
""".format(
    select=_select_list(
        proc="g",
        host="l",
        job="g",
        named={"point_show_id": "g.point_show", "job_state": "g.job_state", "inserted_by": "g.inserted_by"},
    )
)

# One proc, the common call: one proc row and one host row, so no ordering CTE is needed.
# The host UPDATE reads the DELETE's output, so it runs after the proc row is locked and
# deleted: proc, then host, Cuebot's order. One statement, one round trip, and a shape
# PostgreSQL plans once per connection (a generic plan after the first executions).
RELEASE_ONE = """
WITH gone AS (
     DELETE FROM proc p USING host h
      WHERE p.pk_proc = %(id)s AND h.pk_host = p.pk_host
     RETURNING p.pk_proc, p.pk_host, p.pk_show, h.pk_alloc, p.pk_job, p.pk_layer,
               p.int_cores_reserved, p.int_gpus_reserved, p.int_mem_reserved, p.int_gpu_mem_reserved, p.b_local,
               p.xmin::text::bigint AS inserted_by
), given_back AS (
     UPDATE host h
        SET int_cores_idle = h.int_cores_idle + g.int_cores_reserved, int_mem_idle = h.int_mem_idle + g.int_mem_reserved,
            int_gpus_idle = h.int_gpus_idle + g.int_gpus_reserved, int_gpu_mem_idle = h.int_gpu_mem_idle + g.int_gpu_mem_reserved
       FROM gone g
      WHERE h.pk_host = g.pk_host
)
SELECT {select}
  FROM gone g LEFT JOIN job j ON j.pk_job = g.pk_job
""".format(select=_select_list(proc="g", host="g", job="j", named={"inserted_by": "g.inserted_by"}))

# The Redis era registers a release in flight before its transaction locks anything, so no
# row lock is held while Redis is waited on (a stalled Redis would otherwise stall every
# release of the host, Cuebot-managed ones included). What is registered is read here,
# without a lock, in the shape the releasing statements return.
# One proc by its key, the common call: PostgreSQL settles on a generic plan for it after
# five runs (`= ANY` of one element kept being planned anew: docs/benchmarks.md, "Figures behind
# the release path's comments").
PRE_READ_ONE = """
SELECT {select}
  FROM proc p JOIN host h ON h.pk_host = p.pk_host LEFT JOIN job j ON j.pk_job = p.pk_job
 WHERE p.pk_proc = %(id)s
""".format(select=_select_list(proc="p", host="h", job="j"))
# A batch by `= ANY`: a batch reads in less time than with the ids joined as a relation
# (index lookups row by row on all three tables), and PostgreSQL keeps a generic plan for it
# after its first five runs, as for the releasing statements.
# Arrays on the release path go in binary (`%(x)b`): as text, psycopg quotes each element and
# PostgreSQL parses the literal back.
# The measurements: docs/benchmarks.md, "Figures behind the release path's comments".
PRE_READ_MANY = """
SELECT {select}
  FROM proc p JOIN host h ON h.pk_host = p.pk_host LEFT JOIN job j ON j.pk_job = p.pk_job
 WHERE p.pk_proc = ANY(%(ids)b::text[])
""".format(select=_select_list(proc="p", host="h", job="j"))


@dataclass(frozen=True)
class _Adjustment:
    """UPDATE table SET amount = amount - delta (or + delta, to give back) for the rows
    matched on keys, locked in pk order.

    Parameters: one text[] per key column and one bigint[] per amount column, named after
    the column, one element per row (the caller sums per key, so each row matches once).
    """

    table: str
    pk: str
    keys: tuple[str, ...]
    amounts: tuple[str, ...]
    sign: str = "-"

    @property
    def one_row_sql(self) -> str:
        """The same for one row, by its key (unique in each of these tables): a single row
        needs no ordering, and the plain UPDATE is the cheapest statement to run."""
        match = " AND ".join(f"{k} = %({k})s" for k in self.keys)
        return (
            f"UPDATE {self.table} SET {', '.join(f'{a} = {a} {self.sign} %({a})s' for a in self.amounts)} WHERE {match}"
        )

    @property
    def sql(self) -> str:
        arrays = ", ".join([f"%({k})b::text[]" for k in self.keys] + [f"%({a})b::bigint[]" for a in self.amounts])
        match = " AND ".join(f"t.{k} = d.{k}" for k in self.keys)
        return f"""
WITH d AS (
     SELECT * FROM unnest({arrays}) AS d({", ".join(self.keys + self.amounts)})
), locked AS MATERIALIZED (
     SELECT t.{self.pk}, {", ".join(f"d.{a}" for a in self.amounts)} FROM {self.table} t JOIN d ON {match}
      ORDER BY t.{self.pk} FOR NO KEY UPDATE OF t
)
UPDATE {self.table} t SET {", ".join(f"{a} = t.{a} {self.sign} l.{a}" for a in self.amounts)}
  FROM locked l
 WHERE t.{self.pk} = l.{self.pk}
"""


_CORES_GPUS = ("int_cores", "int_gpus")
# In the lock order across the accounting tables (accounting.reconcile.cuebot_drift.LOCK_ORDER).
ADJUSTMENTS = in_lock_order(
    (
        _Adjustment(table="subscription", pk="pk_subscription", keys=("pk_show", "pk_alloc"), amounts=_CORES_GPUS),
        _Adjustment(table="layer_resource", pk="pk_layer_resource", keys=("pk_layer",), amounts=_CORES_GPUS),
        _Adjustment(
            table="job_resource",
            pk="pk_job_resource",
            keys=("pk_job",),
            amounts=_CORES_GPUS + ("int_local_cores", "int_local_gpus"),
        ),
        _Adjustment(
            table="host_local",
            pk="pk_host_local",
            keys=("pk_host", "pk_job"),
            amounts=("int_cores_idle", "int_mem_idle", "int_gpus_idle", "int_gpu_mem_idle"),
            sign="+",
        ),
        _Adjustment(table="folder_resource", pk="pk_folder_resource", keys=("pk_folder",), amounts=_CORES_GPUS),
        _Adjustment(table="point", pk="pk_point", keys=("pk_dept", "pk_show"), amounts=_CORES_GPUS),
    )
)
ADJUSTMENT_SQL = {a.table: a.sql for a in ADJUSTMENTS}
ONE_ROW_ADJUSTMENT_SQL = {a.table: a.one_row_sql for a in ADJUSTMENTS}


class _PreparedStatementCursor(psycopg.Cursor):
    """Server-side binding, each statement prepared on its connection at first use.

    The release statements are few and run at a high rate: parsing and planning them anew
    each time was most of their PostgreSQL cost. psycopg prepares only on a connection
    whose prepare_threshold is not None (Django's default is None): settings set it.
    Django's own cursors bind client-side and never prepare; a deployment behind a
    transaction-mode pooler must route this service to PostgreSQL directly.
    """

    def execute(self, query, params=None, **kwargs):
        return super().execute(query, params, prepare=True)


def _release_cursor():
    """A Django cursor wrapper (execute_wrappers, broken-transaction checks) over the above."""
    return django_cursor(_PreparedStatementCursor)


@contextmanager
def _committed_with_the_writes() -> Iterator[None]:
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
    with _one_round_trip():
        yield
        connection.connection.execute("COMMIT", prepare=False)


@contextmanager
def _one_round_trip() -> Iterator[None]:
    """The statements run in the block go to PostgreSQL in one round trip (psycopg's
    pipeline mode), still one by one through the Django cursor wrapper.

    The server runs pipelined statements one after the other in the order sent, so the
    lock order above holds; each statement is sent (and runs) as it is executed, only its
    result is awaited at the end. A failure of a statement whose result arrives at the
    end (the common case: a deadlock is found while the client has sent everything) is
    raised by the pipeline's exit, outside the cursor wrapper: converting it here makes it
    the Django error a failed execute raises (40P01 as its cause, so retry_transient
    reruns the release), and the atomic block rolls the transaction back as usual.
    """
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


_new_release = tuple.__new__
# Bound once: each lookup of an enum member on its class costs a batch a loop's worth of time.
_LOCAL, _SCHEDULER, _CUEBOT = Branch.LOCAL, Branch.SCHEDULER, Branch.CUEBOT


def _counting(rows: list[tuple], era: ReleaseEra) -> Counting:
    """Who counts a releasing statement's rows' procs, per show (the era reads the flag once per
    show, and only for shows with procs that are not local)."""
    return era.counting(show_ids=show_ids_of(rows, show=SHOW_ID, local=IS_LOCAL))


def _branch(row: tuple, *, branches: dict[str, Branch]) -> Branch:
    """A releasing statement's row's branch: local by its proc, else its show's owner's."""
    return _LOCAL if row[IS_LOCAL] else branches[row[SHOW_ID]]


def _counted_at_switch_back(rows: list[tuple], counting: Counting) -> frozenset[str]:
    """The procs of settling shows that their switch-back recompute counted: inserted below the
    xid horizon it recorded (accounting.reconcile.recompute.inserted_below), by the xmin the
    releasing statement returns (inserted_by)."""
    below = counting.counted_below
    return frozenset(
        row[PROC_ID]
        for row in rows
        if row[SHOW_ID] in below and inserted_below(xmin=row[INSERTED_BY], horizon=below[row[SHOW_ID]])
    )


def _release_from_row(row: tuple, *, branch: Branch) -> Release:
    """A releasing statement's row is Release's fields in order (ROW_SOURCES), but for cores in
    Redis's unit and the branch: built straight into the tuple, as a batch builds one per proc
    (far cheaper than the keyword constructor: docs/benchmarks.md)."""
    return _new_release(
        Release, (*row[_BEFORE_CORES], cores_from_centicores(row[CORES_CENTICORES]), *row[_AFTER_CORES], branch)
    )


def _releases_from_rows(
    rows: list[tuple], *, branches: dict[str, Branch], read: dict[str, tuple] | None = None
) -> list[Release]:
    """The releases the releasing statement returned. A row equal to the one the read before
    any lock returned, with the same owner, is that read's Release (a batch builds each once)."""
    read = read or {}
    releases = []
    for row in rows:
        seen, branch = read.get(row[PROC_ID]), _branch(row, branches=branches)
        if seen is not None and seen[0] == row and seen[1].branch is branch:
            releases.append(seen[1])
        else:
            releases.append(_release_from_row(row, branch=branch))
    return releases


def _adjust_pg_accounting(cursor, plan: "_WritePlan") -> None:
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
    decrements, recounted = _decrements(plan)
    if recounted and not any(decrements.values()):
        # Only settling rows to write: all of them locked, then all of them set, in two round trips.
        failures = recount_rows_at_once(show_ids=plan.settling, named=recounted)
    else:
        failures = []
        for a in ADJUSTMENTS:
            _decrement(cursor, a, decrements[a.table])
            if recounted.get(a.table):
                table = TABLE_RECOMPUTES[a.table]
                failures += recount_rows(
                    cursor=cursor, table=table, show_ids=plan.settling, named=sorted(recounted[a.table])
                )
        _remove_finished_local_reservations(cursor, plan.in_pg)
    report_row_failures(failures, operation="release of a settling show")


# Two amounts at a time, positionally: a batch of 100 adds 500 times, and a call taking its
# amounts as *args with a keyword offset cost it 280 µs a batch against 150 µs (issue 43).
def _add(totals: list[int], first: int, second: int, at: int = 0) -> None:
    totals[at] += first
    totals[at + 1] += second


def _decrements(plan: "_WritePlan") -> tuple[dict[str, dict[tuple, list[int]]], dict[str, set[tuple]]]:
    """Per table, the amounts to take off (give back, for host_local) per row's key, summed over
    the releases; and per table the keys of the rows recounted instead (a settling show's)."""
    sums: dict[str, dict[tuple, list[int]]] = {a.table: defaultdict(lambda: [0, 0, 0, 0]) for a in ADJUSTMENTS}
    recounted: dict[str, set[tuple]] = defaultdict(set)
    layer, job, subscription = sums["layer_resource"], sums["job_resource"], sums["subscription"]
    folder, point, host_local = sums["folder_resource"], sums["point"], sums["host_local"]
    for r in plan.in_pg:
        cores, gpus = r.cores_centicores, r.gpus
        if r.branch is _LOCAL:
            _add(layer[(r.layer_id,)], cores, gpus)
            # Counting rules of accounting.reconcile.recompute: local procs only in their layer and in
            # the job's int_local_*; their amounts go back to the job's reservation too.
            _add(job[(r.job_id,)], cores, gpus, 2)
            totals = host_local[(r.host_id, r.job_id)]
            _add(totals, cores, r.memory)
            _add(totals, gpus, r.gpu_memory, 2)
            continue
        if plan.settling and plan.recounts(r):
            recounted["subscription"].add((r.show_id, r.alloc_id))
            recounted["layer_resource"].add((r.layer_id,))
            recounted["job_resource"].add((r.job_id,))
            if not r.job_gone:
                recounted["folder_resource"].add((r.folder_id,))
                recounted["point"].add((r.dept_id, r.point_show_id))
            continue
        _add(layer[(r.layer_id,)], cores, gpus)
        _add(job[(r.job_id,)], cores, gpus)
        _add(subscription[(r.show_id, r.alloc_id)], cores, gpus)
        if not r.job_gone:
            _add(folder[(r.folder_id,)], cores, gpus)
            _add(point[(r.dept_id, r.point_show_id)], cores, gpus)
    return sums, recounted


def _decrement(cursor, adjustment: _Adjustment, rows: dict[tuple, list[int]]) -> None:
    """One table's rows adjusted: by the one-row UPDATE, or by the ordered statement for several."""
    if len(rows) == 1:
        ((key, totals),) = rows.items()
        params = dict(zip(adjustment.keys, key)) | dict(zip(adjustment.amounts, totals))
        cursor.execute(ONE_ROW_ADJUSTMENT_SQL[adjustment.table], params)
    elif rows:
        row_keys = sorted(rows)
        params = {k: [key[i] for key in row_keys] for i, k in enumerate(adjustment.keys)}
        params |= {amount: [rows[key][j] for key in row_keys] for j, amount in enumerate(adjustment.amounts)}
        cursor.execute(ADJUSTMENT_SQL[adjustment.table], params)


# Cuebot's DispatchSupportService.unbookProc, after a local proc goes: the job's local
# reservation on that host is removed once the job is over (BookingManagerService.
# removeInactiveLocalHostAssignment: FINISHED, or the job row gone). Its rows were locked by
# the host_local UPDATE above, so this takes no new lock.
REMOVE_LOCAL_RESERVATIONS = """
DELETE FROM host_local hl
 USING unnest(%(hosts)b::text[], %(jobs)b::text[]) AS d(pk_host, pk_job)
 WHERE hl.pk_host = d.pk_host AND hl.pk_job = d.pk_job
"""


def _remove_finished_local_reservations(cursor, releases: Sequence[Release]) -> None:
    over = sorted(
        {(r.host_id, r.job_id) for r in releases if r.branch is Branch.LOCAL and (r.job_finished or r.job_gone)}
    )
    if over:
        cursor.execute(REMOVE_LOCAL_RESERVATIONS, {"hosts": [h for h, _ in over], "jobs": [j for _, j in over]})


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


def _count_at_commit(releases: Sequence[Release], *, withheld: int, changed: int = 0) -> None:
    for branch, n in Counter(r.branch for r in releases).items():
        RELEASES.labels(branch=branch.value).inc(n)
    if withheld:
        metrics.RELEASE_WITHHELD.labels(reason="job_finished").inc(withheld)
    if changed:
        metrics.RELEASE_WITHHELD.labels(reason="changed_since_registered").inc(changed)
    _report_jobs_gone(releases)


@dataclass(frozen=True)
class _Registered:
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


def _now(callback: Callable[[], object]) -> None:
    callback()


def _published_and_counted(
    releases: list[Release],
    registered: _Registered | None,
    *,
    era: ReleaseEra,
    at_commit: Callable[[Callable[[], object]], None],
) -> None:
    """What follows the releasing statement in every release, one statement or a transaction:
    the registered releases made as registered published (the entry settled whatever else it
    held), the releases counted; each run by `at_commit`, the release's commit being where
    they may happen: _now where the statement committed on its own, transaction.on_commit in a
    transaction (publish iff commit)."""
    to_redis, withheld = era.publishable(releases)
    changed = 0
    if registered is not None:
        covered, changed = registered.covering(to_redis)
        publisher, prepared = era.publisher, registered.narrowed_to(covered)
        at_commit(lambda: publisher.publish(prepared=prepared))
    if releases:  # a release that found nothing has nothing to count
        at_commit(lambda: _count_at_commit(releases, withheld=withheld, changed=changed))


# --- What a release writes after its releasing statement, and where it ends ----------------


@dataclass(frozen=True)
class _WritePlan:
    """What a release writes in PostgreSQL after its releasing statement, from the rows that
    statement returned (before any lock: from the read): the accounting-table rows of its local
    and Cuebot-counted procs, decremented, or recounted from SUM(proc) where recounts() says
    so; and whatever its era sends in the transaction (of `releases`)."""

    releases: list[Release]
    in_pg: list[Release]  # local and Cuebot-counted: the accounting tables' writes
    settling: list[str]  # the shows of its Cuebot-counted procs settling after a switch back, sorted
    counted: frozenset[str]  # the procs of those shows their switch-back recompute counted

    def recounts(self, r: Release) -> bool:
        """Whether a release's rows are recounted from SUM(proc) rather than decremented: a
        Cuebot-counted proc of a settling show that its switch-back recompute did not count
        (_adjust_pg_accounting)."""
        return r.branch is _CUEBOT and r.show_id in self.settling and r.proc_id not in self.counted


def _plan(rows: list[tuple], releases: list[Release], counting: Counting) -> _WritePlan:
    in_pg = [r for r in releases if r.branch is not _SCHEDULER]
    settling = sorted({r.show_id for r in in_pg if r.branch is _CUEBOT and r.show_id in counting.settling})
    counted = _counted_at_switch_back(rows, counting) if settling else frozenset()
    return _WritePlan(releases=releases, in_pg=in_pg, settling=settling, counted=counted)


class _Mode(Enum):
    """How a release's writes after its releasing statement reach PostgreSQL, and where its
    transaction ends. Where the release opened the transaction (outermost), the COMMIT goes with
    the last of what it sends when that needs nothing back: one round trip less."""

    ONE_STATEMENT = "nothing to write after it, no transaction around: the releasing statement on autocommit"
    COMMIT_AT_EXIT = "nothing to write after it: the atomic block's exit commits (or the caller's transaction)"
    NOTIFY = "the era's notifications alone, in the caller's transaction"
    NOTIFY_AND_COMMIT = "the era's notifications alone and the COMMIT: one simple query (notify_and_commit)"
    PIPELINE = "the decrements and the notifications, in one round trip (_one_round_trip), in the caller's transaction"
    PIPELINE_AND_COMMIT = (
        "the decrements, the notifications and the COMMIT in one round trip (_committed_with_the_writes)"
    )
    # A settling show's recompute reads results back and redoes a failed row in a savepoint (which
    # a pipeline, skipping all after an error, would not run).
    STATEMENT_BY_STATEMENT = "the writes one statement at a time; the atomic block's exit commits"


def _write_mode(plan: _WritePlan, *, era: ReleaseEra, outermost: bool, begun: bool = True) -> _Mode:
    """The one choice of how a release writes after its releasing statement and where it ends.

    Asked in the transaction, of what the releasing statement returned. In the Redis era it is
    asked first before any lock, of the read (begun False, and only if the read found every proc
    asked for): if nothing would follow the releasing statement and no transaction is open, the
    statement is a transaction on its own, with no BEGIN and COMMIT round trips (ONE_STATEMENT).
    """
    if plan.in_pg:
        if plan.settling and any(map(plan.recounts, plan.in_pg)):
            return _Mode.STATEMENT_BY_STATEMENT
        return _Mode.PIPELINE_AND_COMMIT if outermost else _Mode.PIPELINE
    if era.sends_in_transaction:
        return _Mode.NOTIFY_AND_COMMIT if outermost else _Mode.NOTIFY
    return _Mode.ONE_STATEMENT if outermost and not begun else _Mode.COMMIT_AT_EXIT


# How each mode with accounting-table writes sends them.
_SENT_IN: dict[_Mode, Callable[[], AbstractContextManager]] = {
    _Mode.PIPELINE_AND_COMMIT: _committed_with_the_writes,
    _Mode.PIPELINE: _one_round_trip,
    _Mode.STATEMENT_BY_STATEMENT: nullcontext,
}


def _write(cursor, plan: _WritePlan, *, mode: _Mode, era: ReleaseEra) -> None:
    """The writes after the releasing statement, as `mode` says; last in the transaction's block,
    since the COMMIT may go with them."""
    if mode is _Mode.NOTIFY or mode is _Mode.NOTIFY_AND_COMMIT:
        era.send(cursor=cursor, releases=plan.releases, commit=mode is _Mode.NOTIFY_AND_COMMIT)
    elif (sent_in := _SENT_IN.get(mode)) is not None:
        with sent_in():
            _adjust_pg_accounting(cursor, plan)
            era.send(cursor=cursor, releases=plan.releases, commit=False)


# --- The release ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _PreRead:
    """The procs about to go, read before any lock, as the releasing statements return them."""

    rows: dict[str, tuple]  # proc id -> (the row read, its Release)
    branches: dict[str, Branch]  # per show of a proc that is not local
    plan: _WritePlan  # what the release would write after its releasing statement, were the read its rows


def _pre_read(proc_ids: list[str], era: ReleaseEra) -> _PreRead:
    """Redis era: what is registered in flight before the release locks anything (a plain
    SELECT, in the caller's transaction if there is one)."""
    with _release_cursor() as cursor:
        if len(proc_ids) == 1:
            cursor.execute(PRE_READ_ONE, {"id": proc_ids[0]})
        else:
            cursor.execute(PRE_READ_MANY, {"ids": proc_ids})
        rows = cursor.fetchall()
    counting = _counting(rows, era)
    releases = [_release_from_row(row, branch=_branch(row, branches=counting.branches)) for row in rows]
    return _PreRead(
        rows={row[PROC_ID]: (row, release) for row, release in zip(rows, releases)},
        branches=counting.branches,
        plan=_plan(rows, releases, counting),
    )


def _register(pre: _PreRead, era: ReleaseEra) -> _Registered | None:
    """Register the scheduler-managed releases in flight; no PostgreSQL lock is held."""
    candidates, _ = era.publishable(pre.plan.releases)
    if not candidates:
        return None
    prepared = era.publisher.prepare(releases=candidates)
    return None if prepared is None else _Registered(prepared=prepared, releases={r.proc_id: r for r in candidates})


@contextmanager
def _in_flight(pre: _PreRead | None, era: ReleaseEra) -> Iterator[_Registered | None]:
    """The release registered in flight for the block (Redis era; None where nothing was), and its
    entry settled at once, nothing taken off, if the block raises (a rerun registers its own).
    A transaction that raised rolled back, and nothing it deleted is gone. A releasing statement
    that ran on its own may have committed before the error (in the publish, the metrics): its
    procs are gone and the counters keep them until the next reseed, high, the safe direction.
    A settle that fails leaves the entry to expire: high as well."""
    registered = _register(pre, era) if pre is not None else None
    if registered is None:
        yield None
        return
    try:
        yield registered
    except BaseException:
        era.publisher.publish(prepared=made(prepared=registered.prepared, releases=[]))
        raise


def _release(proc_ids: list[str]) -> dict[str, Release]:
    # A deadlock victim is rerun whole when this is the outermost transaction (why that is
    # safe: infra.transactions); inside a caller's transaction the error propagates.
    # The era is chosen once, here: every step of the release (and of a rerun) asks the same one.
    era = release_era()
    return retry_transient(lambda: _release_once(proc_ids, era), operation="release")


def _release_once(proc_ids: list[str], era: ReleaseEra) -> dict[str, Release]:
    pre = _pre_read(proc_ids, era) if era.reads_before_lock else None
    with _in_flight(pre, era) as registered:
        if (
            pre is not None
            and len(pre.rows) == len(proc_ids)
            and _write_mode(pre.plan, era=era, outermost=not connection.in_atomic_block, begun=False)
            is _Mode.ONE_STATEMENT
        ):
            return _release_in_one_statement(proc_ids, pre=pre, registered=registered, era=era)
        return _release_in_transaction(proc_ids, registered, era=era, read=pre.rows if pre is not None else None)


def _releasing_statement(cursor, proc_ids: list[str]) -> list[tuple]:
    """The procs deleted and their hosts given back, in one statement."""
    if len(proc_ids) == 1:
        cursor.execute(RELEASE_ONE, {"id": proc_ids[0]})
    else:
        cursor.execute(RELEASE_MANY, {"ids": proc_ids})
    return cursor.fetchall()


def _release_in_one_statement(
    proc_ids: list[str], *, pre: _PreRead, registered: _Registered | None, era: ReleaseEra
) -> dict[str, Release]:
    """The releasing statement on an autocommit connection: one implicit transaction, committed
    when it returns, so what follows a commit follows it at once."""
    with _release_cursor() as cursor:
        rows = _releasing_statement(cursor, proc_ids)
    # The owner as the read found it (a proc's show and b_local do not change; a flag that
    # flipped since is the next release's business, as it would be a moment later).
    releases = _releases_from_rows(rows, branches=pre.branches, read=pre.rows)
    _published_and_counted(releases, registered, era=era, at_commit=_now)
    return {r.proc_id: r for r in releases}


def _release_in_transaction(
    proc_ids: list[str], registered: _Registered | None, *, era: ReleaseEra, read: dict[str, tuple] | None = None
) -> dict[str, Release]:
    outermost = not connection.in_atomic_block
    with transaction.atomic(), _release_cursor() as cursor:
        rows = _releasing_statement(cursor, proc_ids)
        counting = _counting(rows, era)
        releases = _releases_from_rows(rows, branches=counting.branches, read=read)
        _published_and_counted(releases, registered, era=era, at_commit=transaction.on_commit)
        plan = _plan(rows, releases, counting)
        _write(cursor, plan, mode=_write_mode(plan, era=era, outermost=outermost), era=era)
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
    # finds a sorted one sorted at a glance (99 comparisons of the collation for 100 ids, not ~660).
    with RELEASE_SECONDS.time():
        released = _release(sorted(ids))
    return [released.get(proc_id) for proc_id in ids]
