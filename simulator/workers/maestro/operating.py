"""The operator of the Maestro era, as the service's role: cap changes through the limit
services, flag flips (one UPDATE of show in this era, which must write no accounting row), the
drift repair under load, and job kills (FINISHED first, procs released later)."""

import itertools
import random
import time

from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db import connection, transaction

from accounting.limits.changes import set_folder_limits, set_job_limits, set_subscription_limits
from accounting.models import FolderResource, JobResource, Subscription
from accounting.ownership.toggle import set_scheduler_managed
from accounting.reconcile.recompute import recompute_pg_accounting
from shows.models import Show
from simulator.farm import finish_a_job
from simulator.workers.maestro.play import MaestroPlay, lost, reconnect


def operator_loop(*, run: MaestroPlay, index: int) -> None:
    rng, kinds = run.rng("operator", index), itertools.cycle(("subscription", "folder", "job"))
    next_repair = time.monotonic() + run.repair_seconds
    while not run.stop.wait(0.2):
        try:
            if rng.random() < 0.75:
                change_a_cap(run=run, rng=rng, kind=next(kinds))  # in turn: each kind of cap binds early
            else:
                flip_a_flag(run=run, rng=rng)
            if time.monotonic() >= next_repair:
                repair(run=run)
                next_repair = time.monotonic() + run.repair_seconds
        except (DjangoOperationalError, DjangoInterfaceError) as error:
            if not lost(error=error):
                raise
            reconnect(run=run, where="operator")


def repair(*, run: MaestroPlay) -> None:
    """The drift repair under load (accounting.reconcile.recompute, the service's own), over
    every show of the farm; it reruns itself after a deadlock (counted in its metric)."""
    recompute_pg_accounting(show_ids=run.farm.show_ids)
    run.stats.add(repairs=1)


# The flipped show's rows of the five tables with their row versions, locked FOR SHARE in
# Cuebot's order: nobody else can write them until the flip commits, so a version that moved
# in between was written by the flip itself.
SHOW_ROW_VERSIONS = (
    "SELECT 'subscription', pk_subscription, ctid::text FROM subscription WHERE pk_show = %(show)s "
    "ORDER BY pk_subscription FOR SHARE",
    "SELECT 'layer_resource', r.pk_layer_resource, r.ctid::text FROM layer_resource r JOIN job j ON j.pk_job = r.pk_job "
    "WHERE j.pk_show = %(show)s ORDER BY r.pk_layer_resource FOR SHARE OF r",
    "SELECT 'job_resource', r.pk_job_resource, r.ctid::text FROM job_resource r JOIN job j ON j.pk_job = r.pk_job "
    "WHERE j.pk_show = %(show)s ORDER BY r.pk_job_resource FOR SHARE OF r",
    "SELECT 'folder_resource', r.pk_folder_resource, r.ctid::text FROM folder_resource r "
    "JOIN folder f ON f.pk_folder = r.pk_folder WHERE f.pk_show = %(show)s ORDER BY r.pk_folder_resource FOR SHARE OF r",
    "SELECT 'point', pk_point, ctid::text FROM point WHERE pk_show = %(show)s ORDER BY pk_point FOR SHARE",
)


def _row_versions(*, show_id: str) -> dict[tuple[str, str], str]:
    with connection.cursor() as cursor:
        versions = {}
        for sql in SHOW_ROW_VERSIONS:
            cursor.execute(sql, {"show": show_id})
            versions |= {(table, pk): ctid for table, pk, ctid in cursor.fetchall()}
        return versions


def flip_a_flag(*, run: MaestroPlay, rng: random.Random) -> None:
    """cueadmin -scheduler-managed SHOW on|off: in this era one UPDATE of show and nothing else;
    the show's accounting rows, held still around it, must come out of it unwritten."""
    show = Show.objects.get(pk=rng.choice(run.farm.show_ids))
    with transaction.atomic():
        before = _row_versions(show_id=show.pk)
        set_scheduler_managed(show=show, managed=not show.b_scheduler_managed)
        after = _row_versions(show_id=show.pk)
    for row in sorted(row for row, version in after.items() if before.get(row) != version):
        run.stats.record("flag_flip_wrote_accounting", (show.pk, *row))
    run.stats.add(flag_flips=1)


def change_a_cap(*, run: MaestroPlay, rng: random.Random, kind: str) -> None:
    """A burst, a folder's max cores or GPUs, or a job's, moved by the limit services; often
    below what is booked now, which no later booking may exceed."""
    if kind == "subscription":
        sub = rng.choice(list(Subscription.objects.filter(show_id__in=run.farm.show_ids)))
        # Half the time down to what is booked now, so that the burst binds within seconds.
        burst = sub.int_cores + rng.randint(0, 2) * 100 if rng.random() < 0.5 else sub.int_burst * rng.uniform(0.5, 1.5)
        set_subscription_limits(subscription=sub, burst=max(100, int(burst) // 100 * 100))
    elif kind == "folder":
        fr = rng.choice(list(FolderResource.objects.filter(folder__show_id__in=run.farm.show_ids)))
        set_folder_limits(
            folder_resource=fr,
            max_cores=rng.choice((-1, rng.randint(2, 60) * 100)),
            max_gpus=rng.choice((-1, rng.randint(0, 6))),
        )
    else:
        jr = rng.choice(list(JobResource.objects.filter(job__show_id__in=run.farm.show_ids, job__str_state="PENDING")))
        set_job_limits(job_resource=jr, max_cores=rng.randint(2, 30) * 100, max_gpus=rng.randint(0, 4))
    run.stats.count("cap_changes", kind)


def kill_a_job(*, run: MaestroPlay, rng: random.Random) -> bool:
    """As OpenCue kills a job: FINISHED and its name freed first, its procs released later."""
    with connection.cursor() as cursor:
        job_id = finish_a_job(cursor=cursor, show_ids=run.farm.show_ids, rng=rng)
    if job_id is None:
        return False
    with run.lock:
        run.killed_jobs.add(job_id)
        run.kills_due.append((time.monotonic() + rng.uniform(0.5, 2.5), job_id))
    run.stats.count("faults", "job-kill")
    return True
