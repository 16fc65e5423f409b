"""Building blocks for farms: the demo farm, test fixtures and the simulator use these.

Everything is inserted as Cuebot inserts it: parent rows only, with the resource rows
(folder_resource, job_resource, layer_resource) left to Cuebot's insert triggers and
their limits set by UPDATE afterwards; every host has its host_stat, every proc runs a
frame (proc.pk_frame references it), every local proc draws on a host_local reservation.

Ids of the demo farm are uuid5 of the object's name, so building it twice finds the
same rows and inserts nothing new (every insert is ON CONFLICT DO NOTHING).
"""

import math
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction

from accounting.models import Point, Subscription
from accounting.reconcile.recompute import recompute_pg_accounting
from shows.models import Alloc, Dept, Facility, Folder, Job, Layer, Show

DEMO_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "cuebot-acct/demo-farm")
DEPARTMENTS = ("lighting", "animation", "fx")
PROC_CORES = (100, 250, 400, 200)  # centicores; 250 keeps fractional cores in every demo
KB_PER_GB = 1024 * 1024


class FarmRefused(Exception):
    """Building here would mix a generated farm into a site's own data."""


def demo_id(name: str) -> str:
    return str(uuid.uuid5(DEMO_NAMESPACE, name))


@dataclass(frozen=True)
class DemoFarmSize:
    shows: int = 4
    hosts: int = 20
    procs: int = 200
    # Cores per host, 0 for enough that a host's share of the procs fits whatever their sizes
    # (a farm of a real site's shape is denser: MAESTRO_PROOF). A host whose procs need more
    # than this is grown to fit when the farm is built (HOST_IDLE), as Cuebot's host check demands.
    cores_per_host: int = 0

    @property
    def jobs_per_folder(self) -> int:
        # About 20 procs a job keeps every job under its default 100-core cap.
        folders = self.shows * len(DEPARTMENTS)
        return max(2, math.ceil(self.procs / 20 / folders))

    @property
    def procs_per_host(self) -> int:
        return math.ceil(self.procs / self.hosts) if self.hosts else 0

    @property
    def host_cores(self) -> int:
        if self.cores_per_host:
            return 100 * self.cores_per_host
        return 100 * max(64, math.ceil(self.procs_per_host * max(PROC_CORES) / 100))

    @property
    def host_mem_kb(self) -> int:
        return max(256, self.procs_per_host * 4) * KB_PER_GB


# The size of OpenCue Maestro's own proof farm (sandbox/maestro-sim: 1,553 hosts, about 57,000
# cores), with 20,000 procs running: 37 cores a host is 57,461 cores, and the demo's procs fit on
# every host (at most 13 a host, 32.5 cores, since 1,553 hosts deal the four proc sizes round).
MAESTRO_PROOF = DemoFarmSize(shows=20, hosts=1553, procs=20000, cores_per_host=37)


@dataclass(frozen=True)
class DemoFarmSummary:
    shows: int
    hosts: int
    host_cores: int  # centicores of the farm's hosts, summed
    procs: int
    procs_added: int
    scheduler_managed_show_ids: list[str]


def copy_rows(*, table: str, columns: list[str], rows: Iterable[tuple]) -> int:
    """COPY rows into `table`, skipping any whose primary key exists. Returns rows added."""
    column_list = ", ".join(columns)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMP TABLE incoming (LIKE {table} INCLUDING DEFAULTS) ON COMMIT DROP")
        with cursor.cursor.copy(f"COPY incoming ({column_list}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(f"INSERT INTO {table} ({column_list}) SELECT {column_list} FROM incoming ON CONFLICT DO NOTHING")
        added = cursor.rowcount
        cursor.execute("DROP TABLE incoming")
    return added


def build_structure(*, size: DemoFarmSize) -> tuple[list[Show], list[Alloc], list[Layer]]:
    facility = Facility(id=demo_id("facility"), str_name="demo")
    Facility.objects.bulk_create([facility], ignore_conflicts=True)
    allocs = [
        Alloc(
            id=demo_id(f"alloc:{tag}"),
            str_name=f"demo.{tag}",
            facility_id=facility.id,
            str_tag=tag,
            b_default=tag == "general",
        )
        for tag in ("general", "gpu")
    ]
    Alloc.objects.bulk_create(allocs, ignore_conflicts=True)
    depts = [Dept(id=demo_id(f"dept:{name}"), str_name=name) for name in DEPARTMENTS]
    Dept.objects.bulk_create(depts, ignore_conflicts=True)

    # Shows with an even index (demo01, demo03, ...) start scheduler-managed, the others Cuebot-managed; a re-run
    # keeps whatever an operator has switched since.
    shows = [
        Show(id=demo_id(f"show:{i}"), str_name=f"demo{i + 1:02d}", b_scheduler_managed=i % 2 == 0)
        for i in range(size.shows)
    ]
    Show.objects.bulk_create(shows, ignore_conflicts=True)
    farm_cores = size.hosts * size.host_cores
    share = max(100, farm_cores // max(1, size.shows * len(allocs)))
    Subscription.objects.bulk_create(
        [
            Subscription(
                id=demo_id(f"sub:{s.id}:{a.id}"), show_id=s.id, alloc_id=a.id, int_size=share, int_burst=2 * share
            )
            for s in shows
            for a in allocs
        ],
        ignore_conflicts=True,
    )
    Point.objects.bulk_create(
        [Point(id=demo_id(f"point:{s.id}:{d.id}"), show_id=s.id, dept_id=d.id) for s in shows for d in depts],
        ignore_conflicts=True,
    )
    folders = [
        Folder(
            id=demo_id(f"folder:{s.id}:{d.str_name}"),
            show_id=s.id,
            dept_id=d.id,
            str_name=d.str_name,
            b_default=d.str_name == "lighting",
        )
        for s in shows
        for d in depts
    ]
    Folder.objects.bulk_create(folders, ignore_conflicts=True)
    jobs = []
    for f in folders:
        show_name = next(s.str_name for s in shows if s.id == f.show_id)
        for n in range(size.jobs_per_folder):
            name = f"{show_name}-{f.str_name}-job{n + 1:04d}"
            jobs.append(
                Job(
                    id=demo_id(f"job:{name}"),
                    folder_id=f.id,
                    show_id=f.show_id,
                    dept_id=f.dept_id,
                    facility_id=facility.id,
                    str_name=name,
                    str_visible_name=name,
                    str_shot=f"sh{n % 100:03d}",
                    str_user="demo",
                    str_state="PENDING",
                )
            )
        # One finished job per folder: reseeds and drift checks must leave it out. Cuebot
        # clears a finished job's visible name, so its name is free for a new launch.
        name = f"{show_name}-{f.str_name}-finished"
        jobs.append(
            Job(
                id=demo_id(f"job:{name}"),
                folder_id=f.id,
                show_id=f.show_id,
                dept_id=f.dept_id,
                facility_id=facility.id,
                str_name=name,
                str_shot="sh999",
                str_user="demo",
                str_state="FINISHED",
            )
        )
    Job.objects.bulk_create(jobs, ignore_conflicts=True, batch_size=2000)
    layers = [
        new_layer(id=demo_id(f"layer:{j.id}:{kind}"), job_id=j.id, name=kind, mem_min=4 * KB_PER_GB)
        for j in jobs
        for kind in ("render", "comp")
    ]
    Layer.objects.bulk_create(layers, ignore_conflicts=True, batch_size=2000)
    job_state = {j.id: j.str_state for j in jobs}
    running_layers = [l for l in layers if job_state[l.job_id] != "FINISHED"]
    return shows, allocs, running_layers


HOST_COLUMNS = [
    "pk_host",
    "pk_alloc",
    "str_name",
    "str_lock_state",
    "int_cores",
    "int_cores_idle",
    "int_mem",
    "int_mem_idle",
    "int_gpus",
    "int_gpus_idle",
    "int_gpu_mem",
    "int_gpu_mem_idle",
]
FRAME_COLUMNS = [
    "pk_frame",
    "pk_layer",
    "pk_job",
    "str_name",
    "str_state",
    "int_number",
    "int_layer_order",
    "int_cores",
    "str_host",
]
PROC_COLUMNS = [
    "pk_proc",
    "pk_host",
    "pk_job",
    "pk_show",
    "pk_layer",
    "pk_frame",
    "int_cores_reserved",
    "int_gpus_reserved",
    "int_mem_reserved",
    "int_gpu_mem_reserved",
]
GPU_HOST_GPUS = 4
GPU_MEM_KB = 16 * KB_PER_GB

# Cuebot keeps one host_stat row per host, made when the host registers.
ADD_HOST_STATS = """
INSERT INTO host_stat (pk_host_stat, pk_host, int_mem_total, int_mem_free)
SELECT h.pk_host, h.pk_host, h.int_mem, h.int_mem FROM host h WHERE h.pk_host = ANY(%(hosts)s)
ON CONFLICT DO NOTHING
"""
# A proc runs one frame; the scheduler books the frame it dispatches, so the frame row
# exists (RUNNING on the proc's host) before the proc that references it.
INSERT_RUNNING_FRAME = """
INSERT INTO frame (pk_frame, pk_layer, pk_job, str_name, str_state, int_number, int_layer_order, int_cores, str_host)
SELECT %(frame)s, l.pk_layer, l.pk_job, %(number)s || '-' || l.str_name, 'RUNNING', %(number)s, 0, %(cores)s, h.str_name
  FROM layer l, host h WHERE l.pk_layer = %(layer)s AND h.pk_host = %(host)s
"""


def new_layer(*, id: str | None = None, job_id: str, name: str, mem_min: int) -> Layer:
    """A layer as a job launch creates it (str_cmd and str_range are required by Cuebot)."""
    layer = Layer(
        job_id=job_id,
        str_name=name,
        str_type="Render",
        str_cmd=f"render --layer {name}",
        str_range="1-1000",
        int_mem_min=mem_min,
    )
    if id:
        layer.id = id
    return layer


def frame_number(frame_id: str) -> int:
    """A frame number unique within its layer for frames made on the fly (tests, simulator)."""
    return uuid.UUID(frame_id).int % 10**9


def insert_running_frame(*, cursor, frame_id: str, layer_id: str, host_id: str, cores: int) -> None:
    cursor.execute(
        INSERT_RUNNING_FRAME,
        {
            "frame": frame_id,
            "layer": layer_id,
            "host": host_id,
            "cores": cores,
            "number": f"{frame_number(frame_id):04d}",
        },
    )


def host_rows(*, size: DemoFarmSize, allocs: list[Alloc]) -> Iterable[tuple]:
    for h in range(size.hosts):
        alloc = allocs[h % len(allocs)]
        gpus = GPU_HOST_GPUS if alloc.str_tag == "gpu" else 0
        yield (
            demo_id(f"host:{h}"),
            alloc.id,
            host_name(h),
            "OPEN",
            size.host_cores,
            size.host_cores,
            size.host_mem_kb,
            size.host_mem_kb,
            gpus,
            gpus,
            gpus * GPU_MEM_KB,
            gpus * GPU_MEM_KB,
        )


def host_name(index: int) -> str:
    return f"demo-host-{index + 1:05d}"


@dataclass(frozen=True)
class DemoProc:
    index: int
    host: int
    layer: Layer
    cores: int
    gpus: int


def demo_procs(*, size: DemoFarmSize, allocs: list[Alloc], layers: list[Layer]) -> Iterable[DemoProc]:
    for p in range(size.procs):
        h = p % size.hosts
        slot = p // size.hosts
        gpu_host = allocs[h % len(allocs)].str_tag == "gpu"
        gpus = 1 if gpu_host and slot < GPU_HOST_GPUS else 0
        yield DemoProc(index=p, host=h, layer=layers[p % len(layers)], cores=PROC_CORES[p % len(PROC_CORES)], gpus=gpus)


def frame_rows(*, procs: Iterable[DemoProc]) -> Iterable[tuple]:
    for proc in procs:
        number = proc.index + 1
        yield (
            demo_id(f"frame:{proc.index}"),
            proc.layer.id,
            proc.layer.job_id,
            f"{number:04d}-{proc.layer.str_name}",
            "RUNNING",
            number,
            0,
            proc.cores,
            host_name(proc.host),
        )


def proc_rows(
    *, procs: Iterable[DemoProc], show_of_job: dict[str, str], progress: Callable[[int], None]
) -> Iterable[tuple]:
    count = 0
    for proc in procs:
        yield (
            demo_id(f"proc:{proc.index}"),
            demo_id(f"host:{proc.host}"),
            proc.layer.job_id,
            show_of_job[proc.layer.job_id],
            proc.layer.id,
            demo_id(f"frame:{proc.index}"),
            proc.cores,
            proc.gpus,
            4 * KB_PER_GB,
            proc.gpus * GPU_MEM_KB,
        )
        count += 1
        if count % 1000 == 0:
            progress(1000)
    progress(count % 1000)


# Idle = capacity - what the host's procs reserve. A larger demo re-run puts more procs on
# the hosts it made before: their capacity grows to fit, as Cuebot's host check demands.
HOST_IDLE = """
UPDATE host h
   SET int_cores = GREATEST(h.int_cores, COALESCE(t.cores, 0)), int_mem = GREATEST(h.int_mem, COALESCE(t.mem, 0)),
       int_cores_idle = GREATEST(h.int_cores, COALESCE(t.cores, 0)) - COALESCE(t.cores, 0),
       int_mem_idle = GREATEST(h.int_mem, COALESCE(t.mem, 0)) - COALESCE(t.mem, 0),
       int_gpus = GREATEST(h.int_gpus, COALESCE(t.gpus, 0)), int_gpu_mem = GREATEST(h.int_gpu_mem, COALESCE(t.gpu_mem, 0)),
       int_gpus_idle = GREATEST(h.int_gpus, COALESCE(t.gpus, 0)) - COALESCE(t.gpus, 0),
       int_gpu_mem_idle = GREATEST(h.int_gpu_mem, COALESCE(t.gpu_mem, 0)) - COALESCE(t.gpu_mem, 0)
  FROM host h2
  LEFT JOIN (
        SELECT pk_host, SUM(int_cores_reserved) AS cores, SUM(int_mem_reserved) AS mem,
               SUM(int_gpus_reserved) AS gpus, SUM(int_gpu_mem_reserved) AS gpu_mem
          FROM proc GROUP BY pk_host
       ) t ON t.pk_host = h2.pk_host
 WHERE h.pk_host = h2.pk_host AND h2.pk_host = ANY(%(hosts)s)
"""


# What a generated farm inserts: Cuebot's own rows (and the scheduler's procs), which the
# service's documented role may not write (shows.attach.grant_statements): on a scratch
# Cuebot database the demo and the simulator run as Cuebot's role, or the database owner.
FARM_INSERTS = (
    "facility",
    "alloc",
    "show",
    "dept",
    "subscription",
    "point",
    "folder",
    "job",
    "layer",
    "host",
    "host_stat",
    "frame",
    "proc",
    "job_history",
    "frame_history",
)


# What the simulator's commands need, named by their refusal while ACCOUNTING_WRITES is off: they
# write what Cuebot and the scheduler write, and release and repair through the service.
PLAYS_CUEBOT = "Cuebot's own rights on a scratch Cuebot database (it writes what Cuebot writes)"


def refuse_without_cuebots_rights(*, command: str) -> None:
    """Stop in one line, before writing anything, when this role may not insert Cuebot's rows
    (the service's documented role may not: a traceback half-way was what it got before)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t FROM unnest(%s::text[]) AS t WHERE to_regclass(t) IS NOT NULL AND NOT has_table_privilege(t, 'INSERT')",
            [list(FARM_INSERTS)],
        )
        denied = [table for (table,) in cursor.fetchall()]
    if denied:
        raise FarmRefused(
            f"{command} refuses: it writes Cuebot's own rows as Cuebot and the scheduler do, and this database role "
            f"may not INSERT on {', '.join(denied)} (the service's role of docs/attaching.md never may); "
            "run it as Cuebot's database role or the database owner, on a scratch Cuebot database"
        )


def refuse_foreign_shows(*, own_show_ids: Iterable[str], command: str) -> None:
    """On a site's database (OPENCUE_TABLES=existing) generated farms go only where no other show is."""
    if settings.OPENCUE_TABLES != "existing":
        return
    foreign = Show.objects.exclude(pk__in=list(own_show_ids)).count()
    if foreign:
        raise FarmRefused(
            f"{command} refuses: this Cuebot database (OPENCUE_TABLES=existing) holds {foreign} show(s) it did not create; "
            "it only fills a scratch Cuebot database that has no show yet"
        )


def refuse_demo_farm_here(*, size: DemoFarmSize) -> None:
    """FarmRefused, before anything is written, where the demo farm may not go."""
    refuse_without_cuebots_rights(command="seed_demo_farm")
    refuse_foreign_shows(own_show_ids=[demo_id(f"show:{i}") for i in range(size.shows)], command="seed_demo_farm")


def build_demo_farm(*, size: DemoFarmSize, progress: Callable[[int], None] = lambda n: None) -> DemoFarmSummary:
    """Create (or complete) the demo farm in PostgreSQL, with accounting equal to SUM(proc)."""
    refuse_demo_farm_here(size=size)
    with transaction.atomic():
        shows, allocs, layers = build_structure(size=size)
        host_ids = [demo_id(f"host:{h}") for h in range(size.hosts)]
        copy_rows(table="host", columns=HOST_COLUMNS, rows=host_rows(size=size, allocs=allocs))
        with connection.cursor() as cursor:
            cursor.execute(ADD_HOST_STATS, {"hosts": host_ids})
        added = 0
        if size.procs and layers and size.hosts:
            show_of_job = dict(Job.objects.filter(pk__in={l.job_id for l in layers}).values_list("pk", "show_id"))
            copy_rows(
                table="frame",
                columns=FRAME_COLUMNS,
                rows=frame_rows(procs=demo_procs(size=size, allocs=allocs, layers=layers)),
            )
            added = copy_rows(
                table="proc",
                columns=PROC_COLUMNS,
                rows=proc_rows(
                    procs=demo_procs(size=size, allocs=allocs, layers=layers),
                    show_of_job=show_of_job,
                    progress=progress,
                ),
            )
        with connection.cursor() as cursor:
            cursor.execute(HOST_IDLE, {"hosts": host_ids})
        recompute_pg_accounting(show_ids=[s.id for s in shows])
    managed = list(
        Show.objects.filter(pk__in=[s.id for s in shows], b_scheduler_managed=True).values_list("pk", flat=True)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(SUM(int_cores), 0) FROM host WHERE pk_host = ANY(%(hosts)s)", {"hosts": host_ids}
        )
        (host_cores,) = cursor.fetchone()
    return DemoFarmSummary(
        shows=len(shows),
        hosts=size.hosts,
        host_cores=int(host_cores),
        procs=size.procs,
        procs_added=added,
        scheduler_managed_show_ids=managed,
    )
