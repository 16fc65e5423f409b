"""What must hold, checked from PostgreSQL's rows and Redis's hashes directly, never through the
code under test: no booking above a cap in force (cores and GPUs; a layer's per-frame limits),
no managed counter below SUM(proc), no drift after reconciling, no negative counter.

The truth here (`TRUTH`) is written apart from the reseed's snapshot on purpose: a snapshot
that leaves procs out (the upstream scheduler's FINISHED-job rule, say) must be caught by the
invariants, not copied into them.
"""

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.db import connection

from accounting.live import keys
from accounting.live.units import cores_from_centicores
from infra.redis_factory import accounting_redis
from simulator.report import OverCap

# Booked cores per proc, truncated like accounting.live.units (PG's integer division of a
# non-negative bigint truncates), summed per key; GPUs as well; and the caps in force now.
# A layer's limits are per frame (layer.int_cores_max, centicores, and int_gpus_max): its
# largest proc against them. %(finished)s false leaves the procs of FINISHED jobs out of the
# subscription's and the folder's sums (the job booked is never FINISHED), as the NOTIFY-era
# scheduler counts.
BOOKED_AND_CAPS = """
SELECT (SELECT COALESCE(SUM(p.int_cores_reserved / 100), 0) FROM proc p JOIN host h ON h.pk_host = p.pk_host
         WHERE p.pk_show = %(show)s AND h.pk_alloc = %(alloc)s AND NOT p.b_local
           AND (%(finished)s OR NOT EXISTS (SELECT 1 FROM job f WHERE f.pk_job = p.pk_job AND f.str_state = 'FINISHED'))),
       (SELECT int_burst FROM subscription WHERE pk_show = %(show)s AND pk_alloc = %(alloc)s),
       (SELECT COALESCE(SUM(p.int_cores_reserved / 100), 0) FROM proc p JOIN job j ON j.pk_job = p.pk_job
         WHERE j.pk_folder = %(folder)s AND NOT p.b_local AND (%(finished)s OR j.str_state <> 'FINISHED')),
       (SELECT int_max_cores FROM folder_resource WHERE pk_folder = %(folder)s),
       (SELECT COALESCE(SUM(p.int_gpus_reserved), 0) FROM proc p JOIN job j ON j.pk_job = p.pk_job
         WHERE j.pk_folder = %(folder)s AND NOT p.b_local AND (%(finished)s OR j.str_state <> 'FINISHED')),
       (SELECT int_max_gpus FROM folder_resource WHERE pk_folder = %(folder)s),
       (SELECT COALESCE(SUM(int_cores_reserved / 100), 0) FROM proc WHERE pk_job = %(job)s AND NOT b_local),
       (SELECT int_max_cores FROM job_resource WHERE pk_job = %(job)s),
       (SELECT COALESCE(SUM(int_gpus_reserved), 0) FROM proc WHERE pk_job = %(job)s AND NOT b_local),
       (SELECT int_max_gpus FROM job_resource WHERE pk_job = %(job)s),
       (SELECT COALESCE(MAX(int_cores_reserved), 0) FROM proc WHERE pk_layer = %(layer)s),
       (SELECT int_cores_max FROM layer WHERE pk_layer = %(layer)s),
       (SELECT COALESCE(MAX(int_gpus_reserved), 0) FROM proc WHERE pk_layer = %(layer)s),
       (SELECT int_gpus_max FROM layer WHERE pk_layer = %(layer)s)
"""

# SUM(proc) per key, every non-local proc whatever its job's state (a proc that exists is
# booked until it is released: docs/redis-protocol.md), one plain query per kind of key.
# %(finished)s false leaves the procs of FINISHED jobs out of the subscription, folder and
# point sums: what the scheduler's own reseed claims for those keys (it never writes the job
# and layer keys of a FINISHED job, which keep their full sums).
TRUTH = """
SELECT 'acct:sub:' || p.pk_show || ':' || h.pk_alloc, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p JOIN host h ON h.pk_host = p.pk_host WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
   AND (%(finished)s OR NOT EXISTS (SELECT 1 FROM job f WHERE f.pk_job = p.pk_job AND f.str_state = 'FINISHED'))
 GROUP BY 1
UNION ALL
SELECT 'acct:folder:' || j.pk_folder, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p JOIN job j ON j.pk_job = p.pk_job WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
   AND (%(finished)s OR j.str_state <> 'FINISHED') GROUP BY 1
UNION ALL
SELECT 'acct:job:' || p.pk_job, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s) GROUP BY 1
UNION ALL
SELECT 'acct:layer:' || p.pk_layer, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s) GROUP BY 1
UNION ALL
SELECT 'acct:point:' || j.pk_dept || ':' || j.pk_show, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p JOIN job j ON j.pk_job = p.pk_job WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
   AND (%(finished)s OR j.str_state <> 'FINISHED') GROUP BY 1
"""


def truth_per_key(*, show_ids: list[str], finished_jobs: bool = True) -> dict[str, tuple[int, int]]:
    """{key: (cores, GPUs)} that SUM(proc) books now, for the keys with procs; `finished_jobs`
    False: what the scheduler's own reseed claims (TRUTH says which keys that changes)."""
    with connection.cursor() as cursor:
        cursor.execute(TRUTH, {"shows": show_ids, "finished": finished_jobs})
        return {key: (int(cores), int(gpus)) for key, cores, gpus in cursor.fetchall()}


# The job and layer keys of FINISHED jobs: nothing books them any more, and no reseed writes
# them once their procs are gone (they are not baselined), so a value left there is inert.
FINISHED_JOB_KEYS = """
SELECT 'acct:job:' || j.pk_job FROM job j WHERE j.pk_show = ANY(%(shows)s) AND j.str_state = 'FINISHED'
UNION ALL
SELECT 'acct:layer:' || l.pk_layer FROM layer l JOIN job j ON j.pk_job = l.pk_job
 WHERE j.pk_show = ANY(%(shows)s) AND j.str_state = 'FINISHED'
"""


@dataclass(frozen=True)
class SchedulerBound:
    """How low a key may read where the scheduler's own reseed runs (docs/redis-protocol.md,
    "What the scheduler's reseed may leave low"): below SUM(proc) by its FINISHED jobs' procs
    (subscription, folder and point keys) until they are released, and by `ignored`, the
    in-flight amounts the last write of each key ignored, until its next write."""

    ignored: Mapping[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class AgainstTruth:
    """Counters against SUM(proc), each (key, field, Redis, SUM(proc)): below the bound (low),
    above the truth (high), and below the truth but within the bound (tolerated)."""

    low: list[tuple]
    high: list[tuple]
    tolerated: list[tuple]


def against_truth(*, show_ids: list[str], bound: SchedulerBound | None = None) -> AgainstTruth:
    """Every counter of these shows' keys that reads below, or above, what their procs book.
    A key missing from Redis reads 0. High leaves out the inert keys of FINISHED jobs; low
    leaves out nothing, and with a `bound` (the scheduler's own reseed runs) is what reads
    below it: lower than that reseed may leave a key."""
    truth = truth_per_key(show_ids=show_ids)
    claim = truth if bound is None else truth_per_key(show_ids=show_ids, finished_jobs=False)
    with connection.cursor() as cursor:
        cursor.execute(FINISHED_JOB_KEYS, {"shows": show_ids})
        inert = {row[0] for row in cursor.fetchall()}
    every_key = sorted(set(truth) | set(farm_keys(show_ids=show_ids)))
    client = accounting_redis()
    with client.pipeline(transaction=False) as pipe:
        for key in every_key:
            pipe.hmget(key, "int_cores", "int_gpus")
        in_redis = pipe.execute()
    low, high, tolerated = [], [], []
    for key, values in zip(every_key, in_redis):
        allowed = (0, 0) if bound is None else bound.ignored.get(key, (0, 0))
        for name, expected, floor, slack, actual in zip(
            ("int_cores", "int_gpus"), truth.get(key, (0, 0)), claim.get(key, (0, 0)), allowed, values
        ):
            actual = int(actual or 0)
            if actual + slack < floor:
                low.append((key, name, actual, expected))
            elif actual < expected:
                tolerated.append((key, name, actual, expected))
            elif actual > expected and key not in inert:
                high.append((key, name, actual, expected))
    return AgainstTruth(low=low, high=high, tolerated=tolerated)


def _over(
    found: list,
    table: str,
    key: str,
    show_id: str,
    booked: int,
    cap: int | None,
    *,
    unit: str,
    started: float,
    centicores: bool,
) -> None:
    """A max cap not above 0 is no cap (booking.lua skips it); the caller passes a burst as a
    cap of at least 0 (a burst below 0 admits nothing, as one of 0)."""
    if cap is None or (cap <= 0 and table != "subscription"):
        return
    limit = cores_from_centicores(max(cap, 0)) if centicores else cap
    if booked > limit:
        found.append(OverCap(table, key, show_id, booked, limit, unit=unit, started=started, checked=time.monotonic()))


def over_cap_after_booking(
    *,
    show_id: str,
    alloc_id: str,
    folder_id: str,
    job_id: str,
    layer_id: str,
    gpus: int,
    started: float,
    finished_jobs: bool = True,
) -> list[OverCap]:
    """Keys of a just-committed booking whose SUM(proc) exceeds the cap in force: cores
    against the burst and the folder's and job's max cores, GPUs against their max GPUs;
    and its layer, if one of its procs is larger than the layer's per-frame max cores or GPUs.

    The booking script admits `booked + delta <= cap` (burst always; folder and job caps
    only when > 0; GPU caps only for a booking of GPUs, `gpus` > 0: a booking without any
    adds nothing to a GPU count a lowered cap left above it), so with Redis counting at least
    SUM(proc) this is never above. No script reads a layer's limits: the scheduler sizes the
    frame within them itself. `finished_jobs` False: the sums leave out FINISHED jobs' procs.
    `started` is when the booking began (time.monotonic()): with the check's own time it
    bounds the window in which a cap lowered or a show switched may excuse it.
    """
    params = dict(show=show_id, alloc=alloc_id, folder=folder_id, job=job_id, layer=layer_id, finished=finished_jobs)
    with connection.cursor() as cursor:
        cursor.execute(BOOKED_AND_CAPS, params)
        values = [None if v is None else int(v) for v in cursor.fetchone()]
    sub, folder = keys.sub(show_id=show_id, alloc_id=alloc_id), keys.folder(folder_id=folder_id)
    job, layer = keys.job(job_id=job_id), keys.layer(layer_id=layer_id)
    found: list[OverCap] = []
    for table, key, unit, centicores, column in cap_checks(sub=sub, folder=folder, job=job, layer=layer):
        if unit == "gpus" and gpus <= 0:
            continue
        booked, cap = values[column], values[column + 1]
        _over(found, table, key, show_id, booked, cap, unit=unit, started=started, centicores=centicores)
    return found


def cap_checks(*, sub: str, folder: str, job: str, layer: str) -> list[tuple[str, str, str, bool, int]]:
    """Each cap over_cap_after_booking judges, in its order: (table, key, unit, whether the cap is
    in centicores, the BOOKED_AND_CAPS column of its SUM; its cap is the next column)."""
    return [
        ("subscription", sub, "cores", True, 0),
        ("folder", folder, "cores", True, 2),
        ("job", job, "cores", True, 6),
        ("folder", folder, "gpus", False, 4),
        ("job", job, "gpus", False, 8),
        ("layer", layer, "centicores per frame", False, 10),
        ("layer", layer, "gpus per frame", False, 12),
    ]


def negative_counters(*, redis_keys: list[str]) -> list[tuple[str, str, int]]:
    """(key, field, value) of every booked counter below zero among `redis_keys`."""
    client = accounting_redis()
    found = []
    for start in range(0, len(redis_keys), 500):
        chunk = redis_keys[start : start + 500]
        with client.pipeline(transaction=False) as pipe:
            for key in chunk:
                pipe.hmget(key, "int_cores", "int_gpus")
            for key, (cores, gpus) in zip(chunk, pipe.execute()):
                for field_name, value in (("int_cores", cores), ("int_gpus", gpus)):
                    if value is not None and int(value) < 0:
                        found.append((key, field_name, int(value)))
    return found


def farm_keys(*, show_ids: list[str]) -> list[str]:
    """Every acct:* hash of these shows (layers included), enumerated from PostgreSQL."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT 'acct:sub:' || pk_show || ':' || pk_alloc FROM subscription WHERE pk_show = ANY(%(s)s)
            UNION ALL SELECT 'acct:point:' || pk_dept || ':' || pk_show FROM point WHERE pk_show = ANY(%(s)s)
            UNION ALL SELECT 'acct:folder:' || pk_folder FROM folder WHERE pk_show = ANY(%(s)s)
            UNION ALL SELECT 'acct:job:' || pk_job FROM job WHERE pk_show = ANY(%(s)s)
            UNION ALL SELECT 'acct:layer:' || l.pk_layer FROM layer l JOIN job j ON j.pk_job = l.pk_job WHERE j.pk_show = ANY(%(s)s)
            """,
            {"s": show_ids},
        )
        return [row[0] for row in cursor.fetchall()]
