"""The release path's SQL: the releasing statements, the reads before any lock, the accounting
tables' adjustments, each with the function that runs it on a cursor.

Every statement here takes its rows in one lock order (below), the deadlock contract it shares
with Cuebot and with the recompute.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from accounting.lock_order import in_lock_order
from accounting.release.rows import select_list
from accounting.release.types import Branch, Release

# Lock order. Concurrent releases, and Cuebot's own releases beside them, lock the same
# rows; two transactions that lock an overlapping set in different orders deadlock, and
# PostgreSQL aborts one (40P01). Cuebot's release locks the proc, its host, then
# subscription, layer_resource, job_resource, folder_resource, point (a local one: host,
# layer_resource, job_resource, host_local). Every release here takes the same table order:
# proc rows, host rows, then the accounting tables in accounting.lock_order.LOCK_ORDER,
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
# (a TID scan, a little faster: docs/benchmarks.md, "The batch's read, cheaper"): a row Cuebot
# updated while the lock waited (its memory and ping reports) comes back with the ctid of the
# version before, and the DELETE would skip that proc (tests/accounting/release/test_cuebot_writes.py).
# Writers outside this order (an operator's SQL) can still deadlock with a release: that
# is what the rerun in infra.transactions is for.

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
    select=select_list(
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
""".format(select=select_list(proc="g", host="g", job="j", named={"inserted_by": "g.inserted_by"}))

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
""".format(select=select_list(proc="p", host="h", job="j"))
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
""".format(select=select_list(proc="p", host="h", job="j"))


def read_rows(cursor, *, proc_ids: list[str]) -> list[tuple]:
    """The procs about to go, read without a lock, as the releasing statements return them."""
    if len(proc_ids) == 1:
        cursor.execute(PRE_READ_ONE, {"id": proc_ids[0]})
    else:
        cursor.execute(PRE_READ_MANY, {"ids": proc_ids})
    return cursor.fetchall()


def release_rows(cursor, *, proc_ids: list[str]) -> list[tuple]:
    """The procs deleted and their hosts given back, in one statement: the rows of those it found."""
    if len(proc_ids) == 1:
        cursor.execute(RELEASE_ONE, {"id": proc_ids[0]})
    else:
        cursor.execute(RELEASE_MANY, {"ids": proc_ids})
    return cursor.fetchall()


@dataclass(frozen=True)
class Adjustment:
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
# In the lock order across the accounting tables (accounting.lock_order.LOCK_ORDER).
ADJUSTMENTS = in_lock_order(
    (
        Adjustment(table="subscription", pk="pk_subscription", keys=("pk_show", "pk_alloc"), amounts=_CORES_GPUS),
        Adjustment(table="layer_resource", pk="pk_layer_resource", keys=("pk_layer",), amounts=_CORES_GPUS),
        Adjustment(
            table="job_resource",
            pk="pk_job_resource",
            keys=("pk_job",),
            amounts=_CORES_GPUS + ("int_local_cores", "int_local_gpus"),
        ),
        Adjustment(
            table="host_local",
            pk="pk_host_local",
            keys=("pk_host", "pk_job"),
            amounts=("int_cores_idle", "int_mem_idle", "int_gpus_idle", "int_gpu_mem_idle"),
            sign="+",
        ),
        Adjustment(table="folder_resource", pk="pk_folder_resource", keys=("pk_folder",), amounts=_CORES_GPUS),
        Adjustment(table="point", pk="pk_point", keys=("pk_dept", "pk_show"), amounts=_CORES_GPUS),
    )
)
ADJUSTMENT_SQL = {a.table: a.sql for a in ADJUSTMENTS}
ONE_ROW_ADJUSTMENT_SQL = {a.table: a.one_row_sql for a in ADJUSTMENTS}


def adjust(cursor, *, adjustment: Adjustment, rows: dict[tuple, list[int]]) -> None:
    """One table's rows adjusted (rows: key -> amounts, in adjustment.amounts' order): by the
    one-row UPDATE, or by the ordered statement for several; nothing for none."""
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


def remove_local_reservations(cursor, *, releases: Sequence[Release]) -> None:
    """The local reservations of the released local procs whose jobs are over, removed."""
    over = sorted(
        {(r.host_id, r.job_id) for r in releases if r.branch is Branch.LOCAL and (r.job_finished or r.job_gone)}
    )
    if over:
        cursor.execute(REMOVE_LOCAL_RESERVATIONS, {"hosts": [h for h, _ in over], "jobs": [j for _, j in over]})
