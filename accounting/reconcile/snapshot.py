"""What PostgreSQL says Redis should hold, for the reseeds and the drift inspector.

Both readers stream: the booked snapshot is one query through a server-side cursor, and
the limit rows are read table by table with iterators, so memory depends on the number of
keys, never on the number of procs.
"""

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from itertools import islice

from django.db import connection, transaction

from accounting.live import keys
from accounting.live.units import UNLIMITED, cores_from_centicores
from accounting.models import FolderResource, JobResource, Point, Subscription
from shows.models import CuebotTable, Show


def chunked(rows: Iterable, size: int) -> Iterator[list]:
    """Rows in lists of at most `size`, so a reseed or a drift check sends one script call
    per chunk while memory stays bounded by the chunk, not the farm."""
    iterator = iter(rows)
    while chunk := list(islice(iterator, size)):
        yield chunk


# One query: SUM(proc) per key, every proc converted to cores before summing
# (`int_cores_reserved / 100` is integer division, i.e. cores_from_centicores for the
# non-negative amounts a proc reserves), overlaid on a zero baseline of every
# sub/folder/job/point key of the shows, enumerated from the limit tables, and of every layer
# of their jobs not FINISHED (from layer_resource, Cuebot's row per layer): a key whose last
# proc went is written 0, so a value a reseed under load counted twice (high, safe) cannot
# outlive the procs that carried it. The point is the job's department and show, as Cuebot
# counts it. Counting rule (docs/redis-protocol.md, "What a proc counts for"): a proc that
# exists is booked until it is released, whatever its job's state: a killed job is
# FINISHED before its procs go, and a snapshot that left them out would be lowered by
# their releases a second time. Only local procs are left out (they never count against
# these keys); a proc whose job row is gone still counts for its subscription, job and
# layer, which its release takes it off, and for no folder or point (unknown, and not
# taken off either). A fourth column gives the cores as the scheduler's own recompute
# writes them, summed in centicores and converted once, for the drift inspector to tell
# that rounding apart from drift.
BOOKED = """
WITH booked AS (
    SELECT p.pk_show, h.pk_alloc, j.pk_folder, p.pk_job, p.pk_layer, j.pk_dept, j.pk_show AS point_show,
           p.int_cores_reserved / 100 AS cores, p.int_cores_reserved AS centicores, p.int_gpus_reserved AS gpus
      FROM proc p
      JOIN host h ON h.pk_host = p.pk_host
      LEFT JOIN job j ON j.pk_job = p.pk_job
     WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
       AND (%(finished_jobs)s OR j.str_state IS DISTINCT FROM 'FINISHED')
), sums AS (
    SELECT CASE
             WHEN GROUPING(pk_alloc) = 0 THEN 'acct:sub:' || pk_show || ':' || pk_alloc
             WHEN GROUPING(pk_folder) = 0 THEN 'acct:folder:' || pk_folder
             WHEN GROUPING(pk_job) = 0 THEN 'acct:job:' || pk_job
             WHEN GROUPING(pk_layer) = 0 THEN 'acct:layer:' || pk_layer
             ELSE 'acct:point:' || pk_dept || ':' || point_show
           END AS key,
           SUM(cores) AS cores, SUM(gpus) AS gpus, SUM(centicores) / 100 AS summed_first
      FROM booked
     GROUP BY GROUPING SETS ((pk_show, pk_alloc), (pk_folder), (pk_job), (pk_layer), (pk_dept, point_show))
), baseline AS (
    SELECT 'acct:sub:' || pk_show || ':' || pk_alloc AS key FROM subscription WHERE pk_show = ANY(%(shows)s)
    UNION ALL
    SELECT 'acct:folder:' || f.pk_folder FROM folder_resource r JOIN folder f ON f.pk_folder = r.pk_folder
     WHERE f.pk_show = ANY(%(shows)s)
    UNION ALL
    SELECT 'acct:job:' || j.pk_job FROM job_resource r JOIN job j ON j.pk_job = r.pk_job
     WHERE j.pk_show = ANY(%(shows)s) AND j.str_state <> 'FINISHED'
    UNION ALL
    SELECT 'acct:layer:' || r.pk_layer FROM layer_resource r JOIN job j ON j.pk_job = r.pk_job
     WHERE j.pk_show = ANY(%(shows)s) AND j.str_state <> 'FINISHED'
    UNION ALL
    SELECT 'acct:point:' || pk_dept || ':' || pk_show FROM point WHERE pk_show = ANY(%(shows)s)
)
SELECT COALESCE(s.key, b.key), COALESCE(s.cores, 0)::bigint, COALESCE(s.gpus, 0)::bigint,
       COALESCE(s.summed_first, 0)::bigint
  FROM sums s FULL JOIN baseline b ON b.key = s.key
 -- a group keyed on a NULL id (the folder and point of a proc whose job row is gone) has no key
 WHERE COALESCE(s.key, b.key) IS NOT NULL
"""

STREAM_ROWS = 5000


def _count(value: int) -> int:
    return value


def _burst(centicores: int) -> int:
    """The scheduler's own limit reseed writes a burst of -1 as 0 (-1 is no "unlimited" for a
    burst); Redis holds what it would write, whoever writes it."""
    return 0 if centicores == UNLIMITED else cores_from_centicores(centicores)


# The limit fields of each table as Redis holds them: (Redis field, PG column, conversion):
# cores from centicores (-1 verbatim), a count passed as is, or a burst.
LIMIT_FIELDS = {
    Subscription: (("size", "int_size", cores_from_centicores), ("burst", "int_burst", _burst)),
    FolderResource: (
        ("int_min_cores", "int_min_cores", cores_from_centicores),
        ("int_max_cores", "int_max_cores", cores_from_centicores),
        ("int_min_gpus", "int_min_gpus", _count),
        ("int_max_gpus", "int_max_gpus", _count),
    ),
    JobResource: (
        ("int_max_cores", "int_max_cores", cores_from_centicores),
        ("int_max_gpus", "int_max_gpus", _count),
        ("int_priority", "int_priority", _count),
    ),
    Point: (("int_min_cores", "int_min_cores", cores_from_centicores), ("int_min_gpus", "int_min_gpus", _count)),
}


def redis_limits(*, model: type[CuebotTable], column: Callable[[str], int]) -> list[tuple[str, int]]:
    """(Redis field, value) of one limit row, reading each PG column through `column`."""
    return [(field, convert(column(name))) for field, name, convert in LIMIT_FIELDS[model]]


def _columns(model: type[CuebotTable]) -> list[str]:
    return [name for _, name, _ in LIMIT_FIELDS[model]]


def managed_show_ids() -> list[str]:
    return list(Show.objects.filter(b_scheduler_managed=True).order_by("pk").values_list("pk", flat=True))


def booked_rows(
    *, show_ids: Sequence[str], finished_jobs: bool = True
) -> Generator[tuple[str, int, int, int], None, None]:
    """(key, int_cores, int_gpus, int_cores summed first) for every booked key of these shows, streamed.

    finished_jobs=False leaves out the procs of FINISHED jobs, as the Rust scheduler's own
    reseed does: only for the simulator's model of that reseeder, never for a write here.
    """
    with transaction.atomic():
        cursor = connection.chunked_cursor()
        try:
            cursor.execute(BOOKED, {"shows": list(show_ids), "finished_jobs": finished_jobs})
            while rows := cursor.fetchmany(STREAM_ROWS):
                yield from rows
        finally:
            cursor.close()


def limit_rows(*, show_ids: Sequence[str]) -> Iterator[tuple[str, str, int | str]]:
    """(key, field, value) of every limit field of these shows, cores converted, -1 verbatim."""
    shows = list(show_ids)
    tables = (
        (
            Subscription,
            Subscription.objects.filter(show_id__in=shows),
            ("show_id", "alloc_id"),
            lambda row: keys.sub(show_id=row["show_id"], alloc_id=row["alloc_id"]),
        ),
        (
            FolderResource,
            FolderResource.objects.filter(folder__show_id__in=shows),
            ("folder_id", "folder__show_id"),
            lambda row: keys.folder(folder_id=row["folder_id"]),
        ),
        (
            JobResource,
            JobResource.objects.filter(job__show_id__in=shows).exclude(job__str_state="FINISHED"),
            ("job_id",),
            lambda row: keys.job(job_id=row["job_id"]),
        ),
        (
            Point,
            Point.objects.filter(show_id__in=shows),
            ("dept_id", "show_id"),
            lambda row: keys.point(dept_id=row["dept_id"], show_id=row["show_id"]),
        ),
    )
    for model, rows, ids, key_of in tables:
        for row in rows.values(*ids, *_columns(model)).iterator(chunk_size=STREAM_ROWS):
            key = key_of(row)
            for field, value in redis_limits(model=model, column=row.__getitem__):
                yield key, field, value
            if model is FolderResource:
                yield key, "show_id", row["folder__show_id"]
