"""Cuebot's own accounting tables against SUM(proc), read-only: which rows drifted, and by how much.

Why it exists: since the Maestro era (OpenCue v1.34.20) Cuebot writes subscription,
layer_resource, job_resource, folder_resource and point for every show, flagged or not, and
Maestro plans each tick from those rows. Nothing upstream re-derives them any more except
recalculate_subs() (subscriptions of unflagged shows only), so a counter that drifted from
its procs stays wrong and Maestro books against it. In the redis and NOTIFY eras Cuebot owns
only the unflagged shows' rows; the flagged ones are the scheduler's (accounting.reconcile.drift).

Counting rules are accounting.reconcile.recompute's, the repair's: a non-local proc counts in
the subscription (its show, its host's allocation), its job's folder, its job, its layer and
the point (its job's department and show); a local proc counts only in layer_resource and
job_resource.int_local_cores/int_local_gpus. One statement scans proc once (grouping sets,
as the bare sums would) and compares in the same snapshot, so a booking or a release, which
writes proc and the five tables in one transaction, is never half seen. Cores stay
centicores here; `signed_cores` is the one conversion every face shows.
"""
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection, transaction

from accounting.live.units import cores_number
from cuebot_acct.schedulers import cuebot_owns_every_show
from shows.models import Show

# %(shows)s NULL: every show (the Maestro era's farm-wide check, with no array to test per
# proc); an array: those shows. Each comparison yields table, columns, the row's key, the ids
# that name it, stored and true centicores and GPUs; names are joined on the drifted rows only.
DRIFT = """
WITH procs AS (
    SELECT p.pk_show, h.pk_alloc, j.pk_folder, p.pk_job, p.pk_layer, j.pk_dept, j.pk_show AS job_show, p.b_local,
           p.int_cores_reserved AS cores, p.int_gpus_reserved AS gpus
      FROM proc p
      JOIN host h ON h.pk_host = p.pk_host
      LEFT JOIN job j ON j.pk_job = p.pk_job
     WHERE %(shows)s::text[] IS NULL OR p.pk_show = ANY(%(shows)s)
), sums AS (
    SELECT GROUPING(pk_show, pk_alloc, pk_folder, pk_job, pk_layer, pk_dept, job_show) AS set_id,
           pk_show, pk_alloc, pk_folder, pk_job, pk_layer, pk_dept, job_show,
           COALESCE(SUM(cores) FILTER (WHERE NOT b_local), 0)::bigint AS cores,
           COALESCE(SUM(gpus) FILTER (WHERE NOT b_local), 0)::bigint AS gpus,
           COALESCE(SUM(cores), 0)::bigint AS all_cores, COALESCE(SUM(gpus), 0)::bigint AS all_gpus,
           COALESCE(SUM(cores) FILTER (WHERE b_local), 0)::bigint AS local_cores,
           COALESCE(SUM(gpus) FILTER (WHERE b_local), 0)::bigint AS local_gpus
      FROM procs
     GROUP BY GROUPING SETS ((pk_show, pk_alloc), (pk_folder), (pk_job), (pk_layer), (pk_dept, job_show))
), drifted AS (
    SELECT 'subscription' AS tbl, 'int_cores, int_gpus' AS cols, s.pk_subscription AS pk,
           s.pk_show AS show_id, s.pk_alloc AS alloc_id, NULL AS folder_id, NULL AS job_id, NULL AS layer_id,
           NULL AS dept_id, s.int_cores::bigint AS stored_cores, COALESCE(t.cores, 0) AS true_cores,
           s.int_gpus::bigint AS stored_gpus, COALESCE(t.gpus, 0) AS true_gpus
      FROM subscription s
      LEFT JOIN sums t ON t.set_id = %(by_sub)s AND t.pk_show = s.pk_show AND t.pk_alloc = s.pk_alloc
     WHERE (%(shows)s::text[] IS NULL OR s.pk_show = ANY(%(shows)s))
       AND (s.int_cores, s.int_gpus) IS DISTINCT FROM (COALESCE(t.cores, 0), COALESCE(t.gpus, 0))
    UNION ALL
    SELECT 'folder_resource', 'int_cores, int_gpus', r.pk_folder_resource, f.pk_show, NULL, f.pk_folder, NULL, NULL, NULL,
           r.int_cores, COALESCE(t.cores, 0), r.int_gpus, COALESCE(t.gpus, 0)
      FROM folder_resource r
      JOIN folder f ON f.pk_folder = r.pk_folder
      LEFT JOIN sums t ON t.set_id = %(by_folder)s AND t.pk_folder = r.pk_folder
     WHERE (%(shows)s::text[] IS NULL OR f.pk_show = ANY(%(shows)s))
       AND (r.int_cores, r.int_gpus) IS DISTINCT FROM (COALESCE(t.cores, 0), COALESCE(t.gpus, 0))
    UNION ALL
    SELECT 'job_resource', c.cols, r.pk_job_resource, j.pk_show, NULL, NULL, j.pk_job, NULL, NULL,
           c.stored_cores, c.true_cores, c.stored_gpus, c.true_gpus
      FROM job_resource r
      JOIN job j ON j.pk_job = r.pk_job
      LEFT JOIN sums t ON t.set_id = %(by_job)s AND t.pk_job = r.pk_job
     CROSS JOIN LATERAL (VALUES
           ('int_cores, int_gpus', r.int_cores, COALESCE(t.cores, 0), r.int_gpus::bigint, COALESCE(t.gpus, 0)),
           ('int_local_cores, int_local_gpus', r.int_local_cores::bigint, COALESCE(t.local_cores, 0),
            r.int_local_gpus::bigint, COALESCE(t.local_gpus, 0))
           ) c(cols, stored_cores, true_cores, stored_gpus, true_gpus)
     WHERE (%(shows)s::text[] IS NULL OR j.pk_show = ANY(%(shows)s))
       AND (c.stored_cores, c.stored_gpus) IS DISTINCT FROM (c.true_cores, c.true_gpus)
    UNION ALL
    SELECT 'layer_resource', 'int_cores, int_gpus', r.pk_layer_resource, j.pk_show, NULL, NULL, j.pk_job, r.pk_layer,
           NULL, r.int_cores, COALESCE(t.all_cores, 0), r.int_gpus, COALESCE(t.all_gpus, 0)
      FROM layer_resource r
      JOIN job j ON j.pk_job = r.pk_job
      LEFT JOIN sums t ON t.set_id = %(by_layer)s AND t.pk_layer = r.pk_layer
     WHERE (%(shows)s::text[] IS NULL OR j.pk_show = ANY(%(shows)s))
       AND (r.int_cores, r.int_gpus) IS DISTINCT FROM (COALESCE(t.all_cores, 0), COALESCE(t.all_gpus, 0))
    UNION ALL
    SELECT 'point', 'int_cores, int_gpus', pt.pk_point, pt.pk_show, NULL, NULL, NULL, NULL, pt.pk_dept,
           pt.int_cores, COALESCE(t.cores, 0), pt.int_gpus, COALESCE(t.gpus, 0)
      FROM point pt
      LEFT JOIN sums t ON t.set_id = %(by_point)s AND t.pk_dept = pt.pk_dept AND t.job_show = pt.pk_show
     WHERE (%(shows)s::text[] IS NULL OR pt.pk_show = ANY(%(shows)s))
       AND (pt.int_cores, pt.int_gpus) IS DISTINCT FROM (COALESCE(t.cores, 0), COALESCE(t.gpus, 0))
)
SELECT d.tbl, d.cols, d.pk, d.show_id,
       COALESCE((SELECT str_name FROM show WHERE pk_show = d.show_id), d.show_id),
       (SELECT str_name FROM alloc WHERE pk_alloc = d.alloc_id),
       (SELECT str_name FROM folder WHERE pk_folder = d.folder_id),
       (SELECT str_name FROM job WHERE pk_job = d.job_id),
       (SELECT str_name FROM layer WHERE pk_layer = d.layer_id),
       (SELECT str_name FROM dept WHERE pk_dept = d.dept_id),
       d.stored_cores, d.true_cores, d.stored_gpus, d.true_gpus
  FROM drifted d
"""

# GROUPING(pk_show, pk_alloc, pk_folder, pk_job, pk_layer, pk_dept, job_show): a bit set, first
# argument highest, for each column *not* grouped in the set.
_COLUMNS = ("pk_show", "pk_alloc", "pk_folder", "pk_job", "pk_layer", "pk_dept", "job_show")


def _set_id(*grouped: str) -> int:
    return sum(1 << (len(_COLUMNS) - 1 - i) for i, column in enumerate(_COLUMNS) if column not in grouped)


SET_IDS = {
    "by_sub": _set_id("pk_show", "pk_alloc"),
    "by_folder": _set_id("pk_folder"),
    "by_job": _set_id("pk_job"),
    "by_layer": _set_id("pk_layer"),
    "by_point": _set_id("pk_dept", "job_show"),
}

# The five tables in the release path's lock order, for the faces that list rows by table.
TABLE_ORDER = ("subscription", "layer_resource", "job_resource", "folder_resource", "point")


def signed_cores(centicores: int) -> int | float:
    """Centicores as a number of cores, for every face: exact (2.5, never 2), and signed. A
    counter or a difference may be below zero, where units' -1 would read as unlimited, so
    the magnitude is converted and the sign put back."""
    magnitude = cores_number(abs(centicores))
    return -magnitude if centicores < 0 else magnitude


@dataclass(frozen=True)
class TableDrift:
    """One row of Cuebot's tables whose stored counters differ from SUM(proc)."""

    table: str
    columns: str  # the pair compared: "int_cores, int_gpus" or job_resource's "int_local_cores, int_local_gpus"
    pk: str
    show_id: str
    name: str  # show / allocation, show / folder, job, job / layer, show / department
    stored_cores: int  # centicores, as PostgreSQL stores them
    true_cores: int
    stored_gpus: int
    true_gpus: int

    @property
    def cores_difference(self) -> int:
        """Stored minus true, centicores: positive when the row reads more than its procs."""
        return self.stored_cores - self.true_cores

    @property
    def gpus_difference(self) -> int:
        return self.stored_gpus - self.true_gpus

    def as_dict(self) -> dict:
        return {"table": self.table, "columns": self.columns, "pk": self.pk, "show_id": self.show_id,
                "name": self.name,
                "cores": {"stored": signed_cores(self.stored_cores), "true": signed_cores(self.true_cores),
                          "difference": signed_cores(self.cores_difference)},
                "gpus": {"stored": self.stored_gpus, "true": self.true_gpus, "difference": self.gpus_difference},
                "centicores": {"stored": self.stored_cores, "true": self.true_cores,
                               "difference": self.cores_difference}}


@dataclass(frozen=True)
class TableDriftReport:
    shows: int  # shows whose rows were compared (every one Cuebot owns, or the one asked for)
    rows: list[TableDrift]

    @property
    def drifted(self) -> bool:
        return bool(self.rows)

    def rows_by_show(self) -> dict[str, int]:
        """show id -> rows drifted."""
        counts: dict[str, int] = {}
        for row in self.rows:
            counts[row.show_id] = counts.get(row.show_id, 0) + 1
        return counts

    def as_dict(self) -> dict:
        return {"shows": self.shows, "rows_drifted": len(self.rows), "rows": [row.as_dict() for row in self.rows]}


def cuebot_owned_show_ids(*, show_ids: Sequence[str] | None = None) -> list[str] | None:
    """The shows whose five tables Cuebot writes, among `show_ids` (default: all). None means
    every show (the Maestro era without a filter), which the query reads without an array."""
    if cuebot_owns_every_show():
        return None if show_ids is None else list(show_ids)
    owned = Show.objects.filter(b_scheduler_managed=False)
    if show_ids is not None:
        owned = owned.filter(pk__in=list(show_ids))
    return list(owned.order_by("pk").values_list("pk", flat=True))


def _name(table: str, names: tuple) -> str:
    show, alloc, folder, job, layer, dept = names
    return {
        "subscription": f"{show} / {alloc}",
        "folder_resource": f"{show} / {folder}",
        "job_resource": f"{job}",
        "layer_resource": f"{job} / {layer}",
        "point": f"{show} / {dept}",
    }[table]


def cuebot_table_drift(*, show_ids: Sequence[str] | None = None) -> TableDriftReport:
    """Every row of the five tables, of the shows Cuebot owns (among `show_ids`, default all),
    whose counters differ from SUM(proc); ordered by table (lock order), then name."""
    owned = cuebot_owned_show_ids(show_ids=show_ids)
    if owned == []:
        return TableDriftReport(shows=0, rows=[])
    with transaction.atomic(), connection.cursor() as cursor:
        # The planner's estimate of the name lookups passes JIT's threshold, and compiling
        # cost more than the whole read (as recalculate_subs found for its aggregate).
        cursor.execute("SET LOCAL jit = off")
        cursor.execute(DRIFT, {"shows": owned, **SET_IDS})
        fetched = cursor.fetchall()
        if owned is None:
            cursor.execute("SELECT count(*) FROM show")
            shows = cursor.fetchone()[0]
        else:
            shows = len(owned)
    rows = [TableDrift(table=table, columns=columns, pk=pk, show_id=show_id, name=_name(table, names),
                       stored_cores=int(stored_cores), true_cores=int(true_cores),
                       stored_gpus=int(stored_gpus), true_gpus=int(true_gpus))
            for table, columns, pk, show_id, *names, stored_cores, true_cores, stored_gpus, true_gpus in fetched]
    rows.sort(key=lambda row: (TABLE_ORDER.index(row.table), row.name, row.columns, row.pk))
    return TableDriftReport(shows=shows, rows=rows)
