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
    bad = []
    with connection.cursor() as cursor:
        for table, sql in QUERIES.items():
            cursor.execute(sql, {"show": show_id})
            bad += [(table, *row) for row in cursor.fetchall() if (row[1], row[2]) != (row[3], row[4])]
    return bad


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
