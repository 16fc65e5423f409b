"""The statements that set Cuebot's five accounting tables to SUM(proc), one per table, in the lock
order: over a show's rows or some of them (update), or over rows a read found drifted (correct).

Counting rules (docs/cuebot-schema.md): a proc counts against the subscription
(its show, its host's alloc), its job's folder, its job, its layer and the point (its
job's dept and show). Local procs (b_local) count only in Cuebot's own local
bookkeeping: layer_resource and job_resource.int_local_cores/int_local_gpus. All sums
stay in centicores: PostgreSQL never sees cores.

A true SUM(proc) can be legitimately above a cap (an operator lowered a burst or a job's
max below current use). Cuebot's checks reject an UPDATE that raises a counter past a
cap it leaves unchanged, so the statements that meet such checks (subscription,
job_resource) move the cap in the same UPDATE, to -cap - 1 (never equal to cap, never
overflowing, and its own inverse), and a second UPDATE moves it back, as Cuebot's own
recalculate_subs() does. The caps end as they were; the counters end at SUM(proc).
"""

from dataclasses import dataclass

from accounting.lock_order import in_lock_order

SUBSCRIPTIONS = """
UPDATE subscription s
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0),
       int_burst = CASE WHEN COALESCE(t.cores, 0) > s.int_cores AND COALESCE(t.cores, 0) > s.int_burst
                        THEN -s.int_burst - 1 ELSE s.int_burst END
  FROM subscription s2
  LEFT JOIN (
        SELECT p.pk_show, h.pk_alloc, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p JOIN host h ON h.pk_host = p.pk_host
         WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
         GROUP BY p.pk_show, h.pk_alloc
       ) t ON t.pk_show = s2.pk_show AND t.pk_alloc = s2.pk_alloc
 WHERE s.pk_subscription = s2.pk_subscription AND s2.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR s.pk_subscription = ANY(%(only)s::text[]))
RETURNING s.pk_subscription, COALESCE(t.cores, 0) > s2.int_cores AND COALESCE(t.cores, 0) > s2.int_burst
"""
RESTORE_BURSTS = "UPDATE subscription SET int_burst = -int_burst - 1 WHERE pk_subscription = ANY(%(cores)s)"

FOLDERS = """
UPDATE folder_resource r
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0)
  FROM folder f
  LEFT JOIN (
        SELECT j.pk_folder, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p JOIN job j ON j.pk_job = p.pk_job
         WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
         GROUP BY j.pk_folder
       ) t ON t.pk_folder = f.pk_folder
 WHERE r.pk_folder = f.pk_folder AND f.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR r.pk_folder_resource = ANY(%(only)s::text[]))
"""

JOBS = """
UPDATE job_resource r
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0),
       int_local_cores = COALESCE(t.local_cores, 0), int_local_gpus = COALESCE(t.local_gpus, 0),
       int_max_cores = CASE WHEN COALESCE(t.cores, 0) > r.int_cores AND COALESCE(t.cores, 0) > r.int_max_cores
                            THEN -r.int_max_cores - 1 ELSE r.int_max_cores END,
       int_max_gpus = CASE WHEN COALESCE(t.gpus, 0) > r.int_gpus AND COALESCE(t.gpus, 0) > r.int_max_gpus
                           THEN -r.int_max_gpus - 1 ELSE r.int_max_gpus END
  FROM job j
  JOIN job_resource before ON before.pk_job = j.pk_job
  LEFT JOIN (
        SELECT p.pk_job,
               SUM(p.int_cores_reserved) FILTER (WHERE NOT p.b_local) AS cores,
               SUM(p.int_gpus_reserved) FILTER (WHERE NOT p.b_local) AS gpus,
               SUM(p.int_cores_reserved) FILTER (WHERE p.b_local) AS local_cores,
               SUM(p.int_gpus_reserved) FILTER (WHERE p.b_local) AS local_gpus
          FROM proc p
         WHERE p.pk_show = ANY(%(shows)s)
         GROUP BY p.pk_job
       ) t ON t.pk_job = j.pk_job
 WHERE r.pk_job_resource = before.pk_job_resource AND j.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR r.pk_job_resource = ANY(%(only)s::text[]))
RETURNING r.pk_job_resource,
          COALESCE(t.cores, 0) > before.int_cores AND COALESCE(t.cores, 0) > before.int_max_cores,
          COALESCE(t.gpus, 0) > before.int_gpus AND COALESCE(t.gpus, 0) > before.int_max_gpus
"""
RESTORE_JOB_MAXIMA = """
UPDATE job_resource
   SET int_max_cores = CASE WHEN pk_job_resource = ANY(%(cores)s) THEN -int_max_cores - 1 ELSE int_max_cores END,
       int_max_gpus = CASE WHEN pk_job_resource = ANY(%(gpus)s) THEN -int_max_gpus - 1 ELSE int_max_gpus END
 WHERE pk_job_resource = ANY(%(cores)s) OR pk_job_resource = ANY(%(gpus)s)
"""

LAYERS = """
UPDATE layer_resource r
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0)
  FROM layer l
  JOIN job j ON j.pk_job = l.pk_job
  LEFT JOIN (
        SELECT p.pk_layer, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p
         WHERE p.pk_show = ANY(%(shows)s)
         GROUP BY p.pk_layer
       ) t ON t.pk_layer = l.pk_layer
 WHERE r.pk_layer = l.pk_layer AND j.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR r.pk_layer_resource = ANY(%(only)s::text[]))
"""

POINTS = """
UPDATE point pt
   SET int_cores = COALESCE(t.cores, 0), int_gpus = COALESCE(t.gpus, 0)
  FROM point pt2
  LEFT JOIN (
        SELECT j.pk_dept, j.pk_show, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p JOIN job j ON j.pk_job = p.pk_job
         WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
         GROUP BY j.pk_dept, j.pk_show
       ) t ON t.pk_dept = pt2.pk_dept AND t.pk_show = pt2.pk_show
 WHERE pt.pk_point = pt2.pk_point AND pt2.pk_show = ANY(%(shows)s)
   AND (%(only)s::text[] IS NULL OR pt.pk_point = ANY(%(only)s::text[]))
"""


# A repair's correction of drifted rows, the arrays in primary-key order: each row set to the sums
# read, only if it still holds what was read (drifted pairs only; a pair given NULL is left as it
# is). A row that changed between the read and its lock (a booking or a release, or another repair
# or recompute that set it) is left to the caller, who recomputes it from its sums now that the lock
# is held: corrected by its drift instead, a row another repair had set meanwhile would be
# corrected twice. A writer that moves procs and leaves the rows alone (the scheduler's, on a show
# whose flag is changing) is missed in that window of milliseconds as it is after the lock by any
# recompute: the settling recompute of a switch is there for it. A rise past a cap moves the cap
# (as above); RETURNING names the rows set and which caps were moved.
_READ = "unnest(%(pks)s::text[], %(stored_cores)s::bigint[], %(stored_gpus)s::bigint[], %(cores)s::bigint[], %(gpus)s::bigint[])"
_READ_AS = "AS d(pk, stored_cores, stored_gpus, cores, gpus)"
CORRECT_SUBSCRIPTIONS = f"""
UPDATE subscription s
   SET int_cores = d.cores, int_gpus = d.gpus,
       int_burst = CASE WHEN d.cores > s2.int_cores AND d.cores > s2.int_burst THEN -s2.int_burst - 1 ELSE s2.int_burst END
  FROM subscription s2, {_READ} {_READ_AS}
 WHERE s.pk_subscription = d.pk AND s2.pk_subscription = d.pk
   AND s2.int_cores = d.stored_cores AND s2.int_gpus = d.stored_gpus
RETURNING s.pk_subscription, d.cores > s2.int_cores AND d.cores > s2.int_burst
"""
CORRECT_JOBS = """
UPDATE job_resource r
   SET int_cores = COALESCE(d.cores, b.int_cores), int_gpus = COALESCE(d.gpus, b.int_gpus),
       int_local_cores = COALESCE(d.local_cores, b.int_local_cores),
       int_local_gpus = COALESCE(d.local_gpus, b.int_local_gpus),
       int_max_cores = CASE WHEN d.cores > b.int_cores AND d.cores > b.int_max_cores
                            THEN -b.int_max_cores - 1 ELSE b.int_max_cores END,
       int_max_gpus = CASE WHEN d.gpus > b.int_gpus AND d.gpus > b.int_max_gpus
                           THEN -b.int_max_gpus - 1 ELSE b.int_max_gpus END
  FROM job_resource b,
       unnest(%(pks)s::text[], %(stored_cores)s::bigint[], %(stored_gpus)s::bigint[], %(cores)s::bigint[],
              %(gpus)s::bigint[], %(stored_local_cores)s::bigint[], %(stored_local_gpus)s::bigint[],
              %(local_cores)s::bigint[], %(local_gpus)s::bigint[])
         AS d(pk, stored_cores, stored_gpus, cores, gpus, stored_local_cores, stored_local_gpus, local_cores, local_gpus)
 WHERE r.pk_job_resource = d.pk AND b.pk_job_resource = d.pk
   AND (d.cores IS NULL OR (b.int_cores, b.int_gpus) = (d.stored_cores, d.stored_gpus))
   AND (d.local_cores IS NULL OR (b.int_local_cores, b.int_local_gpus) = (d.stored_local_cores, d.stored_local_gpus))
RETURNING r.pk_job_resource, COALESCE(d.cores > b.int_cores AND d.cores > b.int_max_cores, false),
          COALESCE(d.gpus > b.int_gpus AND d.gpus > b.int_max_gpus, false)
"""


# What a correction is given per row: the pair compared (stored and true, as read), then
# job_resource's local pair.
READ_COLUMNS = (
    "stored_cores",
    "stored_gpus",
    "cores",
    "gpus",
    "stored_local_cores",
    "stored_local_gpus",
    "local_cores",
    "local_gpus",
)


def _correct_uncapped(*, table: str, pk: str) -> str:
    return (
        f"UPDATE {table} t SET int_cores = d.cores, int_gpus = d.gpus FROM {_READ} {_READ_AS} "
        f"WHERE t.{pk} = d.pk AND t.int_cores = d.stored_cores AND t.int_gpus = d.stored_gpus RETURNING t.{pk}"
    )


@dataclass(frozen=True)
class TableRecompute:
    table: str
    update: str  # %(only)s NULL: every row of the shows; an array of keys: those rows alone
    correct: str  # the rows of %(pks)s still as read set to the sums read, returning those set
    keys: tuple[str, ...]  # the columns a release names the table's rows by (unique together)
    pk: str
    restore: str | None = None  # moves back the caps `update` or `correct` moved

    @property
    def lock_keys(self) -> str:
        """The rows of %(pks)s, locked in primary-key order."""
        return f"SELECT {self.pk} FROM {self.table} WHERE {self.pk} = ANY(%(pks)s) ORDER BY {self.pk} FOR NO KEY UPDATE"

    @property
    def lock_named(self) -> str:
        """The rows named by one text[] per key column (%(k0)s, %(k1)s), locked in primary-key
        order, returning their primary keys: the rows a release touches, not the show's."""
        arrays = ", ".join(f"%(k{i})s::text[]" for i in range(len(self.keys)))
        names = ", ".join(f"k{i}" for i in range(len(self.keys)))
        match = " AND ".join(f"t.{key} = k.k{i}" for i, key in enumerate(self.keys))
        return (
            f"SELECT t.{self.pk} FROM {self.table} t JOIN unnest({arrays}) AS k({names}) ON {match} "
            f"ORDER BY t.{self.pk} FOR NO KEY UPDATE OF t"
        )


TABLES = in_lock_order(
    (
        TableRecompute(
            "subscription",
            SUBSCRIPTIONS,
            CORRECT_SUBSCRIPTIONS,
            keys=("pk_show", "pk_alloc"),
            pk="pk_subscription",
            restore=RESTORE_BURSTS,
        ),
        TableRecompute(
            "layer_resource",
            LAYERS,
            _correct_uncapped(table="layer_resource", pk="pk_layer_resource"),
            keys=("pk_layer",),
            pk="pk_layer_resource",
        ),
        TableRecompute(
            "job_resource", JOBS, CORRECT_JOBS, keys=("pk_job",), pk="pk_job_resource", restore=RESTORE_JOB_MAXIMA
        ),
        TableRecompute(
            "folder_resource",
            FOLDERS,
            _correct_uncapped(table="folder_resource", pk="pk_folder_resource"),
            keys=("pk_folder",),
            pk="pk_folder_resource",
        ),
        TableRecompute(
            "point", POINTS, _correct_uncapped(table="point", pk="pk_point"), keys=("pk_dept", "pk_show"), pk="pk_point"
        ),
    )
)
