"""Cuebot's accounting rows in the Maestro era, as its booking and its release both take them:
the tables in Cuebot's lock order (proc rows, host rows, then subscription, layer_resource,
job_resource, host_local, folder_resource, point; within a table, rows in primary-key order),
the rows a proc counts in by Cuebot's counting rules, and the amounts procs move on each.
Written from the documented order (docs/eras.md, docs/cuebot-schema.md, docs/architecture.md),
no code copied."""

import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from simulator.farm import PROC_MEM_KB, LayerRef

# Cuebot's table order for the accounting rows a booking or a release changes.
LOCK_ORDER = ("subscription", "layer_resource", "job_resource", "host_local", "folder_resource", "point")
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


def where(*, table: str) -> str:
    return " AND ".join(f"{column} = %(k{i})s" for i, column in enumerate(KEY_COLUMNS[table]))


def lock_rows(*, cursor, sql: str, keys: Iterable[tuple[str, ...]], width: int) -> list[tuple]:
    ordered = sorted(set(keys))
    if not ordered:
        return []
    cursor.execute(sql, {f"k{i}": [key[i] for key in ordered] for i in range(width)})
    return cursor.fetchall()


def deltas(*, procs: Iterable[Planned]) -> dict[str, dict[tuple, dict[str, int]]]:
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
