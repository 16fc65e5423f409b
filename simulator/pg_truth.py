"""The PG accounting tables against SUM(proc), read-only: for the simulator's invariants and the tests.

Counting rules as accounting.reconcile.recompute: local procs count only in layer_resource and
job_resource's int_local_*; the point is the job's department and show.
"""

from django.db import connection

# Per table: key, stored cores, stored gpus, then the same two from SUM(proc); local procs count
# only in layer_resource and job_resource's int_local_*.
QUERIES = {
    "subscription": """
        SELECT s.pk_subscription, s.int_cores, s.int_gpus,
               COALESCE((SELECT SUM(p.int_cores_reserved) FROM proc p JOIN host h ON h.pk_host = p.pk_host
                          WHERE p.pk_show = s.pk_show AND h.pk_alloc = s.pk_alloc AND NOT p.b_local), 0),
               COALESCE((SELECT SUM(p.int_gpus_reserved) FROM proc p JOIN host h ON h.pk_host = p.pk_host
                          WHERE p.pk_show = s.pk_show AND h.pk_alloc = s.pk_alloc AND NOT p.b_local), 0)
          FROM subscription s WHERE s.pk_show = %(show)s""",
    "folder_resource": """
        SELECT r.pk_folder, r.int_cores, r.int_gpus,
               COALESCE((SELECT SUM(p.int_cores_reserved) FROM proc p JOIN job j ON j.pk_job = p.pk_job
                          WHERE j.pk_folder = r.pk_folder AND NOT p.b_local), 0),
               COALESCE((SELECT SUM(p.int_gpus_reserved) FROM proc p JOIN job j ON j.pk_job = p.pk_job
                          WHERE j.pk_folder = r.pk_folder AND NOT p.b_local), 0)
          FROM folder_resource r JOIN folder f ON f.pk_folder = r.pk_folder WHERE f.pk_show = %(show)s""",
    "job_resource": """
        SELECT r.pk_job, r.int_cores, r.int_gpus,
               COALESCE((SELECT SUM(p.int_cores_reserved) FROM proc p WHERE p.pk_job = r.pk_job AND NOT p.b_local), 0),
               COALESCE((SELECT SUM(p.int_gpus_reserved) FROM proc p WHERE p.pk_job = r.pk_job AND NOT p.b_local), 0)
          FROM job_resource r JOIN job j ON j.pk_job = r.pk_job WHERE j.pk_show = %(show)s""",
    "job_resource local": """
        SELECT r.pk_job, r.int_local_cores, r.int_local_gpus,
               COALESCE((SELECT SUM(p.int_cores_reserved) FROM proc p WHERE p.pk_job = r.pk_job AND p.b_local), 0),
               COALESCE((SELECT SUM(p.int_gpus_reserved) FROM proc p WHERE p.pk_job = r.pk_job AND p.b_local), 0)
          FROM job_resource r JOIN job j ON j.pk_job = r.pk_job WHERE j.pk_show = %(show)s""",
    "layer_resource": """
        SELECT r.pk_layer, r.int_cores, r.int_gpus,
               COALESCE((SELECT SUM(p.int_cores_reserved) FROM proc p WHERE p.pk_layer = r.pk_layer), 0),
               COALESCE((SELECT SUM(p.int_gpus_reserved) FROM proc p WHERE p.pk_layer = r.pk_layer), 0)
          FROM layer_resource r JOIN job j ON j.pk_job = r.pk_job WHERE j.pk_show = %(show)s""",
    "point": """
        SELECT pt.pk_point, pt.int_cores, pt.int_gpus,
               COALESCE((SELECT SUM(p.int_cores_reserved) FROM proc p JOIN job j ON j.pk_job = p.pk_job
                          WHERE j.pk_dept = pt.pk_dept AND j.pk_show = pt.pk_show AND NOT p.b_local), 0),
               COALESCE((SELECT SUM(p.int_gpus_reserved) FROM proc p JOIN job j ON j.pk_job = p.pk_job
                          WHERE j.pk_dept = pt.pk_dept AND j.pk_show = pt.pk_show AND NOT p.b_local), 0)
          FROM point pt WHERE pt.pk_show = %(show)s""",
}


def mismatches(*, show_id: str) -> list[tuple]:
    """Rows of the five tables whose booked columns differ from SUM(proc): (table, key, cores,
    gpus, true cores, true gpus); [] when all agree."""
    with connection.cursor() as cursor:
        return mismatches_in(cursor=cursor, show_ids=[show_id])


def mismatches_in(*, cursor, show_ids: list[str]) -> list[tuple]:
    """mismatches() of several shows on the caller's cursor: in its transaction, so that a
    REPEATABLE READ caller judges every table against one snapshot."""
    bad = []
    for show_id in show_ids:
        for table, sql in QUERIES.items():
            cursor.execute(sql, {"show": show_id})
            bad += [(table, *row) for row in cursor.fetchall() if (row[1], row[2]) != (row[3], row[4])]
    return bad


# A host's idle amounts against its capacity minus its procs' reservations (cores, memory,
# GPUs); a local reservation's idle amounts against its maxima minus its local procs'.
HOST_IDLE_DRIFT = """
SELECT h.pk_host, h.int_cores_idle, h.int_cores - COALESCE(t.cores, 0), h.int_mem_idle, h.int_mem - COALESCE(t.mem, 0),
       h.int_gpus_idle, h.int_gpus - COALESCE(t.gpus, 0)
  FROM host h LEFT JOIN (
        SELECT pk_host, SUM(int_cores_reserved) AS cores, SUM(int_mem_reserved) AS mem, SUM(int_gpus_reserved) AS gpus
          FROM proc GROUP BY pk_host
       ) t ON t.pk_host = h.pk_host
 WHERE h.pk_host = ANY(%(hosts)s)
   AND (h.int_cores_idle, h.int_mem_idle, h.int_gpus_idle)
       <> (h.int_cores - COALESCE(t.cores, 0), h.int_mem - COALESCE(t.mem, 0), h.int_gpus - COALESCE(t.gpus, 0))
"""
HOST_LOCAL_DRIFT = """
SELECT hl.pk_host_local, hl.int_cores_idle, hl.int_cores_max - COALESCE(t.cores, 0),
       hl.int_mem_idle, hl.int_mem_max - COALESCE(t.mem, 0), hl.int_gpus_idle, hl.int_gpus_max - COALESCE(t.gpus, 0)
  FROM host_local hl LEFT JOIN (
        SELECT pk_host, pk_job, SUM(int_cores_reserved) AS cores, SUM(int_mem_reserved) AS mem,
               SUM(int_gpus_reserved) AS gpus
          FROM proc WHERE b_local GROUP BY pk_host, pk_job
       ) t ON t.pk_host = hl.pk_host AND t.pk_job = hl.pk_job
 WHERE hl.pk_host = ANY(%(hosts)s)
   AND (hl.int_cores_idle, hl.int_mem_idle, hl.int_gpus_idle)
       <> (hl.int_cores_max - COALESCE(t.cores, 0), hl.int_mem_max - COALESCE(t.mem, 0), hl.int_gpus_max - COALESCE(t.gpus, 0))
"""


def host_idle_drift(*, cursor, host_ids: list[str]) -> list[tuple]:
    """("host" or "host_local", key, idle and true idle for cores, memory and GPUs) of every host
    and local reservation of these hosts whose idle amounts are not capacity minus its procs."""
    cursor.execute(HOST_IDLE_DRIFT, {"hosts": host_ids})
    drift = [("host", *row) for row in cursor.fetchall()]
    cursor.execute(HOST_LOCAL_DRIFT, {"hosts": host_ids})
    return drift + [("host_local", *row) for row in cursor.fetchall()]


# A booking's caps, judged from SUM(proc) of the keys its procs count in (not from the counters
# it wrote): (table, key, unit, SUM(proc), cap) for each key above its cap. Caps are in centicores
# (GPUs in units); a folder's -1 is unlimited, a subscription's burst and a job's maxima are not.
OVER_CAP = {
    "subscription": """
SELECT 'subscription', s.pk_subscription, 'cores', SUM(p.int_cores_reserved), s.int_burst
  FROM subscription s JOIN host h ON h.pk_alloc = s.pk_alloc JOIN proc p ON p.pk_host = h.pk_host AND p.pk_show = s.pk_show
 WHERE NOT p.b_local AND (s.pk_show, s.pk_alloc) IN (
        SELECT p2.pk_show, h2.pk_alloc FROM proc p2 JOIN host h2 ON h2.pk_host = p2.pk_host
         WHERE p2.pk_proc = ANY(%(procs)s) AND NOT p2.b_local)
 GROUP BY s.pk_subscription, s.int_burst HAVING SUM(p.int_cores_reserved) > s.int_burst""",
    "folder_resource": """
WITH touched AS (
     SELECT j.pk_folder, SUM(p.int_gpus_reserved) AS gpus FROM proc p JOIN job j ON j.pk_job = p.pk_job
      WHERE p.pk_proc = ANY(%(procs)s) AND NOT p.b_local GROUP BY j.pk_folder)
SELECT 'folder_resource', r.pk_folder_resource, u.unit, u.booked, u.cap
  FROM touched tt JOIN folder_resource r ON r.pk_folder = tt.pk_folder
  JOIN (SELECT j.pk_folder, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p JOIN job j ON j.pk_job = p.pk_job
         WHERE NOT p.b_local AND j.pk_folder IN (SELECT pk_folder FROM touched) GROUP BY j.pk_folder) t
    ON t.pk_folder = r.pk_folder
  CROSS JOIN LATERAL (VALUES ('cores', t.cores, r.int_max_cores), ('gpus', t.gpus, r.int_max_gpus)) AS u(unit, booked, cap)
 WHERE u.cap >= 0 AND u.booked > u.cap AND (u.unit = 'cores' OR tt.gpus > 0)""",
    "job_resource": """
WITH touched AS (
     SELECT pk_job, SUM(int_gpus_reserved) AS gpus FROM proc WHERE pk_proc = ANY(%(procs)s) AND NOT b_local GROUP BY pk_job)
SELECT 'job_resource', r.pk_job_resource, u.unit, u.booked, u.cap
  FROM touched tt JOIN job_resource r ON r.pk_job = tt.pk_job
  JOIN (SELECT pk_job, SUM(int_cores_reserved) AS cores, SUM(int_gpus_reserved) AS gpus
          FROM proc WHERE NOT b_local AND pk_job IN (SELECT pk_job FROM touched) GROUP BY pk_job) t ON t.pk_job = r.pk_job
  CROSS JOIN LATERAL (VALUES ('cores', t.cores, r.int_max_cores::bigint), ('gpus', t.gpus, r.int_max_gpus::bigint))
       AS u(unit, booked, cap)
 WHERE u.booked > u.cap AND (u.unit = 'cores' OR tt.gpus > 0)""",
    "layer": """
SELECT 'layer', p.pk_proc, u.unit, u.booked, u.cap
  FROM proc p JOIN layer l ON l.pk_layer = p.pk_layer
  CROSS JOIN LATERAL (VALUES ('cores', p.int_cores_reserved, l.int_cores_max),
                             ('gpus', p.int_gpus_reserved::bigint, l.int_gpus_max)) AS u(unit, booked, cap)
 WHERE p.pk_proc = ANY(%(procs)s) AND u.cap > 0 AND u.booked > u.cap""",
}


def over_caps(*, cursor, proc_ids: list[str]) -> list[tuple]:
    """Caps these just-booked procs leave exceeded, read in the booking's own transaction while it
    holds its rows (so each cap is the one in force for the booking, and no other booking of
    those keys is half done): [] when every cap holds."""
    over = []
    for sql in OVER_CAP.values():
        cursor.execute(sql, {"procs": proc_ids})
        over += cursor.fetchall()
    return over


NEGATIVE = """
SELECT 'subscription', pk_subscription, int_cores, int_gpus FROM subscription
 WHERE pk_show = ANY(%(shows)s) AND (int_cores < 0 OR int_gpus < 0)
UNION ALL SELECT 'folder_resource', r.pk_folder, r.int_cores, r.int_gpus FROM folder_resource r
  JOIN folder f ON f.pk_folder = r.pk_folder WHERE f.pk_show = ANY(%(shows)s) AND (r.int_cores < 0 OR r.int_gpus < 0)
UNION ALL SELECT 'job_resource', r.pk_job, r.int_cores, r.int_gpus FROM job_resource r JOIN job j ON j.pk_job = r.pk_job
 WHERE j.pk_show = ANY(%(shows)s) AND (r.int_cores < 0 OR r.int_gpus < 0 OR r.int_local_cores < 0 OR r.int_local_gpus < 0)
UNION ALL SELECT 'layer_resource', r.pk_layer, r.int_cores, r.int_gpus FROM layer_resource r JOIN job j ON j.pk_job = r.pk_job
 WHERE j.pk_show = ANY(%(shows)s) AND (r.int_cores < 0 OR r.int_gpus < 0)
UNION ALL SELECT 'point', pk_point, int_cores, int_gpus FROM point WHERE pk_show = ANY(%(shows)s) AND (int_cores < 0 OR int_gpus < 0)
"""


def negative_rows(*, show_ids: list[str]) -> list[tuple]:
    """(table, key, cores, gpus) of every accounting row of these shows with a counter below zero."""
    with connection.cursor() as cursor:
        cursor.execute(NEGATIVE, {"shows": show_ids})
        return cursor.fetchall()
