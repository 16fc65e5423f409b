"""What must hold: no booking above a cap, no drift after reconciling, no negative counter."""
from django.db import connection

from accounting.live import keys
from accounting.live.units import cores_from_centicores
from accounting.simulation.report import OverCap
from cuebot_acct.redis_factory import accounting_redis

# Booked cores per proc, truncated like accounting.live.units (PG's integer division of a
# non-negative bigint truncates), summed per key; and the cap in force right now.
BOOKED_AND_CAPS = """
SELECT (SELECT COALESCE(SUM(p.int_cores_reserved / 100), 0) FROM proc p JOIN host h ON h.pk_host = p.pk_host
         WHERE p.pk_show = %(show)s AND h.pk_alloc = %(alloc)s AND NOT p.b_local),
       (SELECT int_burst FROM subscription WHERE pk_show = %(show)s AND pk_alloc = %(alloc)s),
       (SELECT COALESCE(SUM(p.int_cores_reserved / 100), 0) FROM proc p JOIN job j ON j.pk_job = p.pk_job
         WHERE j.pk_folder = %(folder)s AND NOT p.b_local),
       (SELECT int_max_cores FROM folder_resource WHERE pk_folder = %(folder)s),
       (SELECT COALESCE(SUM(int_cores_reserved / 100), 0) FROM proc WHERE pk_job = %(job)s AND NOT b_local),
       (SELECT int_max_cores FROM job_resource WHERE pk_job = %(job)s)
"""


def over_cap_after_booking(*, show_id: str, alloc_id: str, folder_id: str, job_id: str) -> list[OverCap]:
    """Keys of a just-committed booking whose SUM(proc) in cores exceeds the cap in force.

    The booking script admits `booked + delta <= cap` (burst always; folder and job caps
    only when > 0), so with Redis counting at least SUM(proc) this is never above.
    """
    with connection.cursor() as cursor:
        cursor.execute(BOOKED_AND_CAPS, {"show": show_id, "alloc": alloc_id, "folder": folder_id, "job": job_id})
        sub_booked, burst, folder_booked, folder_max, job_booked, job_max = cursor.fetchone()
    sub_booked, folder_booked, job_booked = int(sub_booked), int(folder_booked), int(job_booked)
    found = []
    if burst is not None and sub_booked > cores_from_centicores(burst):
        found.append(OverCap("subscription", keys.sub(show_id=show_id, alloc_id=alloc_id), show_id, sub_booked, cores_from_centicores(burst)))
    if folder_max is not None and folder_max > 0 and folder_booked > cores_from_centicores(folder_max):
        found.append(OverCap("folder", keys.folder(folder_id=folder_id), show_id, folder_booked, cores_from_centicores(folder_max)))
    if job_max is not None and job_max > 0 and job_booked > cores_from_centicores(job_max):
        found.append(OverCap("job", keys.job(job_id=job_id), show_id, job_booked, cores_from_centicores(job_max)))
    return found


def negative_counters(*, redis_keys: list[str]) -> list[tuple[str, str, int]]:
    """(key, field, value) of every booked counter below zero among `redis_keys`."""
    client = accounting_redis()
    found = []
    for start in range(0, len(redis_keys), 500):
        chunk = redis_keys[start:start + 500]
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
