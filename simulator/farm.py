"""The farm the simulator plays on, its own (names starting `sim`, built by simulator.own_farm)
or the existing one: what a booking needs of it, its removal, and a job killed as OpenCue kills
one."""

import random
from collections import defaultdict
from dataclasses import dataclass, field

from django.core.cache import cache
from django.db import connection, transaction

from accounting.live import keys
from infra.era import era
from infra.redis_factory import accounting_redis
from shows.models import (
    Alloc,
    Dept,
    Facility,
    Host,
    Job,
    Layer,
    Show,
)
from shows.selectors import flag_cache_key
from simulator.farm_builder import KB_PER_GB
from simulator.farm_rules import refuse_without_cuebots_rights
from simulator.invariants import farm_keys

PREFIX = "sim"
PROC_MEM_KB = 2 * KB_PER_GB


@dataclass(frozen=True)
class LayerRef:
    """Everything a booking needs besides the host: the ids of its five keys."""

    show_id: str
    folder_id: str
    dept_id: str
    job_id: str
    layer_id: str
    # The layer's per-frame limits (no cap when 0): the scheduler sizes a frame within them.
    cores_max: int = 0  # centicores
    gpus_min: int = 0
    gpus_max: int = 0


@dataclass
class SimFarm:
    show_ids: list[str]
    layers_by_show: dict[str, list[LayerRef]]
    host_ids: list[str]
    gpu_host_ids: set[str] = field(default_factory=set)
    own: bool = True  # built by the simulator (False: --existing)


def sim_show_ids() -> list[str]:
    return list(Show.objects.filter(str_name__startswith=f"{PREFIX}-").values_list("pk", flat=True))


SHOW_KEY_PREFIXES = ("acct:sub:", "acct:folder:", "acct:job:", "acct:layer:", "acct:point:")


def foreign_redis_keys(*, own_show_ids: list[str]) -> list[str]:
    """The accounting Redis's per-show hashes that belong to none of `own_show_ids` (another
    farm's, or another service's sharing this Redis): the redis-restart fault would flush them."""
    own = set(farm_keys(show_ids=own_show_ids))
    client = accounting_redis()
    return sorted(
        key
        for key in (k.decode() if isinstance(k, bytes) else k for k in client.scan_iter(match="acct:*", count=1000))
        if key.startswith(SHOW_KEY_PREFIXES) and key not in own
    )


# The previous simulated farm's rows, children first.
REMOVE_STATEMENTS = (
    "DELETE FROM proc WHERE pk_show = ANY(%(shows)s) OR pk_host IN (SELECT pk_host FROM host WHERE pk_alloc = ANY(%(allocs)s))",
    "DELETE FROM host_local WHERE pk_job IN (SELECT pk_job FROM job WHERE pk_show = ANY(%(shows)s))",
    "DELETE FROM frame WHERE pk_job IN (SELECT pk_job FROM job WHERE pk_show = ANY(%(shows)s))",
    "DELETE FROM layer_resource WHERE pk_job IN (SELECT pk_job FROM job WHERE pk_show = ANY(%(shows)s))",
    "DELETE FROM layer WHERE pk_job IN (SELECT pk_job FROM job WHERE pk_show = ANY(%(shows)s))",
    "DELETE FROM job_resource WHERE pk_job IN (SELECT pk_job FROM job WHERE pk_show = ANY(%(shows)s))",
    "DELETE FROM job WHERE pk_show = ANY(%(shows)s)",
    "DELETE FROM folder_resource WHERE pk_folder IN (SELECT pk_folder FROM folder WHERE pk_show = ANY(%(shows)s))",
    "DELETE FROM folder WHERE pk_show = ANY(%(shows)s)",
    "DELETE FROM point WHERE pk_show = ANY(%(shows)s)",
    "DELETE FROM subscription WHERE pk_show = ANY(%(shows)s) OR pk_alloc = ANY(%(allocs)s)",
    "DELETE FROM show WHERE pk_show = ANY(%(shows)s)",
    "DELETE FROM host WHERE pk_alloc = ANY(%(allocs)s)",  # its host_stat goes with it (trigger)
    "DELETE FROM alloc WHERE pk_alloc = ANY(%(allocs)s)",
    "DELETE FROM dept WHERE pk_dept = ANY(%(depts)s)",
    "DELETE FROM facility WHERE pk_facility = ANY(%(facilities)s)",
)


def remove_sim_farm() -> None:
    """Delete the previous simulated farm and its Redis keys. Other rows are untouched."""
    show_ids = sim_show_ids()
    facility_ids = list(Facility.objects.filter(str_name=PREFIX).values_list("pk", flat=True))
    alloc_ids = list(Alloc.objects.filter(facility_id__in=facility_ids).values_list("pk", flat=True))
    dept_ids = list(Dept.objects.filter(str_name__startswith=f"{PREFIX}-").values_list("pk", flat=True))
    redis_keys = sim_farm_keys(show_ids=show_ids, alloc_ids=alloc_ids, dept_ids=dept_ids)
    with transaction.atomic(), connection.cursor() as cursor:
        params = {"shows": show_ids, "allocs": alloc_ids, "depts": dept_ids, "facilities": facility_ids}
        for statement in REMOVE_STATEMENTS:
            cursor.execute(statement, params)
    if era().keeps_redis:  # only the Redis era has the scheduler's keys to clear
        client = accounting_redis()
        for start in range(0, len(redis_keys), 1000):
            client.delete(*redis_keys[start : start + 1000])
    cache.delete_many([flag_cache_key(show_id=s) for s in show_ids])


def sim_farm_keys(*, show_ids: list[str], alloc_ids: list[str], dept_ids: list[str]) -> list[str]:
    """The acct:* keys of the simulated farm's shows, enumerated before its rows go."""
    job_rows = list(Job.objects.filter(show_id__in=show_ids).values_list("pk", "folder_id"))
    layer_ids = list(Layer.objects.filter(job_id__in=[j for j, _ in job_rows]).values_list("pk", flat=True))
    return (
        [keys.sub(show_id=s, alloc_id=a) for s in show_ids for a in alloc_ids]
        + [keys.point(dept_id=d, show_id=s) for s in show_ids for d in dept_ids]
        + [keys.folder(folder_id=f) for f in {f for _, f in job_rows}]
        + [keys.job(job_id=j) for j, _ in job_rows]
        + [keys.layer(layer_id=l) for l in layer_ids]
    )


def load_existing_farm() -> SimFarm:
    """The farm already in the database: every show, every layer of a non-FINISHED job, every host."""
    refuse_without_cuebots_rights(command="simulate_farm")  # its bookings insert procs and frames
    layers_by_show: dict[str, list[LayerRef]] = defaultdict(list)
    rows = Layer.objects.exclude(job__str_state="FINISHED").values_list(
        "pk",
        "job_id",
        "job__show_id",
        "job__folder_id",
        "job__dept_id",
        "int_cores_max",
        "int_gpus_min",
        "int_gpus_max",
    )
    for layer_id, job_id, show_id, folder_id, dept_id, cores_max, gpus_min, gpus_max in rows.iterator(chunk_size=5000):
        layers_by_show[show_id].append(
            LayerRef(
                show_id=show_id,
                folder_id=folder_id,
                dept_id=dept_id,
                job_id=job_id,
                layer_id=layer_id,
                cores_max=cores_max,
                gpus_min=gpus_min,
                gpus_max=gpus_max,
            )
        )
    hosts = list(Host.objects.values_list("pk", "int_gpus"))
    return SimFarm(
        show_ids=list(Show.objects.values_list("pk", flat=True)),
        layers_by_show=dict(layers_by_show),
        host_ids=[h for h, _ in hosts],
        gpu_host_ids={h for h, g in hosts if g},
        own=False,
    )


# A job OpenCue could kill: not FINISHED, with procs still running; only the scheduler's own
# shows where a model books only those (the NOTIFY era's).
KILLABLE = """
SELECT j.pk_job FROM job j JOIN show s ON s.pk_show = j.pk_show
 WHERE j.pk_show = ANY(%(shows)s) AND (s.b_scheduler_managed OR NOT %(managed_only)s) AND j.str_state <> 'FINISHED'
   AND EXISTS (SELECT 1 FROM proc p WHERE p.pk_job = j.pk_job) ORDER BY j.pk_job
"""


def finish_a_job(*, cursor, show_ids: list[str], rng: random.Random, managed_only: bool = False) -> str | None:
    """What OpenCue does first when it kills a job: the job FINISHED and its name freed, its procs
    still running (they go later). The job killed; None when no job with procs is left."""
    cursor.execute(KILLABLE, {"shows": show_ids, "managed_only": managed_only})
    candidates = [row[0] for row in cursor.fetchall()]
    if not candidates:
        return None
    job_id = rng.choice(candidates)
    cursor.execute(
        "UPDATE job SET str_state = 'FINISHED', str_visible_name = NULL, ts_stopped = now() WHERE pk_job = %s",
        [job_id],
    )
    return job_id
