"""Booking back after an empty restart: how long after its Redis restarts empty a scheduler-
managed show's keys reopen, with procs released at a steady rate, and whether any open counter
reads below SUM(proc) meanwhile (issue 42).

    DJANGO_SETTINGS_MODULE=settings .venv/bin/python bench/restart_reopen.py [--rate 100] [--ttl 10]

It starts a private redis-server (so no configured Redis is touched), builds a bench farm
(bench/release.py's) and rebuilds Redis for it, then runs, for each way of noticing the
restart, a task worker's part (forked: the master check once a second, and the scheduled
empty check every 10 s) and RELEASERS forked processes releasing --rate procs a second
through `unbook_proc`, with ACCOUNTING_RECONCILE_ENABLED on and the in-flight TTL at --ttl.
Each round kills the redis-server (SIGKILL) and starts it again, empty, then polls the
show's subscription key until it carries its burst again (open to booking), reading every
open counter of the farm before SUM(proc) each time (Redis first: a release between the two
reads can only make Redis look high). The ways of noticing:
- `scheduled`: the scheduled check alone (accounting.tasks.watch_empty_redis's interval, without
  django-q's own slack): the code before issue 42;
- `at once`: the first release to meet the empty Redis, or the master check, starts the rebuild
  (accounting.reconcile.empty).
Printed, never asserted; docs/redis-protocol.md states the bound.
"""

import argparse
import multiprocessing
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import rebuild as bench_rebuild  # noqa: E402  (bench/rebuild.py: releases at a steady rate)
import release as bench_release  # noqa: E402  (bench/release.py: the bench farm, django set up)
from django.conf import settings  # noqa: E402
from django.db import connection, connections  # noqa: E402

from accounting import tasks  # noqa: E402
from accounting.reconcile import failover  # noqa: E402
from accounting.reconcile.reseed import bootstrap_if_empty  # noqa: E402
from accounting.release import publish  # noqa: E402
from infra.redis_factory import accounting_redis  # noqa: E402
from simulator.processes import private_redis  # noqa: E402

RELEASERS = 2
ROUNDS = 3
WAYS = ("scheduled", "at once")
TRUTH = """
SELECT COALESCE(SUM(int_cores_reserved / 100), 0) FROM proc WHERE pk_show = %(show)s AND NOT b_local
"""


def _noticing(way: str) -> None:
    """In a forked process: `scheduled` takes the at-once start out (what the code did before)."""
    if way == "scheduled":
        publish.rebuild_at_once = failover.rebuild_at_once = lambda: None


def _release_at(way: str, proc_ids: list[str], rate: float, stop) -> None:
    _noticing(way)
    bench_rebuild.release_at(proc_ids, rate, stop)


def _task_worker(way: str, stop) -> None:
    """A task worker's part: the master check every second (a thread, as start_master_watch runs
    it) and the scheduled empty check every 10 s (the schedule's task, with its interval)."""
    _noticing(way)
    threading.Thread(target=failover.watch_master, kwargs={"stop": stop}, daemon=True).start()
    while not stop.is_set():
        tasks.check_empty_redis()
        stop.wait(tasks.EMPTY_CHECK_INTERVAL_SECONDS)


def timed_round(server, farm, *, ttl: float) -> tuple[float, int, int]:
    """(seconds from the kill to the key open again, samples of open counters, of them low)."""
    client = accounting_redis()
    sub = farm.redis_keys[0]
    killed = time.monotonic()
    server.restart()
    samples = low = 0
    deadline = killed + ttl + 60
    while time.monotonic() < deadline:
        try:
            counted, burst = client.hmget(sub, "int_cores", "burst")
        except Exception:  # noqa: BLE001 - the pool's connections to the killed server fail once
            continue
        if burst is not None:
            with connection.cursor() as cursor:
                cursor.execute(TRUTH, {"show": farm.show.id})
                truth = int(cursor.fetchone()[0])
            samples += 1
            low += int(int(counted or 0) < truth)
            return time.monotonic() - killed, samples, low
        time.sleep(0.05)  # polling what a person would see: nothing to wait on
    return float("inf"), samples, low


def open_counters_low(farm, *, seconds: float) -> tuple[int, int]:
    """After a reopen, the open counter against SUM(proc) for a while under the same load."""
    client, sub = accounting_redis(), farm.redis_keys[0]
    samples = low = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        counted = int(client.hget(sub, "int_cores") or 0)
        with connection.cursor() as cursor:
            cursor.execute(TRUTH, {"show": farm.show.id})
            truth = int(cursor.fetchone()[0])
        samples += 1
        low += int(counted < truth)
        time.sleep(0.05)
    return samples, low


def run_way(way: str, server, farm, *, rate: float, ttl: float) -> list[tuple[float, int, int]]:
    connections.close_all()
    accounting_redis.cache_clear()
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    proc_ids = farm.add_procs(int(rate * (ttl + 40) * ROUNDS))
    connections.close_all()
    workers = [context.Process(target=_task_worker, args=(way, stop))]
    workers += [
        context.Process(target=_release_at, args=(way, proc_ids[i::RELEASERS], rate / RELEASERS, stop))
        for i in range(RELEASERS)
    ]
    for worker in workers:
        worker.start()
    rounds = []
    try:
        for _ in range(ROUNDS):
            time.sleep(random.uniform(2, 12))  # the restart falls anywhere in the scheduled check's 10 s
            seconds, samples, low = timed_round(server, farm, ttl=ttl)
            after_samples, after_low = open_counters_low(farm, seconds=3)
            rounds.append((seconds, samples + after_samples, low + after_low))
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100, help="releases per second")
    parser.add_argument("--ttl", type=int, default=10, help="ACCOUNTING_INFLIGHT_TTL_SECONDS")
    parser.add_argument("--procs", type=int, default=2000, help="procs running on the farm besides those released")
    options = parser.parse_args()
    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = options.ttl
    settings.ACCOUNTING_RECONCILE_ENABLED = True
    with private_redis() as server:
        settings.ACCOUNTING_REDIS_URL = server.url
        accounting_redis.cache_clear()
        farm = bench_release.BenchFarm()
        try:
            farm.add_procs(options.procs)
            bootstrap_if_empty(wait=lambda seconds: None)
            results = {way: run_way(way, server, farm, rate=options.rate, ttl=options.ttl) for way in WAYS}
        finally:
            farm.remove()
    print(
        f"Booking back after an empty restart (SIGKILL, started again), in-flight TTL {options.ttl} s, "
        f"{options.rate:g} releases/s from {RELEASERS} processes, {ROUNDS} rounds"
    )
    print(f"{'noticed':10s} {'reopened after the kill, median (spread)':>42s}  {'open samples, low':>18s}")
    for way, rounds in results.items():
        seconds = sorted(s for s, _, _ in rounds)
        print(
            f"{way:10s} {statistics.median(seconds):31.2f} s ({seconds[0]:.2f}–{seconds[-1]:.2f})"
            f"  {sum(s for _, s, _ in rounds):>10d}, {sum(n for _, _, n in rounds)}"
        )


if __name__ == "__main__":
    main()
