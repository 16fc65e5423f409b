"""Assertions about the PG accounting tables against SUM(proc), for tests."""
from django.db import connection

from accounting.reconcile.pg_truth import mismatches


def accounting_mismatches(*, show_id: str) -> list[tuple]:
    """Rows of the five tables whose booked columns differ from SUM(proc); [] when all agree."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM subscription WHERE pk_show = %s", [show_id])
        assert cursor.fetchone()[0], "no subscription rows for the show"
    return mismatches(show_id=show_id)


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
