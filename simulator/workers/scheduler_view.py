"""What the Redis and NOTIFY eras' schedulers share: their lagging view of the farm (hosts with
room, the shows they own), how a frame is sized against its layer, and what a booking writes in
PostgreSQL. Frames that run long enough to be released are picked by PICK_PROCS."""

import random
import time
import uuid

from django.db import connection

from shows.models import Show
from simulator.farm import PROC_MEM_KB, LayerRef, SimFarm
from simulator.farm_builder import PROC_CORES, insert_running_frame

MANAGED_SHOWS_REFRESH_SECONDS = 0.2
# A GPU layer's frame asks for one of these many GPUs, some beyond its layer's maximum.
FRAME_GPUS = (1, 2, 3)

# Frames that finish release their procs. A killed job's frames do not finish: its procs go
# through the kill's own release, later, as in OpenCue; released here at random, they were often
# gone before a reseed could run between the kill and their release. A frame runs FRAME_SECONDS
# at least: released at once, procs went as fast as they came and the farm never filled up to
# its caps.
FRAME_SECONDS = 1.0
PICK_PROCS = """
SELECT pk_proc FROM proc WHERE pk_show = ANY(%(shows)s) AND pk_job <> ALL(%(killed)s::text[])
   AND ts_booked <= now() - make_interval(secs => %(ran)s) ORDER BY random() LIMIT %(n)s
"""

OPEN_HOSTS = """
SELECT pk_host, pk_alloc, int_cores_idle, int_gpus_idle FROM host
 WHERE pk_host = ANY(%(hosts)s) AND int_cores_idle >= %(cores)s AND int_mem_idle >= %(mem)s
"""
CLAIM_HOST = """
UPDATE host SET int_cores_idle = int_cores_idle - %(cores)s, int_mem_idle = int_mem_idle - %(mem)s,
                int_gpus_idle = int_gpus_idle - %(gpus)s
 WHERE pk_host = %(host)s AND int_cores_idle >= %(cores)s AND int_mem_idle >= %(mem)s AND int_gpus_idle >= %(gpus)s
"""
INSERT_PROC = """
INSERT INTO proc (pk_proc, pk_host, pk_job, pk_show, pk_layer, pk_frame, int_cores_reserved, int_gpus_reserved,
                  int_mem_reserved, int_gpu_mem_reserved, b_local, b_unbooked, ts_booked, ts_ping)
VALUES (%(proc)s, %(host)s, %(job)s, %(show)s, %(layer)s, %(frame)s, %(cores)s, %(gpus)s, %(mem)s, 0, false, false, now(), now())
"""


class HostFull(Exception):
    """The chosen host lost its idle capacity to another booker: the INSERT is abandoned."""


def insert_booked_proc(*, cursor, layer: LayerRef, host_id: str, centicores: int, gpus: int) -> None:
    """What a booking writes in PostgreSQL, as the scheduler does: the host's idle resources
    claimed (HostFull if they are gone), a running frame and the proc."""
    cursor.execute(CLAIM_HOST, {"host": host_id, "cores": centicores, "mem": PROC_MEM_KB, "gpus": gpus})
    if cursor.rowcount != 1:
        raise HostFull(host_id)
    frame_id = str(uuid.uuid4())
    insert_running_frame(cursor=cursor, frame_id=frame_id, layer_id=layer.layer_id, host_id=host_id, cores=centicores)
    cursor.execute(
        INSERT_PROC,
        {
            "proc": str(uuid.uuid4()),
            "host": host_id,
            "job": layer.job_id,
            "show": layer.show_id,
            "layer": layer.layer_id,
            "frame": frame_id,
            "cores": centicores,
            "gpus": gpus,
            "mem": PROC_MEM_KB,
        },
    )


class HostView:
    """The scheduler's view of hosts with idle cores: refreshed every fraction of a second,
    so it lags, and a booking on a host that filled up meanwhile fails at the INSERT (the
    host claim) and takes the rollback path, as a real scheduler's would."""

    def __init__(self, farm: SimFarm) -> None:
        self.farm = farm
        self.hosts: list[tuple[str, str, int, int]] = []
        self.read_at = 0.0

    def pick(self, *, rng: random.Random, cores: int, gpus: int) -> tuple[str, str] | None:
        """(host id, allocation id) of a host that seemed to have `cores` and `gpus` idle."""
        if time.monotonic() - self.read_at > MANAGED_SHOWS_REFRESH_SECONDS:
            with connection.cursor() as cursor:
                cursor.execute(OPEN_HOSTS, {"hosts": self.farm.host_ids, "cores": min(PROC_CORES), "mem": PROC_MEM_KB})
                self.hosts = cursor.fetchall()
            self.read_at = time.monotonic()
        fitting = [h for h in self.hosts if h[2] >= cores and h[3] >= gpus]
        if not fitting:
            return None
        host_id, alloc_id, _, _ = rng.choice(fitting)
        return host_id, alloc_id


class ManagedShows:
    """The scheduler's view of which shows it owns, refreshed every fraction of a second."""

    def __init__(self, farm: SimFarm) -> None:
        self.farm = farm
        self.show_ids: list[str] = []
        self.read_at = 0.0

    def current(self) -> list[str]:
        if time.monotonic() - self.read_at > MANAGED_SHOWS_REFRESH_SECONDS:
            managed = set(
                Show.objects.filter(pk__in=self.farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True)
            )
            self.show_ids = [s for s in self.farm.show_ids if s in managed and self.farm.layers_by_show.get(s)]
            self.read_at = time.monotonic()
        return self.show_ids


def frame_size(*, rng: random.Random, layer: LayerRef) -> tuple[int, int]:
    """What a frame of `layer` asks for: centicores from PROC_CORES, GPUs when its layer
    takes any; drawn past the layer's per-frame limits too, which the scheduler refuses."""
    return rng.choice(PROC_CORES), rng.choice(FRAME_GPUS) if layer.gpus_min > 0 else 0


def layer_refusal(*, layer: LayerRef, cores: int, gpus: int) -> str | None:
    """The layer's per-frame limit a frame of this size exceeds ("layer cores", "layer gpus"),
    or None. The scheduler sizes frames itself: booking.lua reads no layer limit."""
    if 0 < layer.cores_max < cores:
        return "layer cores"
    if 0 < layer.gpus_max < gpus:
        return "layer gpus"
    return None


def managed_show_ids(*, farm: SimFarm) -> list[str]:
    """The farm's shows scheduler-managed now (the owner of the moment)."""
    return list(Show.objects.filter(pk__in=farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True))
