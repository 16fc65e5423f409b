"""Cuebot's own writes in the Maestro era, for `simulate_farm --era maestro`: a Maestro tick's
booking chunk and Cuebot's release, written here from their documented order (docs/eras.md,
docs/cuebot-schema.md's triggers and caps, docs/architecture.md's lock order), no code copied.

Why it exists: in the Maestro era Cuebot writes the five accounting tables on every booking and
every release, for every show, while this service releases procs beside it. The simulator
needs both of Cuebot's writers on the same rows as the service, taking their row locks as
Cuebot does, so that a writer of this service that takes another order deadlocks here as it
would on a site, and a booking or release that leaves a table off its procs shows in the
samples.

Lock order, Cuebot's: proc rows, host rows, then subscription, layer_resource, job_resource,
host_local, folder_resource, point; within a table, rows in primary-key order. A booking's procs
are new rows no other transaction can lock, so it locks its hosts first, then every accounting
row it will change (reading the caps and counters there), and only then inserts its procs: the
cap checks see the counters as they are under the lock, so no two chunks can book one cap past
its limit between them.
"""

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from simulator.farm import PROC_MEM_KB, LayerRef
from simulator.farm_builder import insert_running_frame

# Cuebot's table order for the accounting rows a booking or a release changes.
LOCK_ORDER = ("subscription", "layer_resource", "job_resource", "host_local", "folder_resource", "point")
# The tables a booking adds to, in that order: the one seam the broken "booking skips the layer"
# variant replaces (tests/simulator/test_maestro_era.py).
BOOKING_WRITES = LOCK_ORDER
# Rejection kinds, one per cap a Maestro booking respects (and the host's room).
CAP_KINDS = ("subscription", "folder cores", "folder gpus", "job cores", "job gpus", "layer", "host", "job finished")


@dataclass(frozen=True)
class Planned:
    """One proc a tick wants to book; its ids are chosen at planning time, so a booking whose
    commit was cut off can be looked up afterwards (its frame exists iff it committed)."""

    host_id: str
    alloc_id: str
    layer: LayerRef
    cores: int  # centicores
    gpus: int
    local: bool
    planner: str  # "maestro" (a flagged show) or "dispatcher" (Cuebot's legacy one, unflagged)
    mem: int = PROC_MEM_KB  # KB; a release's is the proc's as deleted
    proc_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    frame_id: str = field(default_factory=lambda: str(uuid.uuid4()))


def row_keys(*, plan: Planned) -> dict[str, tuple[str, ...]]:
    """The accounting rows a proc counts in, by Cuebot's counting rules: a local proc only in
    its layer, its job's int_local_* and the job's reservation on its host."""
    layer = plan.layer
    if plan.local:
        return {
            "layer_resource": (layer.layer_id,),
            "job_resource": (layer.job_id,),
            "host_local": (plan.host_id, layer.job_id),
        }
    return {
        "subscription": (layer.show_id, plan.alloc_id),
        "layer_resource": (layer.layer_id,),
        "job_resource": (layer.job_id,),
        "folder_resource": (layer.folder_id,),
        "point": (layer.dept_id, layer.show_id),
    }


LOCK_HOSTS = """
SELECT pk_host, int_cores_idle, int_mem_idle, int_gpus_idle FROM host
 WHERE pk_host = ANY(%(k0)s::text[]) ORDER BY pk_host FOR NO KEY UPDATE
"""
# Per table: lock the named rows in primary-key order, returning the key columns, then what the
# booking's checks read (counters and caps; a layer's limits; a reservation's idle amounts).
LOCK_ROWS = {
    "subscription": """
SELECT s.pk_show, s.pk_alloc, s.int_cores, s.int_gpus, s.int_burst
  FROM subscription s JOIN unnest(%(k0)s::text[], %(k1)s::text[]) AS k(show, alloc)
    ON s.pk_show = k.show AND s.pk_alloc = k.alloc
 ORDER BY s.pk_subscription FOR NO KEY UPDATE OF s""",
    "layer_resource": """
SELECT r.pk_layer, l.int_cores_min, l.int_cores_max, l.int_gpus_max
  FROM layer_resource r JOIN layer l ON l.pk_layer = r.pk_layer
 WHERE r.pk_layer = ANY(%(k0)s::text[]) ORDER BY r.pk_layer_resource FOR NO KEY UPDATE OF r""",
    "job_resource": """
SELECT r.pk_job, r.int_cores, r.int_gpus, r.int_max_cores, r.int_max_gpus, j.str_state
  FROM job_resource r JOIN job j ON j.pk_job = r.pk_job
 WHERE r.pk_job = ANY(%(k0)s::text[]) ORDER BY r.pk_job_resource FOR NO KEY UPDATE OF r""",
    "host_local": """
SELECT hl.pk_host, hl.pk_job, hl.int_cores_idle, hl.int_mem_idle, hl.int_gpus_idle
  FROM host_local hl JOIN unnest(%(k0)s::text[], %(k1)s::text[]) AS k(host, job)
    ON hl.pk_host = k.host AND hl.pk_job = k.job
 ORDER BY hl.pk_host_local FOR NO KEY UPDATE OF hl""",
    "folder_resource": """
SELECT r.pk_folder, r.int_cores, r.int_gpus, r.int_max_cores, r.int_max_gpus FROM folder_resource r
 WHERE r.pk_folder = ANY(%(k0)s::text[]) ORDER BY r.pk_folder_resource FOR NO KEY UPDATE OF r""",
    "point": """
SELECT pt.pk_dept, pt.pk_show FROM point pt JOIN unnest(%(k0)s::text[], %(k1)s::text[]) AS k(dept, show)
    ON pt.pk_dept = k.dept AND pt.pk_show = k.show
 ORDER BY pt.pk_point FOR NO KEY UPDATE OF pt""",
}
KEY_COLUMNS = {
    "subscription": ("pk_show", "pk_alloc"),
    "layer_resource": ("pk_layer",),
    "job_resource": ("pk_job",),
    "host_local": ("pk_host", "pk_job"),
    "folder_resource": ("pk_folder",),
    "point": ("pk_dept", "pk_show"),
}


def _where(*, table: str) -> str:
    return " AND ".join(f"{column} = %(k{i})s" for i, column in enumerate(KEY_COLUMNS[table]))


# A booking's one UPDATE per row. subscription and job_resource carry Cuebot's triggers
# (verify_subscription, verify_job_resources), which refuse a raise of the counter past a cap the
# same UPDATE leaves unchanged: Cuebot moves the cap up by the delta in the adding statement and
# back down in a second one (the cap-neutral pair), so the trigger never judges the booking;
# Maestro's own checks (under the row locks, above) are what keep the caps.
ADD = {
    "subscription": (
        "UPDATE subscription SET int_burst = int_burst + %(cores)s, int_cores = int_cores + %(cores)s, "
        "int_gpus = int_gpus + %(gpus)s WHERE " + _where(table="subscription"),
        "UPDATE subscription SET int_burst = int_burst - %(cores)s WHERE " + _where(table="subscription"),
    ),
    "layer_resource": (
        "UPDATE layer_resource SET int_cores = int_cores + %(cores)s, int_gpus = int_gpus + %(gpus)s WHERE "
        + _where(table="layer_resource"),
        None,
    ),
    "job_resource": (
        "UPDATE job_resource SET int_max_cores = int_max_cores + %(cores)s, int_max_gpus = int_max_gpus + %(gpus)s, "
        "int_cores = int_cores + %(cores)s, int_gpus = int_gpus + %(gpus)s, "
        "int_local_cores = int_local_cores + %(local_cores)s, int_local_gpus = int_local_gpus + %(local_gpus)s "
        "WHERE " + _where(table="job_resource"),
        "UPDATE job_resource SET int_max_cores = int_max_cores - %(cores)s, int_max_gpus = int_max_gpus - %(gpus)s "
        "WHERE " + _where(table="job_resource"),
    ),
    "host_local": (
        "UPDATE host_local SET int_cores_idle = int_cores_idle - %(cores)s, int_mem_idle = int_mem_idle - %(mem)s, "
        "int_gpus_idle = int_gpus_idle - %(gpus)s WHERE " + _where(table="host_local"),
        None,
    ),
    "folder_resource": (
        "UPDATE folder_resource SET int_cores = int_cores + %(cores)s, int_gpus = int_gpus + %(gpus)s WHERE "
        + _where(table="folder_resource"),
        None,
    ),
    "point": (
        "UPDATE point SET int_cores = int_cores + %(cores)s, int_gpus = int_gpus + %(gpus)s WHERE "
        + _where(table="point"),
        None,
    ),
}
CLAIM_HOST = """
UPDATE host SET int_cores_idle = int_cores_idle - %(cores)s, int_mem_idle = int_mem_idle - %(mem)s,
                int_gpus_idle = int_gpus_idle - %(gpus)s
 WHERE pk_host = %(host)s
"""
INSERT_PROC = """
INSERT INTO proc (pk_proc, pk_host, pk_job, pk_show, pk_layer, pk_frame, int_cores_reserved, int_gpus_reserved,
                  int_mem_reserved, int_gpu_mem_reserved, b_local, b_unbooked, ts_booked, ts_ping)
VALUES (%(proc)s, %(host)s, %(job)s, %(show)s, %(layer)s, %(frame)s, %(cores)s, %(gpus)s, %(mem)s, 0, %(local)s,
        false, now(), now())
"""


def _lock(*, cursor, sql: str, keys: Iterable[tuple[str, ...]], width: int) -> list[tuple]:
    ordered = sorted(set(keys))
    if not ordered:
        return []
    cursor.execute(sql, {f"k{i}": [key[i] for key in ordered] for i in range(width)})
    return cursor.fetchall()


@dataclass
class ChunkOutcome:
    booked: list[Planned]
    rejected: dict[str, int]  # cap kind -> bookings turned away


def _fits(*, plan: Planned, host: list[int], rows: dict[str, dict[tuple, list]]) -> str | None:
    """The first cap (or the host's room) that turns this proc away, None if it fits; the rows
    are the locked ones as this chunk's earlier procs left them."""
    if host[0] < plan.cores or host[1] < plan.mem or host[2] < plan.gpus:
        return "host"
    keys = row_keys(plan=plan)
    job = rows["job_resource"].get(keys["job_resource"])
    if job is None or job[4] == "FINISHED":
        return "job finished"  # Maestro books no frame of a finished (killed) job
    cores_min, cores_max, gpus_max = rows["layer_resource"][keys["layer_resource"]]
    if plan.cores < cores_min or 0 < cores_max < plan.cores or 0 < gpus_max < plan.gpus:
        return "layer"
    if plan.local:
        reservation = rows["host_local"].get(keys["host_local"])
        if reservation is None or reservation[0] < plan.cores or reservation[1] < plan.mem:
            return "host"
        return "host" if reservation[2] < plan.gpus else None
    sub = rows["subscription"][keys["subscription"]]
    if sub[0] + plan.cores > sub[2]:
        return "subscription"
    folder = rows["folder_resource"][keys["folder_resource"]]
    if folder[2] >= 0 and folder[0] + plan.cores > folder[2]:
        return "folder cores"
    if plan.gpus and folder[3] >= 0 and folder[1] + plan.gpus > folder[3]:
        return "folder gpus"
    if job[0] + plan.cores > job[2]:
        return "job cores"
    if plan.gpus and job[1] + plan.gpus > job[3]:
        return "job gpus"
    return None


def _take(*, plan: Planned, host: list[int], rows: dict[str, dict[tuple, list]]) -> None:
    host[0] -= plan.cores
    host[1] -= plan.mem
    host[2] -= plan.gpus
    keys = row_keys(plan=plan)
    if plan.local:
        reservation = rows["host_local"][keys["host_local"]]
        reservation[0] -= plan.cores
        reservation[1] -= plan.mem
        reservation[2] -= plan.gpus
        return
    for table in ("subscription", "folder_resource", "job_resource"):
        row = rows[table][keys[table]]
        row[0] += plan.cores
        row[1] += plan.gpus


def book_chunk(*, cursor, plans: list[Planned], after_writes: Callable[..., None]) -> ChunkOutcome:
    """One host-aligned chunk of a tick, inside the caller's transaction: hosts and accounting
    rows locked in Cuebot's order, each proc checked against every cap under those locks, the
    procs that fit inserted with their frames, their hosts' idle taken down and each row's
    delta added with one UPDATE per row (the cap-neutral pair where a trigger guards the row).
    `after_writes` runs last, inside the transaction (the over-cap invariant reads there)."""
    hosts = {
        row[0]: list(row[1:])
        for row in _lock(cursor=cursor, sql=LOCK_HOSTS, keys=((p.host_id,) for p in plans), width=1)
    }
    wanted: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for plan in plans:
        for table, key in row_keys(plan=plan).items():
            wanted[table].add(key)
    rows: dict[str, dict[tuple, list]] = {}
    for table in LOCK_ORDER:
        width = len(KEY_COLUMNS[table])
        locked = _lock(cursor=cursor, sql=LOCK_ROWS[table], keys=wanted.get(table, ()), width=width)
        rows[table] = {tuple(row[:width]): list(row[width:]) for row in locked}
    booked, rejected = [], defaultdict(int)
    for plan in plans:
        turned_away = _fits(plan=plan, host=hosts[plan.host_id], rows=rows)
        if turned_away:
            rejected[turned_away] += 1
            continue
        _take(plan=plan, host=hosts[plan.host_id], rows=rows)
        booked.append(plan)
    if booked:
        _write(cursor=cursor, booked=booked)
        after_writes(booked=booked)
    return ChunkOutcome(booked=booked, rejected=dict(rejected))


def _write(*, cursor, booked: list[Planned]) -> None:
    for plan in sorted(booked, key=lambda p: p.proc_id):
        layer = plan.layer
        insert_running_frame(
            cursor=cursor, frame_id=plan.frame_id, layer_id=layer.layer_id, host_id=plan.host_id, cores=plan.cores
        )
        cursor.execute(
            INSERT_PROC,
            {
                "proc": plan.proc_id,
                "host": plan.host_id,
                "job": layer.job_id,
                "show": layer.show_id,
                "layer": layer.layer_id,
                "frame": plan.frame_id,
                "cores": plan.cores,
                "gpus": plan.gpus,
                "mem": plan.mem,
                "local": plan.local,
            },
        )
    per_host: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for plan in booked:
        totals = per_host[plan.host_id]
        totals[0] += plan.cores
        totals[1] += plan.mem
        totals[2] += plan.gpus
    for host_id in sorted(per_host):
        cores, mem, gpus = per_host[host_id]
        cursor.execute(CLAIM_HOST, {"host": host_id, "cores": cores, "mem": mem, "gpus": gpus})
    deltas = _deltas(procs=booked)
    for table in BOOKING_WRITES:
        for key in sorted(deltas[table]):
            add, restore = ADD[table]
            params = {f"k{i}": part for i, part in enumerate(key)} | deltas[table][key]
            cursor.execute(add, params)
            if restore is not None and (params["cores"] or params["gpus"]):
                cursor.execute(restore, params)


def _deltas(*, procs: Iterable[Planned]) -> dict[str, dict[tuple, dict[str, int]]]:
    """Per table and row: the amounts these procs move (added by a booking, taken off by a release)."""
    deltas: dict[str, dict[tuple, dict[str, int]]] = {
        table: defaultdict(lambda: {"cores": 0, "gpus": 0, "local_cores": 0, "local_gpus": 0, "mem": 0})
        for table in LOCK_ORDER
    }
    for plan in procs:
        for table, key in row_keys(plan=plan).items():
            amounts = deltas[table][key]
            if plan.local and table == "job_resource":
                amounts["local_cores"] += plan.cores
                amounts["local_gpus"] += plan.gpus
            else:
                amounts["cores"] += plan.cores
                amounts["gpus"] += plan.gpus
                amounts["mem"] += plan.mem
    return deltas


# --- Cuebot's release (ProcDaoJdbc.procDestroyed, batchDeleteVirtualProcs), beside the service's --

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
    + _where(table="subscription"),
    "layer_resource": "UPDATE layer_resource SET int_cores = int_cores - %(cores)s, int_gpus = int_gpus - %(gpus)s "
    "WHERE " + _where(table="layer_resource"),
    "job_resource": "UPDATE job_resource SET int_cores = int_cores - %(cores)s, int_gpus = int_gpus - %(gpus)s, "
    "int_local_cores = int_local_cores - %(local_cores)s, int_local_gpus = int_local_gpus - %(local_gpus)s WHERE "
    + _where(table="job_resource"),
    "host_local": "UPDATE host_local SET int_cores_idle = int_cores_idle + %(cores)s, "
    "int_mem_idle = int_mem_idle + %(mem)s, int_gpus_idle = int_gpus_idle + %(gpus)s WHERE "
    + _where(table="host_local"),
    "folder_resource": "UPDATE folder_resource SET int_cores = int_cores - %(cores)s, "
    "int_gpus = int_gpus - %(gpus)s WHERE " + _where(table="folder_resource"),
    "point": "UPDATE point SET int_cores = int_cores - %(cores)s, int_gpus = int_gpus - %(gpus)s WHERE "
    + _where(table="point"),
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
    cursor.execute(JOBS_OF, {"ids": sorted({row[3] for row in gone})})
    jobs = {job_id: (folder_id, dept_id, show_id) for job_id, folder_id, dept_id, show_id in cursor.fetchall()}
    released = [
        Planned(
            host_id=row[1],
            alloc_id=alloc_of[row[1]],
            layer=LayerRef(
                show_id=row[2],
                folder_id=jobs[row[3]][0],
                dept_id=jobs[row[3]][1],
                job_id=row[3],
                layer_id=row[4],
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
    deltas = _deltas(procs=released)
    for table in LOCK_ORDER:
        if not deltas[table]:
            continue
        # Rows locked in primary-key order first, as every other writer locks them: updated in
        # the order of their keys' values instead, two rows of a batch can be taken in the
        # opposite order to a booking's (subscriptions sort differently by (show, alloc)).
        _lock(cursor=cursor, sql=LOCK_ROWS[table], keys=deltas[table], width=len(KEY_COLUMNS[table]))
        for key in sorted(deltas[table]):
            params = {f"k{i}": part for i, part in enumerate(key)} | deltas[table][key]
            cursor.execute(TAKE_OFF[table], params)
        after_table(table=table)
    return [row[0] for row in gone]
