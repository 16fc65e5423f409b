"""Cuebot's own accounting tables against SUM(proc), read-only: which rows drifted, and by how much.

Why it exists: since the Maestro era (OpenCue v1.34.20) Cuebot writes subscription,
layer_resource, job_resource, folder_resource and point for every show, flagged or not, and
Maestro plans each tick from those rows. Nothing upstream re-derives them any more except
recalculate_subs() (subscriptions of unflagged shows only), so a counter that drifted from
its procs stays wrong and Maestro books against it. In the redis and NOTIFY eras Cuebot owns
only the unflagged shows' rows; the flagged ones are the scheduler's (accounting.reconcile.redis_against_pg).

Counting rules are accounting.reconcile.recompute's, the repair's: a non-local proc counts in
the subscription (its show, its host's allocation), its job's folder, its job, its layer and
the point (its job's department and show); a local proc counts only in layer_resource and
job_resource.int_local_cores/int_local_gpus. One statement per table computes the bare sum
of its key and compares it with the stored rows in the same snapshot, so a booking or a
release, which writes proc and the five tables in one transaction, is never half seen. (One
statement for all five, scanning proc once with grouping sets, was 2x the five bare sums at
1M procs: grouping sets do not run in parallel workers, the bare sums do.) Cores stay
centicores here; accounting.live.units.signed_cores is the one conversion every face shows.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import DatabaseError, connection, transaction

from accounting.live.units import signed_cores
from accounting.lock_order import LOCK_ORDER
from accounting.models import DriftRecord
from accounting.reconcile.drift_history import Drifted, cores_words, gpus_words
from infra import metrics
from infra.era import era
from shows.models import Show
from shows.names import name_sql

# One statement per table: the stored rows of the shows, LEFT JOINed to the bare SUM(proc) of
# their key (which PostgreSQL may aggregate in parallel workers, as it would the bare sum), kept
# where they differ; names are looked up for those rows only (shows.names). %(shows)s NULL: every show (the
# Maestro era's farm-wide check, with no array to test per proc); an array: those shows. Each
# yields the row's key, its show, the six names (show, allocation, folder, job, layer,
# department; NULL where the table has none), then stored and true centicores and GPUs.
_SHOWS = "(%(shows)s::text[] IS NULL OR {column} = ANY(%(shows)s))"
# A row under a job or a folder is of the parent's show. Read in the select list, so only for the
# rows that drifted; a join to the parent for every row cost 5-10% of a statement at Maestro's
# size (the job_resource read probed job once per row). The filter is a semi-join, only when shows
# are named (NULL folds it away).
_JOB_SHOW = "(SELECT pk_show FROM job WHERE pk_job = r.pk_job)"
_FOLDER_SHOW = "(SELECT pk_show FROM folder WHERE pk_folder = r.pk_folder)"
_OF_SHOWS = (
    "(%(shows)s::text[] IS NULL OR {column} IN (SELECT pk_{parent} FROM {parent} WHERE pk_show = ANY(%(shows)s)))"
)
_NAMES = """COALESCE({show_name}, {show}),
       {alloc}, {folder}, {job}, {layer}, {dept}"""


def _name_columns(
    *, show: str, alloc: str = "NULL", folder: str = "NULL", job: str = "NULL", layer: str = "NULL", dept: str = "NULL"
) -> str:
    """The six names of a row by the SQL expressions of its ids (shows.names.name_sql); a show
    gone reads as its id."""

    def looked_up(kind: str, key: str) -> str:
        return "NULL" if key == "NULL" else name_sql(kind=kind, id_sql=key)

    return _NAMES.format(
        show=show,
        show_name=name_sql(kind="show", id_sql=show),
        alloc=looked_up("alloc", alloc),
        folder=looked_up("folder", folder),
        job=looked_up("job", job),
        layer=looked_up("layer", layer),
        dept=looked_up("dept", dept),
    )


QUERIES = {
    "subscription": f"""
SELECT s.pk_subscription, s.pk_show, {_name_columns(show="s.pk_show", alloc="s.pk_alloc")},
       s.int_cores, COALESCE(t.cores, 0), s.int_gpus, COALESCE(t.gpus, 0)
  FROM subscription s
  LEFT JOIN (SELECT p.pk_show, h.pk_alloc, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
               FROM proc p JOIN host h ON h.pk_host = p.pk_host
              WHERE NOT p.b_local AND {_SHOWS.format(column="p.pk_show")}
              GROUP BY p.pk_show, h.pk_alloc) t ON t.pk_show = s.pk_show AND t.pk_alloc = s.pk_alloc
 WHERE {_SHOWS.format(column="s.pk_show")}
   AND (s.int_cores::bigint, s.int_gpus::bigint) IS DISTINCT FROM (COALESCE(t.cores, 0), COALESCE(t.gpus, 0))""",
    "layer_resource": f"""
SELECT r.pk_layer_resource, {_JOB_SHOW}, {_name_columns(show=_JOB_SHOW, job="r.pk_job", layer="r.pk_layer")},
       r.int_cores, COALESCE(t.cores, 0), r.int_gpus, COALESCE(t.gpus, 0)
  FROM layer_resource r
  LEFT JOIN (SELECT p.pk_layer, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
               FROM proc p WHERE {_SHOWS.format(column="p.pk_show")}
              GROUP BY p.pk_layer) t ON t.pk_layer = r.pk_layer
 WHERE {_OF_SHOWS.format(column="r.pk_job", parent="job")}
   AND (r.int_cores::bigint, r.int_gpus::bigint) IS DISTINCT FROM (COALESCE(t.cores, 0), COALESCE(t.gpus, 0))""",
    "job_resource": f"""
SELECT r.pk_job_resource, {_JOB_SHOW}, {_name_columns(show=_JOB_SHOW, job="r.pk_job")},
       r.int_cores, COALESCE(t.cores, 0), r.int_gpus, COALESCE(t.gpus, 0),
       r.int_local_cores, COALESCE(t.local_cores, 0), r.int_local_gpus, COALESCE(t.local_gpus, 0)
  FROM job_resource r
  LEFT JOIN (SELECT p.pk_job,
                    SUM(p.int_cores_reserved) FILTER (WHERE NOT p.b_local) AS cores,
                    SUM(p.int_gpus_reserved) FILTER (WHERE NOT p.b_local) AS gpus,
                    SUM(p.int_cores_reserved) FILTER (WHERE p.b_local) AS local_cores,
                    SUM(p.int_gpus_reserved) FILTER (WHERE p.b_local) AS local_gpus
               FROM proc p WHERE {_SHOWS.format(column="p.pk_show")}
              GROUP BY p.pk_job) t ON t.pk_job = r.pk_job
 WHERE {_OF_SHOWS.format(column="r.pk_job", parent="job")}
   AND (r.int_cores::bigint, r.int_gpus::bigint, r.int_local_cores::bigint, r.int_local_gpus::bigint)
       IS DISTINCT FROM (COALESCE(t.cores, 0), COALESCE(t.gpus, 0), COALESCE(t.local_cores, 0), COALESCE(t.local_gpus, 0))""",
    "folder_resource": f"""
SELECT r.pk_folder_resource, {_FOLDER_SHOW}, {_name_columns(show=_FOLDER_SHOW, folder="r.pk_folder")},
       r.int_cores, COALESCE(t.cores, 0), r.int_gpus, COALESCE(t.gpus, 0)
  FROM folder_resource r
  LEFT JOIN (SELECT j.pk_folder, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
               FROM proc p JOIN job j ON j.pk_job = p.pk_job
              WHERE NOT p.b_local AND {_SHOWS.format(column="p.pk_show")}
              GROUP BY j.pk_folder) t ON t.pk_folder = r.pk_folder
 WHERE {_OF_SHOWS.format(column="r.pk_folder", parent="folder")}
   AND (r.int_cores::bigint, r.int_gpus::bigint) IS DISTINCT FROM (COALESCE(t.cores, 0), COALESCE(t.gpus, 0))""",
    "point": f"""
SELECT pt.pk_point, pt.pk_show, {_name_columns(show="pt.pk_show", dept="pt.pk_dept")},
       pt.int_cores, COALESCE(t.cores, 0), pt.int_gpus, COALESCE(t.gpus, 0)
  FROM point pt
  LEFT JOIN (SELECT j.pk_dept, j.pk_show, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
               FROM proc p JOIN job j ON j.pk_job = p.pk_job
              WHERE NOT p.b_local AND {_SHOWS.format(column="p.pk_show")}
              GROUP BY j.pk_dept, j.pk_show) t ON t.pk_dept = pt.pk_dept AND t.pk_show = pt.pk_show
 WHERE {_SHOWS.format(column="pt.pk_show")}
   AND (pt.int_cores::bigint, pt.int_gpus::bigint) IS DISTINCT FROM (COALESCE(t.cores, 0), COALESCE(t.gpus, 0))""",
}
# The column pairs a query's values come in, four values each (stored cores, true cores, stored
# GPUs, true GPUs): job_resource has both, the other tables the first.
PAIRS = ("int_cores, int_gpus", "int_local_cores, int_local_gpus")


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
        return {
            "table": self.table,
            "columns": self.columns,
            "pk": self.pk,
            "show_id": self.show_id,
            "name": self.name,
            "cores": {
                "stored": signed_cores(self.stored_cores),
                "true": signed_cores(self.true_cores),
                "difference": signed_cores(self.cores_difference),
            },
            "gpus": {"stored": self.stored_gpus, "true": self.true_gpus, "difference": self.gpus_difference},
            "centicores": {"stored": self.stored_cores, "true": self.true_cores, "difference": self.cores_difference},
        }


@dataclass(frozen=True)
class TableDriftReport:
    shows: int  # shows whose rows were compared (every one Cuebot owns, or the one asked for)
    rows: list[TableDrift]

    @property
    def drifted(self) -> bool:
        return bool(self.rows)

    def as_dict(self) -> dict:
        return {"shows": self.shows, "rows_drifted": len(self.rows), "rows": [row.as_dict() for row in self.rows]}


def cuebot_owned_show_ids(*, show_ids: Sequence[str] | None = None) -> list[str] | None:
    """The shows whose five tables Cuebot writes, among `show_ids` (default: all). None means
    every show (the Maestro era without a filter), which the query reads without an array."""
    if era().cuebot_owns_every_show:
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


def drifted_rows(*, cursor, table: str, show_ids: Sequence[str] | None) -> list[TableDrift]:
    """One table's rows of these shows (None: every show) whose counters differ from SUM(proc),
    read in one statement, so in one snapshot: a booking or a release is seen whole or not at all.
    Python sees the drifted rows only."""
    cursor.execute(QUERIES[table], {"shows": None if show_ids is None else list(show_ids)})
    rows = []
    for pk, show_id, *rest in cursor.fetchall():
        names, values = tuple(rest[:6]), [int(value) for value in rest[6:]]
        for pair, (stored_cores, true_cores, stored_gpus, true_gpus) in zip(
            PAIRS, (values[i : i + 4] for i in range(0, len(values), 4)), strict=False
        ):
            if (stored_cores, stored_gpus) != (true_cores, true_gpus):
                rows.append(
                    TableDrift(
                        table=table,
                        columns=pair,
                        pk=pk,
                        show_id=show_id,
                        name=_name(table, names),
                        stored_cores=stored_cores,
                        true_cores=true_cores,
                        stored_gpus=stored_gpus,
                        true_gpus=true_gpus,
                    )
                )
    return rows


def cuebot_table_drift(*, show_ids: Sequence[str] | None = None) -> TableDriftReport:
    """Every row of the five tables, of the shows Cuebot owns (among `show_ids`, default all),
    whose counters differ from SUM(proc); ordered by table (lock order), then name."""
    owned = cuebot_owned_show_ids(show_ids=show_ids)
    if owned == []:
        return TableDriftReport(shows=0, rows=[])
    rows: list[TableDrift] = []
    with transaction.atomic(), connection.cursor() as cursor:
        # JIT off for the transaction: the planner's estimate of the name lookups passes JIT's threshold, and
        # compiling cost more than the whole read (as recalculate_subs found for its aggregate).
        cursor.execute("SET LOCAL jit = off")
        for table in QUERIES:
            rows += drifted_rows(cursor=cursor, table=table, show_ids=owned)
        if owned is None:
            cursor.execute("SELECT count(*) FROM show")
            shows = cursor.fetchone()[0]
        else:
            shows = len(owned)
    rows.sort(key=lambda row: (LOCK_ORDER.index(row.table), row.name, row.columns, row.pk))
    return TableDriftReport(shows=shows, rows=rows)


def drifted_table_row(row: TableDrift) -> Drifted:
    """A drifted row of Cuebot's tables as every face and the record take it: job_resource's two
    column pairs are two rows; its difference in words ('2.50 cores low, 2 GPUs high')."""
    words = [cores_words(row.cores_difference)] if row.cores_difference else []
    words += [gpus_words(row.gpus_difference)] if row.gpus_difference else []
    return Drifted(
        source=DriftRecord.Source.CUEBOT_TABLES,
        identity=f"{row.table} {row.pk} ({row.columns})",
        show_id=row.show_id,
        subject=row.name,
        detail=f"{row.table} ({row.columns})",
        cores_difference=row.cores_difference,
        gpus_difference=row.gpus_difference,
        difference=", ".join(words),
        raw=row,
    )


class CuebotTables:
    """The drift source of every era (accounting.reconcile.drift_check): Cuebot's five tables
    against SUM(proc), for the shows Cuebot owns, read in one statement per table."""

    source: str = DriftRecord.Source.CUEBOT_TABLES
    differs = "Cuebot's tables differ from SUM(proc)"
    unit = "rows"
    gauge = metrics.CUEBOT_TABLE_DRIFT_ROWS
    last_check = metrics.CUEBOT_TABLE_DRIFT_LAST_CHECK
    unreadable: tuple[type[Exception], ...] = (DatabaseError,)

    def shows(self) -> dict[str, str]:
        owned = cuebot_owned_show_ids()
        shows = Show.objects.all() if owned is None else Show.objects.filter(pk__in=owned)
        return dict(shows.values_list("pk", "str_name"))

    def read(self, *, show_ids: list[str]) -> tuple[list[Drifted], dict[str, int]]:
        """Every owned show's drifted rows (`show_ids` are the owned shows: read as every show
        where Cuebot owns each); no count of rows compared."""
        return [drifted_table_row(row) for row in cuebot_table_drift().rows], {}


CUEBOT_TABLES = CuebotTables()
