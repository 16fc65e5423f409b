"""The NOTIFY era's releasers (Cuebot, through this service's release path), with the
release-rollback fault, and the killed jobs' procs released one call each when due."""

import random
import time

from django.db import connection, transaction

from accounting.release.unbook import unbook_proc, unbook_procs
from simulator.workers.notify.play import NotifyPlay, work
from simulator.workers.scheduler_view import FRAME_SECONDS, PICK_PROCS


class RolledBack(Exception):
    pass


def releaser(run: NotifyPlay, index: int) -> None:
    rng = random.Random(run.options.seed * 200 + index)
    work(run, where="releaser", step=lambda: release_some(run, rng=rng))


def release_some(run: NotifyPlay, *, rng: random.Random) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            PICK_PROCS,
            {
                "shows": run.farm.show_ids,
                "killed": sorted(run.killed_jobs),
                "n": rng.randint(1, 6),
                "ran": FRAME_SECONDS,
            },
        )
        ids = [row[0] for row in cursor.fetchall()]
    if not ids:
        return
    if "release-rollback" in run.faults and rng.random() < 0.1:
        try:
            with transaction.atomic():
                unbook_procs(proc_ids=ids)
                raise RolledBack
        except RolledBack:
            run.stats.count("faults", "release-rollback")
        return
    released = [unbook_proc(proc_id=ids[0])] if len(ids) == 1 else unbook_procs(proc_ids=ids)
    for r in released:
        if r is None:
            continue
        run.stats.add(releases=1)
        if r.branch.value == "scheduler" and not (r.job_finished or r.job_gone):
            run.stats.add(committed_cores=r.cores, committed_gpus=r.gpus)


def release_killed_jobs(run: NotifyPlay) -> None:
    """The procs of the killed jobs whose time has come, one call each, as Cuebot releases them."""
    for due in [k for k in run.kill_releases if k[0] <= time.monotonic()]:
        run.kill_releases.remove(due)
        with run.gate.operation(), connection.cursor() as cursor:
            cursor.execute("SELECT pk_proc FROM proc WHERE pk_job = %s", [due[1]])
            released = [unbook_proc(proc_id=row[0]) for row in cursor.fetchall()]
        run.stats.add(releases=sum(1 for r in released if r is not None))
