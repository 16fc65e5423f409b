"""Benchmark: booked reseed and drift inspection on a farm of 1,000,000 procs over ~10,000 jobs.

Each is timed against a raw baseline run in the same process on the same data: the bare
SQL aggregate (the same one-scan GROUPING SETS SUM, fetched at once, no baseline, no key
building in SQL) plus a bare pipelined HSET of the same values (no CAS, no in-flight
overlay). Target: each ratio <= 2. Peak memory (tracemalloc, Python allocations, in a
separate run so tracing does not distort the timings) is measured at 100,000 procs and at
1,000,000 procs on the same key universe, to show it does not grow with procs.

    DATABASE_URL=... ACCOUNTING_REDIS_URL=... .venv/bin/python bench/reseed.py [--procs 1000000]

The farm is built with COPY through simulator.farm_builder (idempotent: a re-run reuses it), and every
show of it is switched to scheduler-managed so all procs are in scope.
"""

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from accounting.reconcile.recompute import recompute_pg_accounting  # noqa: E402
from accounting.reconcile.redis_against_pg import drift_report  # noqa: E402
from accounting.reconcile.reseed import reseed_booked  # noqa: E402
from infra.redis_factory import accounting_redis  # noqa: E402
from shows.models import Job, Show  # noqa: E402
from simulator.farm_builder import (  # noqa: E402
    ADD_HOST_STATS,
    FRAME_COLUMNS,
    HOST_COLUMNS,
    PROC_COLUMNS,
    PROC_CORES,
    DemoFarmSize,
    build_structure,
    copy_rows,
    demo_id,
    host_rows,
)

STRUCTURE = DemoFarmSize(shows=4, hosts=2000, procs=200_000)  # 20 procs a job -> ~10,000 jobs

BARE_AGGREGATE = """
SELECT p.pk_show, h.pk_alloc, j.pk_folder, p.pk_job, p.pk_layer, j.pk_dept,
       GROUPING(h.pk_alloc), GROUPING(j.pk_folder), GROUPING(p.pk_job), GROUPING(p.pk_layer),
       SUM(p.int_cores_reserved / 100)::bigint, SUM(p.int_gpus_reserved)::bigint
  FROM proc p JOIN host h ON h.pk_host = p.pk_host LEFT JOIN job j ON j.pk_job = p.pk_job
 WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
 GROUP BY GROUPING SETS ((p.pk_show, h.pk_alloc), (j.pk_folder), (p.pk_job), (p.pk_layer), (j.pk_dept, p.pk_show))
"""


def bench_proc_id(number: int) -> str:
    return demo_id(f"bench-proc:{number}")


def bench_frame_id(number: int) -> str:
    return demo_id(f"bench-frame:{number}")


def build(*, procs: int) -> tuple[list[str], int]:
    """Make the farm hold exactly the first `procs` bench procs; returns (shows, jobs)."""
    with transaction.atomic():
        shows, allocs, layers = build_structure(size=STRUCTURE)
        copy_rows(table="host", columns=HOST_COLUMNS, rows=host_rows(size=STRUCTURE, allocs=allocs))
        show_ids = [s.id for s in shows]
        Show.objects.filter(pk__in=show_ids).update(b_scheduler_managed=True)
        show_of_job = dict(Job.objects.filter(pk__in={l.job_id for l in layers}).values_list("pk", "show_id"))
        with connection.cursor() as cursor:
            cursor.execute(ADD_HOST_STATS, {"hosts": [demo_id(f"host:{h}") for h in range(STRUCTURE.hosts)]})
            cursor.execute(
                "SELECT count(*) FROM proc p JOIN frame f ON f.pk_frame = p.pk_frame WHERE f.str_name LIKE 'bench-%%'"
            )
            have = cursor.fetchone()[0]
            if have > procs:
                cursor.execute(
                    "DELETE FROM proc WHERE pk_frame IN (SELECT pk_frame FROM frame WHERE str_name LIKE 'bench-%%')"
                )
                have = 0
        layer_of = [layers[p % len(layers)] for p in range(have, procs)]
        copy_rows(
            table="frame",
            columns=FRAME_COLUMNS,
            rows=(
                (
                    bench_frame_id(p),
                    layer.id,
                    layer.job_id,
                    f"bench-{p}",
                    "RUNNING",
                    p,
                    0,
                    PROC_CORES[p % len(PROC_CORES)],
                    None,
                )
                for p, layer in zip(range(have, procs), layer_of)
            ),
        )
        rows = (
            (
                bench_proc_id(p),
                demo_id(f"host:{p % STRUCTURE.hosts}"),
                layer.job_id,
                show_of_job[layer.job_id],
                layer.id,
                bench_frame_id(p),
                PROC_CORES[p % len(PROC_CORES)],
                1 if p % 16 == 0 else 0,
                4 * 1024 * 1024,
                0,
            )
            for p, layer in zip(range(have, procs), layer_of)
        )
        added = copy_rows(table="proc", columns=PROC_COLUMNS, rows=rows)
        if added:
            recompute_pg_accounting(show_ids=show_ids)
    if added:
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE proc")
    return show_ids, len(show_of_job)


def bare(*, show_ids: list[str]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(BARE_AGGREGATE, {"shows": show_ids})
        rows = cursor.fetchall()
    pipe = accounting_redis().pipeline(transaction=False)
    for n, (show, alloc, folder, job, layer, dept, g_alloc, g_folder, g_job, g_layer, cores, gpus) in enumerate(rows):
        if not g_alloc:
            key = f"acct:sub:{show}:{alloc}"
        elif not g_folder:
            key = f"acct:folder:{folder}"
        elif not g_job:
            key = f"acct:job:{job}"
        elif not g_layer:
            key = f"acct:layer:{layer}"
        else:
            key = f"acct:point:{dept}:{show}"
        pipe.hset(key, mapping={"int_cores": cores, "int_gpus": gpus})
        if n % 2000 == 1999:
            pipe.execute()
    pipe.execute()


def timed(fn, *, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def peak_kib(fn) -> float:
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1024


def reseed(show_ids: list[str]) -> None:
    assert reseed_booked(show_ids=show_ids).written


def drift(show_ids: list[str]) -> None:
    assert not drift_report(show_ids=show_ids).drifted


def measure(*, procs: int, repeat: int) -> dict:
    started = time.perf_counter()
    show_ids, jobs = build(procs=procs)
    built = time.perf_counter() - started
    accounting_redis().flushdb()
    call_command("acct_reseed", "--limits", stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
    reseed(show_ids)  # warm: caches, plans, Redis keys exist
    result = {
        "procs": procs,
        "jobs": jobs,
        "build_s": built,
        "bare_s": timed(lambda: bare(show_ids=show_ids), repeat=repeat),
        "reseed_s": timed(lambda: reseed(show_ids), repeat=repeat),
    }
    reseed(show_ids)  # bare() wrote layer-and-all values without limits; reseed restores exact state
    result["drift_s"] = timed(lambda: drift(show_ids), repeat=repeat)
    result["reseed_peak_kib"] = peak_kib(lambda: reseed(show_ids))
    result["drift_peak_kib"] = peak_kib(lambda: drift(show_ids))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000, help="proc count of the memory comparison")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    call_command("migrate", "--noinput", verbosity=0)
    results = [measure(procs=args.small, repeat=args.repeat), measure(procs=args.procs, repeat=args.repeat)]
    for r in results:
        print(
            f"{r['procs']:>9,} procs / {r['jobs']:,} jobs (built in {r['build_s']:.0f} s): "
            f"bare SQL+pipeline {r['bare_s']:.2f} s | reseed {r['reseed_s']:.2f} s = {r['reseed_s'] / r['bare_s']:.2f}x | "
            f"acct_drift {r['drift_s']:.2f} s = {r['drift_s'] / r['bare_s']:.2f}x | "
            f"peak Python memory: reseed {r['reseed_peak_kib']:,.0f} KiB, drift {r['drift_peak_kib']:,.0f} KiB"
        )
    small, big = results
    print(
        f"memory ratio {big['procs'] // small['procs']}x procs: reseed {big['reseed_peak_kib'] / small['reseed_peak_kib']:.2f}x, "
        f"drift {big['drift_peak_kib'] / small['drift_peak_kib']:.2f}x"
    )


if __name__ == "__main__":
    main()
