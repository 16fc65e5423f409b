"""Cuebot's booking in the Maestro era: one host-aligned chunk of a Maestro tick, its hosts
and accounting rows locked in Cuebot's order, each proc checked against every cap under those
locks, then inserted and added to the five tables. A booking's procs are new rows no other
transaction can lock, so it locks its hosts first, then every accounting row it will change
(reading the caps and counters there), and only then inserts its procs: the cap checks see the
counters as they are under the lock, so no two chunks can book one cap past its limit."""

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from simulator.farm_builder import insert_running_frame
from simulator.workers.maestro.cuebot_rows import (
    KEY_COLUMNS,
    LOCK_ORDER,
    LOCK_ROWS,
    Planned,
    deltas,
    lock_rows,
    row_keys,
    where,
)

# The tables a booking adds to, in Cuebot's order: the one seam the broken "booking skips the
# layer" variant replaces (tests/simulator/test_maestro_era.py).
BOOKING_WRITES = LOCK_ORDER
LOCK_HOSTS = """
SELECT pk_host, int_cores_idle, int_mem_idle, int_gpus_idle FROM host
 WHERE pk_host = ANY(%(k0)s::text[]) ORDER BY pk_host FOR NO KEY UPDATE
"""

# A booking's one UPDATE per row. subscription and job_resource carry Cuebot's triggers
# (verify_subscription, verify_job_resources), which refuse a raise of the counter past a cap the
# same UPDATE leaves unchanged: Cuebot moves the cap up by the delta in the adding statement and
# back down in a second one (the cap-neutral pair), so the trigger never judges the booking;
# Maestro's own checks (under the row locks, above) are what keep the caps.
ADD = {
    "subscription": (
        "UPDATE subscription SET int_burst = int_burst + %(cores)s, int_cores = int_cores + %(cores)s, "
        "int_gpus = int_gpus + %(gpus)s WHERE " + where(table="subscription"),
        "UPDATE subscription SET int_burst = int_burst - %(cores)s WHERE " + where(table="subscription"),
    ),
    "layer_resource": (
        "UPDATE layer_resource SET int_cores = int_cores + %(cores)s, int_gpus = int_gpus + %(gpus)s WHERE "
        + where(table="layer_resource"),
        None,
    ),
    "job_resource": (
        "UPDATE job_resource SET int_max_cores = int_max_cores + %(cores)s, int_max_gpus = int_max_gpus + %(gpus)s, "
        "int_cores = int_cores + %(cores)s, int_gpus = int_gpus + %(gpus)s, "
        "int_local_cores = int_local_cores + %(local_cores)s, int_local_gpus = int_local_gpus + %(local_gpus)s "
        "WHERE " + where(table="job_resource"),
        "UPDATE job_resource SET int_max_cores = int_max_cores - %(cores)s, int_max_gpus = int_max_gpus - %(gpus)s "
        "WHERE " + where(table="job_resource"),
    ),
    "host_local": (
        "UPDATE host_local SET int_cores_idle = int_cores_idle - %(cores)s, int_mem_idle = int_mem_idle - %(mem)s, "
        "int_gpus_idle = int_gpus_idle - %(gpus)s WHERE " + where(table="host_local"),
        None,
    ),
    "folder_resource": (
        "UPDATE folder_resource SET int_cores = int_cores + %(cores)s, int_gpus = int_gpus + %(gpus)s WHERE "
        + where(table="folder_resource"),
        None,
    ),
    "point": (
        "UPDATE point SET int_cores = int_cores + %(cores)s, int_gpus = int_gpus + %(gpus)s WHERE "
        + where(table="point"),
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


@dataclass
class ChunkOutcome:
    booked: list[Planned]
    rejected: dict[str, int]  # cap kind -> bookings turned away


def fits(*, plan: Planned, host: list[int], rows: dict[str, dict[tuple, list]]) -> str | None:
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


def take(*, plan: Planned, host: list[int], rows: dict[str, dict[tuple, list]]) -> None:
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
        for row in lock_rows(cursor=cursor, sql=LOCK_HOSTS, keys=((p.host_id,) for p in plans), width=1)
    }
    wanted: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for plan in plans:
        for table, key in row_keys(plan=plan).items():
            wanted[table].add(key)
    rows: dict[str, dict[tuple, list]] = {}
    for table in LOCK_ORDER:
        width = len(KEY_COLUMNS[table])
        locked = lock_rows(cursor=cursor, sql=LOCK_ROWS[table], keys=wanted.get(table, ()), width=width)
        rows[table] = {tuple(row[:width]): list(row[width:]) for row in locked}
    booked, rejected = [], defaultdict(int)
    for plan in plans:
        turned_away = fits(plan=plan, host=hosts[plan.host_id], rows=rows)
        if turned_away:
            rejected[turned_away] += 1
            continue
        take(plan=plan, host=hosts[plan.host_id], rows=rows)
        booked.append(plan)
    if booked:
        write(cursor=cursor, booked=booked)
        after_writes(booked=booked)
    return ChunkOutcome(booked=booked, rejected=dict(rejected))


def write(*, cursor, booked: list[Planned]) -> None:
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
    claim_hosts(cursor=cursor, booked=booked)
    add_to_rows(cursor=cursor, booked=booked)


def claim_hosts(*, cursor, booked: list[Planned]) -> None:
    per_host: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for plan in booked:
        totals = per_host[plan.host_id]
        totals[0] += plan.cores
        totals[1] += plan.mem
        totals[2] += plan.gpus
    for host_id in sorted(per_host):
        cores, mem, gpus = per_host[host_id]
        cursor.execute(CLAIM_HOST, {"host": host_id, "cores": cores, "mem": mem, "gpus": gpus})


def add_to_rows(*, cursor, booked: list[Planned]) -> None:
    moves = deltas(procs=booked)
    for table in BOOKING_WRITES:
        for key in sorted(moves[table]):
            add, restore = ADD[table]
            params = {f"k{i}": part for i, part in enumerate(key)} | moves[table][key]
            cursor.execute(add, params)
            if restore is not None and (params["cores"] or params["gpus"]):
                cursor.execute(restore, params)
