"""Assertions about the PG accounting tables against SUM(proc), for tests."""
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


def accounting_mismatches(*, show_id: str) -> list[tuple]:
    """Rows of the five tables whose booked columns differ from SUM(proc); [] when all agree."""
    bad = []
    with connection.cursor() as cursor:
        for table, sql in QUERIES.items():
            cursor.execute(sql, {"show": show_id})
            rows = cursor.fetchall()
            assert rows, f"no {table} rows for the show"
            bad += [(table, *row) for row in rows if (row[1], row[2]) != (row[3], row[4])]
    return bad


def drift_all_tables(*, show_id: str) -> None:
    """What a toggle mid-flight can leave behind: every booked column wrong (some negative)."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE subscription SET int_cores = -300, int_gpus = 7 WHERE pk_show = %s", [show_id])
        cursor.execute("UPDATE folder_resource r SET int_cores = 12345 FROM folder f "
                       "WHERE f.pk_folder = r.pk_folder AND f.pk_show = %s", [show_id])
        cursor.execute("UPDATE job_resource r SET int_cores = -1, int_local_cores = 9 FROM job j "
                       "WHERE j.pk_job = r.pk_job AND j.pk_show = %s", [show_id])
        cursor.execute("UPDATE layer_resource r SET int_gpus = 3 FROM job j "
                       "WHERE j.pk_job = r.pk_job AND j.pk_show = %s", [show_id])
        cursor.execute("UPDATE point SET int_cores = 42 WHERE pk_show = %s", [show_id])
