"""Cuebot's own release in the Maestro era (ProcDaoJdbc.procDestroyed, batchDeleteVirtualProcs),
run beside this service's: proc rows locked in key order, one DELETE ... RETURNING, the hosts
refunded, then one UPDATE per accounting row in Cuebot's table order."""

from collections import defaultdict
from collections.abc import Callable

from simulator.farm import LayerRef
from simulator.workers.maestro.cuebot_rows import KEY_COLUMNS, LOCK_ORDER, LOCK_ROWS, Planned, deltas, lock_rows, where

LOCK_PROCS = "SELECT pk_proc FROM proc WHERE pk_proc = ANY(%(ids)s::text[]) ORDER BY pk_proc FOR UPDATE"
DELETE_PROCS = """
DELETE FROM proc WHERE pk_proc = ANY(%(ids)s::text[])
RETURNING pk_proc, pk_host, pk_show, pk_job, pk_layer, int_cores_reserved, int_mem_reserved, int_gpus_reserved,
          int_gpu_mem_reserved, b_local
"""
LOCK_RELEASED_HOSTS = (
    "SELECT pk_host, pk_alloc FROM host WHERE pk_host = ANY(%(ids)s::text[]) ORDER BY pk_host FOR NO KEY UPDATE"
)
REFUND_HOST = """
UPDATE host SET int_cores_idle = int_cores_idle + %(cores)s, int_mem_idle = int_mem_idle + %(mem)s,
                int_gpus_idle = int_gpus_idle + %(gpus)s, int_gpu_mem_idle = int_gpu_mem_idle + %(gpu_mem)s
 WHERE pk_host = %(host)s
"""
JOBS_OF = "SELECT pk_job, pk_folder, pk_dept, pk_show FROM job WHERE pk_job = ANY(%(ids)s::text[])"
TAKE_OFF = {
    "subscription": "UPDATE subscription SET int_cores = int_cores - %(cores)s, int_gpus = int_gpus - %(gpus)s WHERE "
    + where(table="subscription"),
    "layer_resource": "UPDATE layer_resource SET int_cores = int_cores - %(cores)s, int_gpus = int_gpus - %(gpus)s "
    "WHERE " + where(table="layer_resource"),
    "job_resource": "UPDATE job_resource SET int_cores = int_cores - %(cores)s, int_gpus = int_gpus - %(gpus)s, "
    "int_local_cores = int_local_cores - %(local_cores)s, int_local_gpus = int_local_gpus - %(local_gpus)s WHERE "
    + where(table="job_resource"),
    "host_local": "UPDATE host_local SET int_cores_idle = int_cores_idle + %(cores)s, "
    "int_mem_idle = int_mem_idle + %(mem)s, int_gpus_idle = int_gpus_idle + %(gpus)s WHERE "
    + where(table="host_local"),
    "folder_resource": "UPDATE folder_resource SET int_cores = int_cores - %(cores)s, "
    "int_gpus = int_gpus - %(gpus)s WHERE " + where(table="folder_resource"),
    "point": "UPDATE point SET int_cores = int_cores - %(cores)s, int_gpus = int_gpus - %(gpus)s WHERE "
    + where(table="point"),
}


def cuebot_release(*, cursor, proc_ids: list[str], after_table: Callable[..., None] = lambda **_: None) -> list[str]:
    """Release procs with Cuebot's statements, inside the caller's transaction; returns the ids
    deleted here (a proc someone else deleted first returns nothing and credits nothing).
    Proc rows locked in key order, one DELETE ... RETURNING (amounts as of deletion), the hosts
    locked in key order and refunded (summed per host), then one UPDATE per row, tables in
    Cuebot's order. `after_table` runs after each table's UPDATEs (the deadlock-order fault
    holds the rows there)."""
    cursor.execute(LOCK_PROCS, {"ids": sorted(proc_ids)})
    cursor.execute(DELETE_PROCS, {"ids": sorted(proc_ids)})
    gone = cursor.fetchall()
    if not gone:
        return []
    alloc_of = refund_hosts(cursor=cursor, gone=gone)
    take_off(cursor=cursor, released=as_planned(cursor=cursor, gone=gone, alloc_of=alloc_of), after_table=after_table)
    return [row[0] for row in gone]


def refund_hosts(*, cursor, gone: list[tuple]) -> dict[str, str]:
    """The released procs' hosts locked in key order and given back their amounts, summed per
    host; returns each host's allocation."""
    cursor.execute(LOCK_RELEASED_HOSTS, {"ids": sorted({row[1] for row in gone})})
    alloc_of = dict(cursor.fetchall())
    refunds: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for row in gone:
        totals = refunds[row[1]]
        for i, amount in enumerate(row[5:9]):
            totals[i] += amount
    for host_id in sorted(refunds):
        cores, mem, gpus, gpu_mem = refunds[host_id]
        cursor.execute(REFUND_HOST, {"host": host_id, "cores": cores, "mem": mem, "gpus": gpus, "gpu_mem": gpu_mem})
    return alloc_of


def as_planned(*, cursor, gone: list[tuple], alloc_of: dict[str, str]) -> list[Planned]:
    """The deleted proc rows with the keys of the accounting rows they counted in."""
    cursor.execute(JOBS_OF, {"ids": sorted({row[3] for row in gone})})
    jobs = {job_id: (folder_id, dept_id, show_id) for job_id, folder_id, dept_id, show_id in cursor.fetchall()}
    return [
        Planned(
            host_id=row[1],
            alloc_id=alloc_of[row[1]],
            layer=LayerRef(
                show_id=row[2], folder_id=jobs[row[3]][0], dept_id=jobs[row[3]][1], job_id=row[3], layer_id=row[4]
            ),
            cores=row[5],
            mem=row[6],
            gpus=row[7],
            local=row[9],
            planner="cuebot release",
            proc_id=row[0],
        )
        for row in gone
    ]


def take_off(*, cursor, released: list[Planned], after_table: Callable[..., None]) -> None:
    moves = deltas(procs=released)
    for table in LOCK_ORDER:
        if not moves[table]:
            continue
        # Rows locked in primary-key order first, as every other writer locks them: updated in
        # the order of their keys' values instead, two rows of a batch can be taken in the
        # opposite order to a booking's (subscriptions sort differently by (show, alloc)).
        lock_rows(cursor=cursor, sql=LOCK_ROWS[table], keys=moves[table], width=len(KEY_COLUMNS[table]))
        for key in sorted(moves[table]):
            params = {f"k{i}": part for i, part in enumerate(key)} | moves[table][key]
            cursor.execute(TAKE_OFF[table], params)
        after_table(table=table)
