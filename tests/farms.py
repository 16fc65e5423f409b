"""Small farms for tests, built in a few lines:

    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=250)

Rows go in as Cuebot puts them in (see simulator.farm_builder): the resource rows come from
Cuebot's insert triggers, limits are set on them afterwards, a proc runs a frame. Cuebot (or
the scheduler) writes them, so they are written as the superuser (as_cuebot), never as the
service's documented role the tests run as.
"""

from dataclasses import dataclass, field
from itertools import count

from django.db import connection, transaction

from accounting.models import (
    FolderResource,
    HostLocal,
    JobResource,
    Point,
    Proc,
    Subscription,
)
from accounting.reconcile.recompute import recompute_pg_accounting
from shows.models import (
    Alloc,
    Dept,
    Facility,
    Folder,
    Frame,
    Host,
    HostStat,
    Job,
    Layer,
    Show,
    new_pk,
)
from simulator.farm_builder import frame_number, insert_running_frame, new_layer
from tests.service_role import as_cuebot

_names = count(1)


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


@dataclass
class Farm:
    show: Show
    alloc: Alloc
    dept: Dept
    folder: Folder
    job: Job
    layer: Layer
    host: Host
    subscription: Subscription
    procs: list[Proc] = field(default_factory=list)

    @property
    def folder_resource(self) -> FolderResource:
        return FolderResource.objects.get(folder=self.folder)

    @as_cuebot()
    def add_job(self, *, state: str = "PENDING", max_cores: int = 10000) -> tuple[Job, Layer]:
        name = unique("job")
        job = Job.objects.create(
            folder=self.folder,
            show=self.show,
            dept=self.dept,
            facility=self.alloc.facility,
            str_name=name,
            str_visible_name=None if state == "FINISHED" else name,
            str_shot="sh010",
            str_user="test",
            str_state=state,
        )
        JobResource.objects.filter(job=job).update(int_max_cores=max_cores)
        layer = new_layer(job_id=job.id, name="render", mem_min=1024)
        layer.save(force_insert=True)
        return job, layer

    @as_cuebot()
    def delete_job_as_cuebot_does(self, *, job: Job) -> None:
        """Cuebot's job deletion takes the job's frames, layers and resource rows with it; a
        proc still running has its frame reference cleared first (proc.pk_frame is nullable)."""
        with connection.cursor() as cursor:
            cursor.execute("UPDATE proc SET pk_frame = NULL WHERE pk_job = %s", [job.id])
            for table in ("frame", "layer_resource", "layer", "job_resource", "job"):
                cursor.execute(f"DELETE FROM {table} WHERE pk_job = %s", [job.id])

    @as_cuebot()
    def add_frame(self, *, state: str = "WAITING", layer: Layer | None = None) -> Frame:
        """A frame of the layer (the farm's first by default) as a job launch leaves it: waiting to be booked."""
        layer = layer or self.layer
        frame_id = new_pk()
        number = frame_number(frame_id)
        return Frame.objects.create(
            id=frame_id,
            layer=layer,
            job_id=layer.job_id,
            str_name=f"{number:04d}-{layer.str_name}",
            str_state=state,
            int_number=number,
            int_layer_order=0,
        )

    @as_cuebot()
    def add_proc(
        self,
        *,
        cores: int = 100,
        gpus: int = 0,
        mem: int = 4096,
        local: bool = False,
        layer: Layer | None = None,
        host: Host | None = None,
    ) -> Proc:
        """Insert a running proc (centicores) and bring PG accounting, host idle and (local)
        the host_local reservation in line."""
        layer = layer or self.layer
        host = host or self.host
        frame_id = new_pk()
        with transaction.atomic():
            with connection.cursor() as cursor:
                insert_running_frame(cursor=cursor, frame_id=frame_id, layer_id=layer.id, host_id=host.id, cores=cores)
            proc = Proc.objects.create(
                host=host,
                job_id=layer.job_id,
                show=self.show,
                layer=layer,
                frame_id=frame_id,
                int_cores_reserved=cores,
                int_gpus_reserved=gpus,
                int_mem_reserved=mem,
                int_gpu_mem_reserved=0,
                b_local=local,
            )
            Host.objects.filter(pk=host.pk).update(
                int_cores_idle=host.int_cores_idle - cores,
                int_mem_idle=host.int_mem_idle - mem,
                int_gpus_idle=host.int_gpus_idle - gpus,
            )
            if local:
                reservation = self.local_reservation(host=host, job_id=layer.job_id)
                HostLocal.objects.filter(pk=reservation.pk).update(
                    int_cores_idle=reservation.int_cores_idle - cores,
                    int_mem_idle=reservation.int_mem_idle - mem,
                    int_gpus_idle=reservation.int_gpus_idle - gpus,
                )
        host.refresh_from_db()
        recompute_pg_accounting(show_ids=[self.show.id])
        self.procs.append(proc)
        return proc

    @as_cuebot()
    def local_reservation(self, *, host: Host, job_id: str) -> HostLocal:
        """The job's host_local reservation on the host: the whole host, made on first use."""
        reservation, _ = HostLocal.objects.get_or_create(
            host=host,
            job_id=job_id,
            defaults=dict(
                str_type="JOB_PARTITION",
                int_cores_max=host.int_cores,
                int_cores_idle=host.int_cores,
                int_mem_max=host.int_mem,
                int_mem_idle=host.int_mem,
                int_gpus_max=host.int_gpus,
                int_gpus_idle=host.int_gpus,
            ),
        )
        return reservation


@as_cuebot()
def build_farm(
    *, managed: bool, size: int = 10000, burst: int = 20000, host_cores: int = 6400, host_gpus: int = 4
) -> Farm:
    facility = Facility.objects.create(str_name=unique("fac"))
    alloc = Alloc.objects.create(str_name=unique("alloc"), facility=facility, str_tag="general")
    show = Show.objects.create(str_name=unique("show"), b_scheduler_managed=managed)
    dept = Dept.objects.create(str_name=unique("dept"))
    subscription = Subscription.objects.create(show=show, alloc=alloc, int_size=size, int_burst=burst)
    Point.objects.create(show=show, dept=dept)
    folder = Folder.objects.create(show=show, dept=dept, str_name="root", b_default=True)
    host = Host.objects.create(
        alloc=alloc,
        str_name=unique("host"),
        str_lock_state="OPEN",
        int_cores=host_cores,
        int_cores_idle=host_cores,
        int_mem=64 * 1024 * 1024,
        int_mem_idle=64 * 1024 * 1024,
        int_gpus=host_gpus,
        int_gpus_idle=host_gpus,
    )
    HostStat.objects.create(id=host.id, host=host, int_mem_total=host.int_mem, int_mem_free=host.int_mem_idle)
    farm = Farm(
        show=show, alloc=alloc, dept=dept, folder=folder, job=None, layer=None, host=host, subscription=subscription
    )
    farm.job, farm.layer = farm.add_job()
    return farm
