"""The farm the simulator plays on: its own (names starting `sim`) or the existing one.

A run on its own farm first removes the previous simulated farm (PostgreSQL rows and
their acct:* keys) and builds a new one with fresh uuid4 ids, so no two runs share a
key and the demo farm is never touched. Limits are tight on purpose: every cap a booking
is checked against binds within seconds of a default run (the subscription burst, the
folder's and the job's max cores and max GPUs, the layer's per-frame cores and GPUs),
so a scheduler that ignores any one of them books past it and the over-cap invariant
sees it, on the farm every run uses, not only on one built for a test.
"""

import random
from collections import defaultdict
from dataclasses import dataclass, field

from django.core.cache import cache
from django.db import connection, transaction

from accounting.live import keys
from accounting.models import FolderResource, JobResource, Point, Proc, Subscription
from accounting.reconcile.recompute import recompute_pg_accounting
from cuebot_acct.redis_factory import accounting_redis
from shows.models import (
    Alloc,
    Dept,
    Facility,
    Folder,
    Frame,
    Host,
    Job,
    Layer,
    Show,
    new_pk,
)
from shows.selectors import flag_cache_key
from simulator import service_era
from simulator.farm_builder import (
    ADD_HOST_STATS,
    DEPARTMENTS,
    HOST_IDLE,
    KB_PER_GB,
    PROC_CORES,
    frame_number,
    new_layer,
    refuse_foreign_shows,
    refuse_without_cuebots_rights,
)
from simulator.invariants import farm_keys

PREFIX = "sim"
HOST_CORES = 3200  # centicores
HOST_MEM_KB = 256 * KB_PER_GB
PROC_MEM_KB = 2 * KB_PER_GB
GPU_HOST_GPUS = 8
INITIAL_FILL = 0.3  # share of each subscription's burst booked before the run starts
# Each allocation's bursts add up to this share of its cores. Tight on the general
# allocation: a managed show reaches its burst there long before its jobs and folders are
# full. Oversubscribed on the GPU allocation, as render farms are: there folders, jobs and
# hosts bind first.
BURST_SHARE = {"general": 0.4, "gpu": 2.0}
# Every job's two layers and their per-frame limits (layer.int_cores_max in centicores,
# int_gpus_min, int_gpus_max): a render frame takes at most 2 cores and no GPU, a GPU frame
# 1 or 2 GPUs. The bookers draw frame sizes beyond both, so both refuse bookings.
LAYER_KINDS = {"render": (200, 0, 0), "gpu": (0, 1, 2)}
JOB_MAX_CORES = (600, 1000, 1500, 2000, 3000)  # centicores
JOB_MAX_GPUS = (1, 2, 3)
# A folder other than lighting is capped at this share of its jobs' caps summed, cores and
# GPUs, so it fills before its jobs do; lighting's has no cap, so its jobs fill up to theirs.
FOLDER_SHARE_OF_JOBS = 0.5
UNCAPPED_FOLDER = f"{PREFIX}-lighting"


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


def remove_sim_farm() -> None:
    """Delete the previous simulated farm and its Redis keys. Other rows are untouched."""
    show_ids = sim_show_ids()
    facility_ids = list(Facility.objects.filter(str_name=PREFIX).values_list("pk", flat=True))
    alloc_ids = list(Alloc.objects.filter(facility_id__in=facility_ids).values_list("pk", flat=True))
    dept_ids = list(Dept.objects.filter(str_name__startswith=f"{PREFIX}-").values_list("pk", flat=True))
    job_rows = list(Job.objects.filter(show_id__in=show_ids).values_list("pk", "folder_id"))
    layer_ids = list(Layer.objects.filter(job_id__in=[j for j, _ in job_rows]).values_list("pk", flat=True))
    redis_keys = (
        [keys.sub(show_id=s, alloc_id=a) for s in show_ids for a in alloc_ids]
        + [keys.point(dept_id=d, show_id=s) for s in show_ids for d in dept_ids]
        + [keys.folder(folder_id=f) for f in {f for _, f in job_rows}]
        + [keys.job(job_id=j) for j, _ in job_rows]
        + [keys.layer(layer_id=l) for l in layer_ids]
    )
    with transaction.atomic(), connection.cursor() as cursor:
        params = {"shows": show_ids, "allocs": alloc_ids, "depts": dept_ids, "facilities": facility_ids}
        for statement in (
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
        ):
            cursor.execute(statement, params)
    if service_era.keeps_accounting_redis():  # only the Redis era has the scheduler's keys to clear
        client = accounting_redis()
        for start in range(0, len(redis_keys), 1000):
            client.delete(*redis_keys[start : start + 1000])
    cache.delete_many([flag_cache_key(show_id=s) for s in show_ids])


def build_sim_farm(*, shows: int, hosts: int, jobs: int, rng: random.Random) -> SimFarm:
    """A fresh simulated farm: half the shows scheduler-managed, procs at INITIAL_FILL of burst."""
    refuse_without_cuebots_rights(command="simulate_farm")
    refuse_foreign_shows(own_show_ids=sim_show_ids(), command="simulate_farm")
    remove_sim_farm()
    with transaction.atomic():
        facility = Facility.objects.create(str_name=PREFIX)
        allocs = [
            Alloc.objects.create(str_name=f"{PREFIX}.{tag}", facility=facility, str_tag=tag, b_default=tag == "general")
            for tag in ("general", "gpu")
        ]
        depts = Dept.objects.bulk_create([Dept(str_name=f"{PREFIX}-{name}") for name in DEPARTMENTS])
        show_rows = Show.objects.bulk_create(
            [Show(str_name=f"{PREFIX}-{i + 1:02d}", b_scheduler_managed=i % 2 == 0) for i in range(shows)]
        )
        host_rows = Host.objects.bulk_create(
            [
                Host(
                    alloc=allocs[h % 2],
                    str_name=f"{PREFIX}-host-{h + 1:05d}",
                    str_lock_state="OPEN",
                    int_cores=HOST_CORES,
                    int_cores_idle=HOST_CORES,
                    int_mem=HOST_MEM_KB,
                    int_mem_idle=HOST_MEM_KB,
                    int_gpus=GPU_HOST_GPUS if h % 2 else 0,
                    int_gpus_idle=GPU_HOST_GPUS if h % 2 else 0,
                )
                for h in range(hosts)
            ],
            batch_size=2000,
        )
        with connection.cursor() as cursor:
            cursor.execute(ADD_HOST_STATS, {"hosts": [h.id for h in host_rows]})
        hosts_per_alloc = {a.id: sum(1 for h in host_rows if h.alloc_id == a.id) for a in allocs}
        burst = {
            (s.id, a.id): max(
                400, int(BURST_SHARE[a.str_tag] * hosts_per_alloc[a.id] * HOST_CORES / shows) // 100 * 100
            )
            for s in show_rows
            for a in allocs
        }
        Subscription.objects.bulk_create(
            [
                Subscription(show=s, alloc=a, int_size=burst[s.id, a.id] * 2 // 3, int_burst=burst[s.id, a.id])
                for s in show_rows
                for a in allocs
            ]
        )
        Point.objects.bulk_create([Point(show=s, dept=d) for s in show_rows for d in depts])
        folders = Folder.objects.bulk_create(
            [
                Folder(show=s, dept=d, str_name=d.str_name, b_default=d.str_name.endswith("lighting"))
                for s in show_rows
                for d in depts
            ]
        )
        job_rows = []
        for n in range(max(jobs, len(folders))):
            f = folders[n % len(folders)]
            job_rows.append(
                Job(
                    folder=f,
                    show_id=f.show_id,
                    dept_id=f.dept_id,
                    facility=facility,
                    str_state="PENDING",
                    str_name=f"{PREFIX}-{n + 1:06d}-{f.str_name}",
                    str_visible_name=f"{PREFIX}-{n + 1:06d}-{f.str_name}",
                    str_shot=f"sh{n % 100:03d}",
                    str_user="sim",
                )
            )
        Job.objects.bulk_create(job_rows, batch_size=2000)
        job_caps = {j.id: Caps(cores=rng.choice(JOB_MAX_CORES), gpus=rng.choice(JOB_MAX_GPUS)) for j in job_rows}
        JobResource.objects.bulk_update(
            [
                JobResource(id=j.id, job_id=j.id, int_max_cores=job_caps[j.id].cores, int_max_gpus=job_caps[j.id].gpus)
                for j in job_rows
            ],
            ["int_max_cores", "int_max_gpus"],
            batch_size=2000,
        )
        folder_caps = {f.id: folder_cap(folder=f, jobs=job_rows, job_caps=job_caps) for f in folders}
        # Cuebot's trigger made each folder's resource row (pk = pk_folder); set its caps.
        FolderResource.objects.bulk_update(
            [
                FolderResource(
                    id=f.id, folder_id=f.id, int_max_cores=folder_caps[f.id].cores, int_max_gpus=folder_caps[f.id].gpus
                )
                for f in folders
            ],
            ["int_max_cores", "int_max_gpus"],
        )
        layer_rows = Layer.objects.bulk_create(
            [sim_layer(job_id=j.id, kind=kind) for j in job_rows for kind in LAYER_KINDS],
            batch_size=2000,
        )

        job_by_id = {j.id: j for j in job_rows}
        layers_by_show: dict[str, list[LayerRef]] = defaultdict(list)
        for l in layer_rows:
            j = job_by_id[l.job_id]
            layers_by_show[j.show_id].append(
                LayerRef(
                    show_id=j.show_id,
                    folder_id=j.folder_id,
                    dept_id=j.dept_id,
                    job_id=j.id,
                    layer_id=l.id,
                    cores_max=l.int_cores_max,
                    gpus_min=l.int_gpus_min,
                    gpus_max=l.int_gpus_max,
                )
            )
        add_initial_procs(
            rng=rng,
            layers_by_show=layers_by_show,
            hosts=host_rows,
            burst=burst,
            caps={**folder_caps, **job_caps},
        )
        with connection.cursor() as cursor:
            cursor.execute(HOST_IDLE, {"hosts": [h.id for h in host_rows]})
        recompute_pg_accounting(show_ids=[s.id for s in show_rows])
    return SimFarm(
        show_ids=[s.id for s in show_rows],
        layers_by_show=dict(layers_by_show),
        host_ids=[h.id for h in host_rows],
        gpu_host_ids={h.id for h in host_rows if h.int_gpus},
    )


@dataclass(frozen=True)
class Caps:
    """A folder's or a job's max cores (centicores) and max GPUs; -1 is no cap (a folder's)."""

    cores: int
    gpus: int

    def admits(self, *, cores: int, gpus: int) -> bool:
        return (self.cores < 0 or cores <= self.cores) and (self.gpus < 0 or gpus <= self.gpus)


def folder_cap(*, folder: Folder, jobs: list[Job], job_caps: dict[str, Caps]) -> Caps:
    """No cap on UNCAPPED_FOLDER; on the others, FOLDER_SHARE_OF_JOBS of their jobs' caps."""
    if folder.str_name == UNCAPPED_FOLDER:
        return Caps(cores=-1, gpus=-1)
    own = [job_caps[j.id] for j in jobs if j.folder_id == folder.id]
    return Caps(
        cores=max(100, int(FOLDER_SHARE_OF_JOBS * sum(c.cores for c in own)) // 100 * 100),
        gpus=max(1, int(FOLDER_SHARE_OF_JOBS * sum(c.gpus for c in own))),
    )


def sim_layer(*, job_id: str, kind: str) -> Layer:
    layer = new_layer(job_id=job_id, name=kind, mem_min=PROC_MEM_KB)
    layer.int_cores_max, layer.int_gpus_min, layer.int_gpus_max = LAYER_KINDS[kind]
    return layer


def add_initial_procs(
    *,
    rng: random.Random,
    layers_by_show: dict[str, list[LayerRef]],
    hosts: list[Host],
    burst: dict[tuple[str, str], int],
    caps: dict[str, Caps],
) -> None:
    """Running procs for every show (Cuebot-managed ones too), each within every cap (`caps`
    by folder and job id) and its layer's frame limits: a GPU layer's frame takes its minimum."""
    booked: dict[object, list[int]] = defaultdict(lambda: [0, 0])  # centicores, GPUs
    idle = {h.id: [h.int_cores, h.int_gpus] for h in hosts}
    frames, procs = [], []
    for show_id, layers in layers_by_show.items():
        target = INITIAL_FILL * sum(v for (s, _), v in burst.items() if s == show_id)
        attempts = 0
        while booked[show_id][0] < target and attempts < 50 * len(layers):
            attempts += 1
            layer, host, cores = rng.choice(layers), rng.choice(hosts), rng.choice(PROC_CORES)
            gpus = layer.gpus_min
            sub = (show_id, host.alloc_id)
            if 0 < layer.cores_max < cores or idle[host.id][0] < cores or idle[host.id][1] < gpus:
                continue
            # Whole cores per proc, as the accounting counts them against a burst or cap.
            whole = cores // 100 * 100
            if booked[sub][0] + whole > burst[sub]:
                continue
            if not all(
                caps[k].admits(cores=booked[k][0] + whole, gpus=booked[k][1] + gpus)
                for k in (layer.folder_id, layer.job_id)
            ):
                continue
            for key in (sub, layer.folder_id, layer.job_id, show_id):
                booked[key][0] += whole
                booked[key][1] += gpus
            idle[host.id][0] -= cores
            idle[host.id][1] -= gpus
            frame_id = new_pk()
            frames.append(
                Frame(
                    id=frame_id,
                    layer_id=layer.layer_id,
                    job_id=layer.job_id,
                    str_name=f"{frame_number(frame_id):04d}-initial",
                    str_state="RUNNING",
                    int_number=frame_number(frame_id),
                    int_layer_order=0,
                    int_cores=cores,
                    str_host=host.str_name,
                )
            )
            procs.append(
                Proc(
                    host_id=host.id,
                    job_id=layer.job_id,
                    show_id=show_id,
                    layer_id=layer.layer_id,
                    frame_id=frame_id,
                    int_cores_reserved=cores,
                    int_gpus_reserved=gpus,
                    int_mem_reserved=PROC_MEM_KB,
                )
            )
    Frame.objects.bulk_create(frames, batch_size=2000)
    Proc.objects.bulk_create(procs, batch_size=2000)


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
