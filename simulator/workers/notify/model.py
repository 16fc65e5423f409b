"""The NOTIFY-era scheduler model's memory: its counters (cores, GPUs) and caps per key,
booked against as booking.lua does, the snapshot its recompute reads (SUM(proc) by the
upstream query's rule), and its limit reseed at start."""

import threading
import time
import uuid
from collections import defaultdict

from accounting.live.units import cores_from_centicores
from accounting.models import FolderResource, JobResource, Subscription
from simulator.farm import SimFarm

# The scheduler's recompute: per key, procs of managed shows that are not local, whose job is
# not FINISHED (the upstream query's rule), each proc's cores truncated as a release sends them.
SNAPSHOT = """
SELECT 'sub', p.pk_show || ':' || h.pk_alloc, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p JOIN host h ON h.pk_host = p.pk_host JOIN job j ON j.pk_job = p.pk_job JOIN show s ON s.pk_show = p.pk_show
 WHERE s.b_scheduler_managed AND NOT p.b_local AND j.str_state <> 'FINISHED' AND p.pk_show = ANY(%(shows)s)
 GROUP BY 1, 2
UNION ALL
SELECT 'folder', j.pk_folder, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p JOIN job j ON j.pk_job = p.pk_job JOIN show s ON s.pk_show = p.pk_show
 WHERE s.b_scheduler_managed AND NOT p.b_local AND j.str_state <> 'FINISHED' AND p.pk_show = ANY(%(shows)s)
 GROUP BY 1, 2
UNION ALL
SELECT 'job', p.pk_job, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p JOIN job j ON j.pk_job = p.pk_job JOIN show s ON s.pk_show = p.pk_show
 WHERE s.b_scheduler_managed AND NOT p.b_local AND j.str_state <> 'FINISHED' AND p.pk_show = ANY(%(shows)s)
 GROUP BY 1, 2
"""


# The folder's and the job's caps the model checks, cores first, then GPUs (booking.lua's
# order), folder before job: (unit, index in a counter's [cores, GPUs]).
FOLDER_AND_JOB_CAPS = (("cores", 0), ("gpus", 1))


class Store:
    """The scheduler's counters (cores, GPUs) and caps, keyed ('sub', show:alloc), ('folder', id), ('job', id)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.booked: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.caps: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        self.pending: dict[str, tuple[list[tuple[str, str]], int, int, int | None]] = {}
        self.epoch = 0
        self.cap_heard_at: dict[tuple[str, str], float] = {}  # when a key's caps last changed (time.monotonic())

    def try_book(self, *, keys: list[tuple[str, str]], cores: int, gpus: int) -> tuple[str | None, str | None]:
        """(operation id, None) when booked; (None, the cap that refused it, named as the Redis
        era's rejections are: "subscription burst", "folder gpus"...) otherwise."""
        sub, folder, job = keys
        with self.lock:
            burst = self.caps[sub].get("burst", 0)
            if burst <= 0 or self.booked[sub][0] + cores > burst:
                return None, "subscription burst" if burst > 0 else "subscription closed"
            for unit, index in FOLDER_AND_JOB_CAPS:
                amount = (cores, gpus)[index]
                for key in (folder, job):
                    cap = self.caps[key].get(f"max_{unit}", 0)
                    if amount > 0 and cap > 0 and self.booked[key][index] + amount > cap:
                        return None, f"{key[0]} {unit}"
            for key in keys:
                self.booked[key][0] += cores
                self.booked[key][1] += gpus
            op = uuid.uuid4().hex
            self.pending[op] = (keys, cores, gpus, None)
            return op, None

    def committed(self, op: str) -> None:
        with self.lock:
            keys, cores, gpus, _ = self.pending[op]
            self.pending[op] = (keys, cores, gpus, self.epoch)

    def rolled_back(self, op: str) -> None:
        with self.lock:
            keys, cores, gpus, _ = self.pending.pop(op)
            for key in keys:
                self.booked[key][0] -= cores
                self.booked[key][1] -= gpus

    def release(self, fields: dict) -> None:
        with self.lock:
            for key in (
                ("sub", f"{fields['show']}:{fields['alloc']}"),
                ("folder", fields["folder"]),
                ("job", fields["job"]),
            ):
                if key in self.booked:
                    self.booked[key][0] += fields["cores"]
                    self.booked[key][1] += fields["gpus"]

    def limit(self, fields: dict) -> None:
        with self.lock:
            if fields["vertex"] == "sub":
                key = ("sub", f"{fields['show']}:{fields['alloc']}")
                self.caps[key]["burst"] = fields["burst"]
            else:
                key = (fields["vertex"], fields["id"])
                for name in ("max_cores", "max_gpus"):
                    if name in fields:
                        self.caps[key][name] = fields[name]
            self.cap_heard_at[key] = time.monotonic()

    def knew_cap(self, *, key: tuple[str, str], unit: str, cap: int, since: float) -> bool:
        """Whether the model booked against `cap`: it holds that value for the key's cap in
        `unit` ("cores" or "gpus") and has heard no change of the key's caps since `since`."""
        name = "burst" if key[0] == "sub" else f"max_{unit}"
        with self.lock:
            return self.caps[key].get(name) == cap and self.cap_heard_at.get(key, float("-inf")) < since

    def begin_recompute(self) -> int:
        with self.lock:
            self.epoch += 1
            return self.epoch

    def overwrite(self, *, snapshot: dict[tuple[str, str], tuple[int, int]], epoch: int) -> None:
        """Counters = the snapshot plus the bookings it cannot contain (not committed, or
        committed after this recompute began); bookings it does contain are forgotten."""
        with self.lock:
            fresh: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
            for key in self.booked:
                fresh[key] = [0, 0]
            for key, (cores, gpus) in snapshot.items():
                fresh[key] = [cores, gpus]
            for op, (keys, cores, gpus, committed_in) in list(self.pending.items()):
                if committed_in is not None and committed_in < epoch:
                    del self.pending[op]
                    continue
                for key in keys:
                    fresh[key][0] += cores
                    fresh[key][1] += gpus
            self.booked = fresh

    def counters(self) -> dict[tuple[str, str], tuple[int, int]]:
        with self.lock:
            return {key: (c, g) for key, (c, g) in self.booked.items()}


def snapshot(cursor, show_ids: list[str]) -> dict[tuple[str, str], tuple[int, int]]:
    cursor.execute(SNAPSHOT, {"shows": show_ids})
    return {(kind, key): (int(cores), int(gpus)) for kind, key, cores, gpus in cursor.fetchall()}


def load_caps(store: Store, farm: SimFarm) -> None:
    """The scheduler's limit reseed at start."""
    with store.lock:
        for sub in Subscription.objects.filter(show_id__in=farm.show_ids):
            store.caps[("sub", f"{sub.show_id}:{sub.alloc_id}")]["burst"] = cores_from_centicores(sub.int_burst)
        for fr in FolderResource.objects.filter(folder__show_id__in=farm.show_ids):
            store.caps[("folder", fr.folder_id)].update(
                max_cores=-1 if fr.int_max_cores < 0 else fr.int_max_cores // 100, max_gpus=fr.int_max_gpus
            )
        for jr in JobResource.objects.filter(job__show_id__in=farm.show_ids):
            store.caps[("job", jr.job_id)].update(
                max_cores=-1 if jr.int_max_cores < 0 else jr.int_max_cores // 100, max_gpus=jr.int_max_gpus
            )
