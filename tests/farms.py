"""Small farms for tests, built in a few lines:

    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=250)
"""
from dataclasses import dataclass, field
from itertools import count

from accounting.models import FolderResource, JobResource, LayerResource, Point, Proc, Subscription
from accounting.recompute import recompute_pg_accounting
from shows.models import Alloc, Dept, Facility, Folder, Host, Job, Layer, Show

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

    def add_job(self, *, state: str = "PENDING", max_cores: int = 10000) -> tuple[Job, Layer]:
        job = Job.objects.create(
            folder=self.folder, show=self.show, dept=self.dept, facility=self.alloc.facility,
            str_name=unique("job"), str_shot="sh010", str_user="test", str_state=state,
        )
        JobResource.objects.create(job=job, int_max_cores=max_cores)
        layer = Layer.objects.create(job=job, str_name="render", str_type="Render", int_mem_min=1024)
        LayerResource.objects.create(layer=layer, job=job)
        return job, layer

    def add_proc(self, *, cores: int = 100, gpus: int = 0, mem: int = 4096, local: bool = False,
                 layer: Layer | None = None, host: Host | None = None) -> Proc:
        """Insert a running proc (centicores) and bring PG accounting and host idle in line."""
        layer = layer or self.layer
        host = host or self.host
        proc = Proc.objects.create(
            host=host, job_id=layer.job_id, show=self.show, layer=layer, int_cores_reserved=cores,
            int_gpus_reserved=gpus, int_mem_reserved=mem, int_gpu_mem_reserved=0, b_local=local,
        )
        Host.objects.filter(pk=host.pk).update(
            int_cores_idle=host.int_cores_idle - cores, int_mem_idle=host.int_mem_idle - mem,
            int_gpus_idle=host.int_gpus_idle - gpus,
        )
        host.refresh_from_db()
        recompute_pg_accounting(show_ids=[self.show.id])
        self.procs.append(proc)
        return proc


def build_farm(*, managed: bool, size: int = 10000, burst: int = 20000, host_cores: int = 6400, host_gpus: int = 4) -> Farm:
    facility = Facility.objects.create(str_name=unique("fac"))
    alloc = Alloc.objects.create(str_name=unique("alloc"), facility=facility, str_tag="general")
    show = Show.objects.create(str_name=unique("show"), b_scheduler_managed=managed)
    dept = Dept.objects.create(str_name=unique("dept"))
    subscription = Subscription.objects.create(show=show, alloc=alloc, int_size=size, int_burst=burst)
    Point.objects.create(show=show, dept=dept)
    folder = Folder.objects.create(show=show, dept=dept, str_name="root", b_default=True)
    FolderResource.objects.create(folder=folder)
    host = Host.objects.create(
        alloc=alloc, str_name=unique("host"), str_lock_state="OPEN", int_cores=host_cores, int_cores_idle=host_cores,
        int_mem=64 * 1024 * 1024, int_mem_idle=64 * 1024 * 1024, int_gpus=host_gpus, int_gpus_idle=host_gpus,
    )
    farm = Farm(show=show, alloc=alloc, dept=dept, folder=folder, job=None, layer=None, host=host, subscription=subscription)
    farm.job, farm.layer = farm.add_job()
    return farm
