"""The simulator's own farm, built fresh for every run with new uuid4 ids (the previous one, and
its acct:* keys, removed first), so no two runs share a key and the demo farm is never touched.
Limits are tight on purpose: every cap a booking is checked against binds within seconds of a
default run (the subscription burst, the folder's and the job's max cores and max GPUs, the
layer's per-frame cores and GPUs), so a scheduler that ignores any one of them books past it and
the over-cap invariant sees it, on the farm every run uses, not only on one built for a test."""

import random
from collections import defaultdict
from dataclasses import dataclass

from django.db import connection, transaction

from accounting.models import FolderResource, JobResource, Point, Proc, Subscription
from accounting.reconcile.recompute import recompute_pg_accounting
from shows.models import Alloc, Dept, Facility, Folder, Frame, Host, Job, Layer, Show, new_pk
from simulator.farm import PREFIX, PROC_MEM_KB, LayerRef, SimFarm, remove_sim_farm, sim_show_ids
from simulator.farm_builder import ADD_HOST_STATS, DEPARTMENTS, KB_PER_GB, PROC_CORES, frame_number, new_layer
from simulator.farm_rules import HOST_IDLE, refuse_foreign_shows, refuse_without_cuebots_rights

HOST_CORES = 3200  # centicores
HOST_MEM_KB = 256 * KB_PER_GB
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
        host_rows = add_hosts(allocs=allocs, hosts=hosts)
        burst = add_subscriptions(shows=show_rows, allocs=allocs, hosts=host_rows)
        Point.objects.bulk_create([Point(show=s, dept=d) for s in show_rows for d in depts])
        folders = Folder.objects.bulk_create(
            [
                Folder(show=s, dept=d, str_name=d.str_name, b_default=d.str_name.endswith("lighting"))
                for s in show_rows
                for d in depts
            ]
        )
        job_rows, caps = add_jobs(facility=facility, folders=folders, jobs=jobs, rng=rng)
        layers_by_show = add_layers(jobs=job_rows)
        add_initial_procs(rng=rng, layers_by_show=layers_by_show, hosts=host_rows, burst=burst, caps=caps)
        with connection.cursor() as cursor:
            cursor.execute(HOST_IDLE, {"hosts": [h.id for h in host_rows]})
        recompute_pg_accounting(show_ids=[s.id for s in show_rows])
    return SimFarm(
        show_ids=[s.id for s in show_rows],
        layers_by_show=dict(layers_by_show),
        host_ids=[h.id for h in host_rows],
        gpu_host_ids={h.id for h in host_rows if h.int_gpus},
    )


def add_hosts(*, allocs: list[Alloc], hosts: int) -> list[Host]:
    """Hosts dealt round the allocations, the GPU allocation's with GPU_HOST_GPUS each."""
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
    return host_rows


def add_subscriptions(*, shows: list[Show], allocs: list[Alloc], hosts: list[Host]) -> dict[tuple[str, str], int]:
    """A subscription per show and allocation, the bursts adding up to BURST_SHARE of the
    allocation's cores; returns each (show, alloc)'s burst."""
    hosts_per_alloc = {a.id: sum(1 for h in hosts if h.alloc_id == a.id) for a in allocs}
    burst = {
        (s.id, a.id): max(
            400, int(BURST_SHARE[a.str_tag] * hosts_per_alloc[a.id] * HOST_CORES / len(shows)) // 100 * 100
        )
        for s in shows
        for a in allocs
    }
    Subscription.objects.bulk_create(
        [
            Subscription(show=s, alloc=a, int_size=burst[s.id, a.id] * 2 // 3, int_burst=burst[s.id, a.id])
            for s in shows
            for a in allocs
        ]
    )
    return burst


def add_jobs(*, facility: Facility, folders: list[Folder], jobs: int, rng: random.Random) -> tuple[list[Job], dict]:
    """The jobs, dealt round the folders, and the folders' and jobs' caps (by id)."""
    job_rows = [
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
        for n in range(max(jobs, len(folders)))
        for f in (folders[n % len(folders)],)
    ]
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
            FolderResource(id=f.id, folder_id=f.id, int_max_cores=c.cores, int_max_gpus=c.gpus)
            for f in folders
            for c in (folder_caps[f.id],)
        ],
        ["int_max_cores", "int_max_gpus"],
    )
    return job_rows, {**folder_caps, **job_caps}


def add_layers(*, jobs: list[Job]) -> dict[str, list[LayerRef]]:
    """Each job's layers (LAYER_KINDS), by show."""
    layer_rows = Layer.objects.bulk_create(
        [sim_layer(job_id=j.id, kind=kind) for j in jobs for kind in LAYER_KINDS], batch_size=2000
    )
    job_by_id = {j.id: j for j in jobs}
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
    return layers_by_show


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
    fill = InitialFill(burst=burst, caps=caps, idle={h.id: [h.int_cores, h.int_gpus] for h in hosts})
    frames, procs = [], []
    for show_id, layers in layers_by_show.items():
        target = INITIAL_FILL * sum(v for (s, _), v in burst.items() if s == show_id)
        attempts = 0
        while fill.booked[show_id][0] < target and attempts < 50 * len(layers):
            attempts += 1
            layer, host, cores = rng.choice(layers), rng.choice(hosts), rng.choice(PROC_CORES)
            if not fill.fits(show_id=show_id, layer=layer, host=host, cores=cores):
                continue
            frame_id = new_pk()
            frames.append(running_frame(frame_id=frame_id, layer=layer, host=host, cores=cores))
            procs.append(
                Proc(
                    host_id=host.id,
                    job_id=layer.job_id,
                    show_id=show_id,
                    layer_id=layer.layer_id,
                    frame_id=frame_id,
                    int_cores_reserved=cores,
                    int_gpus_reserved=layer.gpus_min,
                    int_mem_reserved=PROC_MEM_KB,
                )
            )
    Frame.objects.bulk_create(frames, batch_size=2000)
    Proc.objects.bulk_create(procs, batch_size=2000)


@dataclass
class InitialFill:
    """What the initial procs have booked so far, per key (centicores, GPUs), and each host's room."""

    burst: dict[tuple[str, str], int]
    caps: dict[str, Caps]
    idle: dict[str, list[int]]

    def __post_init__(self) -> None:
        self.booked: dict[object, list[int]] = defaultdict(lambda: [0, 0])

    def fits(self, *, show_id: str, layer: LayerRef, host: Host, cores: int) -> bool:
        """Whether a proc of `cores` on `host` fits every cap; if so, it is counted."""
        gpus, idle = layer.gpus_min, self.idle[host.id]
        sub = (show_id, host.alloc_id)
        if 0 < layer.cores_max < cores or idle[0] < cores or idle[1] < gpus:
            return False
        # Whole cores per proc, as the accounting counts them against a burst or cap.
        whole = cores // 100 * 100
        if self.booked[sub][0] + whole > self.burst[sub]:
            return False
        if not all(
            self.caps[k].admits(cores=self.booked[k][0] + whole, gpus=self.booked[k][1] + gpus)
            for k in (layer.folder_id, layer.job_id)
        ):
            return False
        for key in (sub, layer.folder_id, layer.job_id, show_id):
            self.booked[key][0] += whole
            self.booked[key][1] += gpus
        idle[0] -= cores
        idle[1] -= gpus
        return True


def running_frame(*, frame_id: str, layer: LayerRef, host: Host, cores: int) -> Frame:
    return Frame(
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
