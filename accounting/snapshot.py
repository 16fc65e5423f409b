"""What PostgreSQL says Redis should hold, for the reseeds and the drift inspector.

Both readers stream: the booked snapshot is one query through a server-side cursor, and
the limit rows are read table by table with iterators, so memory depends on the number of
keys, never on the number of procs.
"""
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

from django.db import connection, transaction

from accounting import keys
from accounting.models import FolderResource, JobResource, Point, Subscription
from accounting.units import cores_from_centicores
from shows.models import Show


def chunked(rows: Iterable, size: int) -> Iterator[list]:
    """Rows in lists of at most `size`, so a reseed or a drift check sends one script call
    per chunk while memory stays bounded by the chunk, not the farm."""
    iterator = iter(rows)
    while chunk := list(islice(iterator, size)):
        yield chunk

# One query: SUM(proc) per key, every proc converted to cores before summing
# (`int_cores_reserved / 100` is integer division, i.e. cores_from_centicores for the
# non-negative amounts a proc reserves), overlaid on a zero baseline of every
# sub/folder/job/point key of the shows, enumerated from the limit tables. Layers have no
# limit table and are not baselined. Local procs and FINISHED jobs are left out.
BOOKED = """
WITH booked AS (
    SELECT p.pk_show, h.pk_alloc, j.pk_folder, p.pk_job, p.pk_layer, j.pk_dept,
           p.int_cores_reserved / 100 AS cores, p.int_gpus_reserved AS gpus
      FROM proc p
      JOIN host h ON h.pk_host = p.pk_host
      JOIN job j ON j.pk_job = p.pk_job
     WHERE NOT p.b_local AND j.str_state <> 'FINISHED' AND p.pk_show = ANY(%(shows)s)
), sums AS (
    SELECT CASE
             WHEN GROUPING(pk_alloc) = 0 THEN 'acct:sub:' || pk_show || ':' || pk_alloc
             WHEN GROUPING(pk_folder) = 0 THEN 'acct:folder:' || pk_folder
             WHEN GROUPING(pk_job) = 0 THEN 'acct:job:' || pk_job
             WHEN GROUPING(pk_layer) = 0 THEN 'acct:layer:' || pk_layer
             ELSE 'acct:point:' || pk_dept || ':' || pk_show
           END AS key,
           SUM(cores) AS cores, SUM(gpus) AS gpus
      FROM booked
     GROUP BY GROUPING SETS ((pk_show, pk_alloc), (pk_folder), (pk_job), (pk_layer), (pk_dept, pk_show))
), baseline AS (
    SELECT 'acct:sub:' || pk_show || ':' || pk_alloc AS key FROM subscription WHERE pk_show = ANY(%(shows)s)
    UNION ALL
    SELECT 'acct:folder:' || f.pk_folder FROM folder_resource r JOIN folder f ON f.pk_folder = r.pk_folder
     WHERE f.pk_show = ANY(%(shows)s)
    UNION ALL
    SELECT 'acct:job:' || j.pk_job FROM job_resource r JOIN job j ON j.pk_job = r.pk_job
     WHERE j.pk_show = ANY(%(shows)s) AND j.str_state <> 'FINISHED'
    UNION ALL
    SELECT 'acct:point:' || pk_dept || ':' || pk_show FROM point WHERE pk_show = ANY(%(shows)s)
)
SELECT COALESCE(s.key, b.key), COALESCE(s.cores, 0)::bigint, COALESCE(s.gpus, 0)::bigint
  FROM sums s FULL JOIN baseline b ON b.key = s.key
"""

STREAM_ROWS = 5000


def managed_show_ids() -> list[str]:
    return list(Show.objects.filter(b_scheduler_managed=True).order_by("pk").values_list("pk", flat=True))


def booked_rows(*, show_ids: Sequence[str]) -> Iterator[tuple[str, int, int]]:
    """(key, int_cores, int_gpus) for every booked key of these shows, streamed."""
    with transaction.atomic():
        cursor = connection.chunked_cursor()
        try:
            cursor.execute(BOOKED, {"shows": list(show_ids)})
            while rows := cursor.fetchmany(STREAM_ROWS):
                yield from rows
        finally:
            cursor.close()


def limit_rows(*, show_ids: Sequence[str]) -> Iterator[tuple[str, str, int | str]]:
    """(key, field, value) of every limit field of these shows, cores converted, -1 verbatim."""
    shows = list(show_ids)
    for show_id, alloc_id, size, burst in (
        Subscription.objects.filter(show_id__in=shows).values_list("show_id", "alloc_id", "int_size", "int_burst").iterator()
    ):
        key = keys.sub(show_id=show_id, alloc_id=alloc_id)
        yield key, "size", cores_from_centicores(size)
        yield key, "burst", cores_from_centicores(burst)
    for folder_id, show_id, min_cores, max_cores, min_gpus, max_gpus in (
        FolderResource.objects.filter(folder__show_id__in=shows)
        .values_list("folder_id", "folder__show_id", "int_min_cores", "int_max_cores", "int_min_gpus", "int_max_gpus")
        .iterator()
    ):
        key = keys.folder(folder_id=folder_id)
        yield key, "int_min_cores", cores_from_centicores(min_cores)
        yield key, "int_max_cores", cores_from_centicores(max_cores)
        yield key, "int_min_gpus", min_gpus
        yield key, "int_max_gpus", max_gpus
        yield key, "show_id", show_id
    for job_id, max_cores, max_gpus, priority in (
        JobResource.objects.filter(job__show_id__in=shows).exclude(job__str_state="FINISHED")
        .values_list("job_id", "int_max_cores", "int_max_gpus", "int_priority")
        .iterator(chunk_size=STREAM_ROWS)
    ):
        key = keys.job(job_id=job_id)
        yield key, "int_max_cores", cores_from_centicores(max_cores)
        yield key, "int_max_gpus", max_gpus
        yield key, "int_priority", priority
    for dept_id, show_id, min_cores, min_gpus in (
        Point.objects.filter(show_id__in=shows).values_list("dept_id", "show_id", "int_min_cores", "int_min_gpus").iterator()
    ):
        key = keys.point(dept_id=dept_id, show_id=show_id)
        yield key, "int_min_cores", cores_from_centicores(min_cores)
        yield key, "int_min_gpus", min_gpus
