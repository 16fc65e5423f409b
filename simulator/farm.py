"""The farm the simulator plays on: its own (names starting `sim`) or the existing one.

A run on its own farm first removes the previous simulated farm (PostgreSQL rows and
their acct:* keys) and builds a new one with fresh uuid4 ids, so no two runs share a
key and the demo farm is never touched. Limits are tight on purpose: subscriptions
bind before the hosts fill up, and job and folder caps bind often, so bookings are
rejected by every table and the over-cap invariant is exercised.
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
GPU_HOST_GPUS = 4
INITIAL_FILL = 0.3  # share of each subscription's burst booked before the run starts


@dataclass(frozen=True)
class LayerRef:
    """Everything a booking needs besides the host: the ids of its five keys."""

    show_id: str
    folder_id: str
    dept_id: str
    job_id: str
    layer_id: str


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
        # Bursts add up to 200% of each allocation (render farms are oversubscribed), so
        # subscriptions, job and folder caps and full hosts all turn bookings away.
        burst = {
            (s.id, a.id): max(400, int(2.0 * hosts_per_alloc[a.id] * HOST_CORES / shows) // 100 * 100)
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
        show_burst = {s.id: sum(burst[s.id, a.id] for a in allocs) for s in show_rows}
        folder_max = {f.id: rng.choice([-1, show_burst[f.show_id] * 2 // 5 // 100 * 100]) for f in folders}
        # Cuebot's trigger made each folder's resource row (pk = pk_folder); set its cap.
        FolderResource.objects.bulk_update(
            [FolderResource(id=f.id, folder_id=f.id, int_max_cores=folder_max[f.id]) for f in folders],
            ["int_max_cores"],
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
        job_max = {j.id: rng.choice([600, 1000, 1500, 2000, 3000]) for j in job_rows}
        JobResource.objects.bulk_update(
            [JobResource(id=j.id, job_id=j.id, int_max_cores=job_max[j.id]) for j in job_rows],
            ["int_max_cores"],
            batch_size=2000,
        )
        layer_rows = Layer.objects.bulk_create(
            [new_layer(job_id=j.id, name=kind, mem_min=PROC_MEM_KB) for j in job_rows for kind in ("render", "comp")],
            batch_size=2000,
        )

        job_by_id = {j.id: j for j in job_rows}
        layers_by_show: dict[str, list[LayerRef]] = defaultdict(list)
        for l in layer_rows:
            j = job_by_id[l.job_id]
            layers_by_show[j.show_id].append(
                LayerRef(show_id=j.show_id, folder_id=j.folder_id, dept_id=j.dept_id, job_id=j.id, layer_id=l.id)
            )
        add_initial_procs(
            rng=rng,
            layers_by_show=layers_by_show,
            hosts=host_rows,
            burst=burst,
            folder_max=folder_max,
            job_max=job_max,
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


def add_initial_procs(
    *,
    rng: random.Random,
    layers_by_show: dict[str, list[LayerRef]],
    hosts: list[Host],
    burst: dict[tuple[str, str], int],
    folder_max: dict[str, int],
    job_max: dict[str, int],
) -> None:
    """Running procs for every show (Cuebot-managed ones too), each within every cap, in cores per proc."""
    booked: dict[object, int] = defaultdict(int)
    idle = {h.id: h.int_cores for h in hosts}
    frames, procs = [], []
    for show_id, layers in layers_by_show.items():
        target = INITIAL_FILL * sum(v for (s, _), v in burst.items() if s == show_id) // 100
        attempts = 0
        while booked[show_id] < target and attempts < 50 * len(layers):
            attempts += 1
            layer, host, cores = rng.choice(layers), rng.choice(hosts), rng.choice(PROC_CORES)
            whole = cores // 100
            sub = (show_id, host.alloc_id)
            if idle[host.id] < cores or booked[sub] + whole > burst[sub] // 100:
                continue
            if 0 < folder_max[layer.folder_id] < (booked[layer.folder_id] + whole) * 100:
                continue
            if 0 < job_max[layer.job_id] < (booked[layer.job_id] + whole) * 100:
                continue
            for key in (sub, layer.folder_id, layer.job_id, show_id):
                booked[key] += whole
            idle[host.id] -= cores
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
        "pk", "job_id", "job__show_id", "job__folder_id", "job__dept_id"
    )
    for layer_id, job_id, show_id, folder_id, dept_id in rows.iterator(chunk_size=5000):
        layers_by_show[show_id].append(
            LayerRef(show_id=show_id, folder_id=folder_id, dept_id=dept_id, job_id=job_id, layer_id=layer_id)
        )
    hosts = list(Host.objects.values_list("pk", "int_gpus"))
    return SimFarm(
        show_ids=list(Show.objects.values_list("pk", flat=True)),
        layers_by_show=dict(layers_by_show),
        host_ids=[h for h, _ in hosts],
        gpu_host_ids={h for h, g in hosts if g},
        own=False,
    )
