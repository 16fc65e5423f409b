"""What every generated farm (the demo's, the simulator's own) obeys: it is written only as a role
with Cuebot's own rights (the service's documented role never has them) and only where no show of
a site's is, and its hosts' idle amounts are their capacity minus their procs'."""

from collections.abc import Iterable

from django.conf import settings
from django.db import connection

from shows.models import Show


class FarmRefused(Exception):
    """Building here would mix a generated farm into a site's own data."""


# What a generated farm inserts: Cuebot's own rows (and the scheduler's procs), which the
# service's documented role may not write (shows.attach.grant_statements): on a scratch
# Cuebot database the demo and the simulator run as Cuebot's role, or the database owner.
FARM_INSERTS = (
    "facility",
    "alloc",
    "show",
    "dept",
    "subscription",
    "point",
    "folder",
    "job",
    "layer",
    "host",
    "host_stat",
    "frame",
    "proc",
    "job_history",
    "frame_history",
)


# What the simulator's commands need, named by their refusal while ACCOUNTING_WRITES is off: they
# write what Cuebot and the scheduler write, and release and repair through the service.
PLAYS_CUEBOT = "Cuebot's own rights on a scratch Cuebot database (it writes what Cuebot writes)"


def refuse_without_cuebots_rights(*, command: str) -> None:
    """Stop in one line, before writing anything, when this role may not insert Cuebot's rows
    (the service's documented role may not: a traceback half-way was what it got before)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t FROM unnest(%s::text[]) AS t WHERE to_regclass(t) IS NOT NULL AND NOT has_table_privilege(t, 'INSERT')",
            [list(FARM_INSERTS)],
        )
        denied = [table for (table,) in cursor.fetchall()]
    if denied:
        raise FarmRefused(
            f"{command} refuses: it writes Cuebot's own rows as Cuebot and the scheduler do, and this database role "
            f"may not INSERT on {', '.join(denied)} (the service's role of docs/attaching.md never may); "
            "run it as Cuebot's database role or the database owner, on a scratch Cuebot database"
        )


def refuse_foreign_shows(*, own_show_ids: Iterable[str], command: str) -> None:
    """On a site's database (OPENCUE_TABLES=existing) generated farms go only where no other show is."""
    if settings.OPENCUE_TABLES != "existing":
        return
    foreign = Show.objects.exclude(pk__in=list(own_show_ids)).count()
    if foreign:
        raise FarmRefused(
            f"{command} refuses: this Cuebot database (OPENCUE_TABLES=existing) holds {foreign} show(s) it did not create; "
            "it only fills a scratch Cuebot database that has no show yet"
        )


# Idle = capacity - what the host's procs reserve. A larger demo re-run puts more procs on
# the hosts it made before: their capacity grows to fit, as Cuebot's host check demands.
HOST_IDLE = """
UPDATE host h
   SET int_cores = GREATEST(h.int_cores, COALESCE(t.cores, 0)), int_mem = GREATEST(h.int_mem, COALESCE(t.mem, 0)),
       int_cores_idle = GREATEST(h.int_cores, COALESCE(t.cores, 0)) - COALESCE(t.cores, 0),
       int_mem_idle = GREATEST(h.int_mem, COALESCE(t.mem, 0)) - COALESCE(t.mem, 0),
       int_gpus = GREATEST(h.int_gpus, COALESCE(t.gpus, 0)), int_gpu_mem = GREATEST(h.int_gpu_mem, COALESCE(t.gpu_mem, 0)),
       int_gpus_idle = GREATEST(h.int_gpus, COALESCE(t.gpus, 0)) - COALESCE(t.gpus, 0),
       int_gpu_mem_idle = GREATEST(h.int_gpu_mem, COALESCE(t.gpu_mem, 0)) - COALESCE(t.gpu_mem, 0)
  FROM host h2
  LEFT JOIN (
        SELECT pk_host, SUM(int_cores_reserved) AS cores, SUM(int_mem_reserved) AS mem,
               SUM(int_gpus_reserved) AS gpus, SUM(int_gpu_mem_reserved) AS gpu_mem
          FROM proc GROUP BY pk_host
       ) t ON t.pk_host = h2.pk_host
 WHERE h.pk_host = h2.pk_host AND h2.pk_host = ANY(%(hosts)s)
"""
