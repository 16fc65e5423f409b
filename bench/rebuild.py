"""Rebuild under load: how long an empty accounting Redis keeps its keys closed while procs
are released at a steady rate, against the same rebuild with nothing released (the baseline,
same process, same farm).

    DJANGO_SETTINGS_MODULE=settings .venv/bin/python bench/rebuild.py [--procs 20000] [--rate 200]

It starts a private redis-server (so no configured Redis is flushed), builds a bench farm
(bench/release.py's), and for each of 3 rounds, alternating no load and load: empties that
Redis as a restart would, then times `bootstrap_if_empty` from the empty Redis to the marker
that reopens the keys, with an in-flight TTL of 2 s (the wait every rebuild begins with),
while forked processes release procs at --rate per second through `unbook_proc`. Then the
periodic booked reseed of open keys under that load plus as many bookings a second (the
scheduler's protocol: booking.lua with an op id, the proc INSERT, booking_settle.lua), the
reseed timed against the same reseed with no load: how many attempts it took, or whether it
was skipped. Printed, never asserted; docs/redis-protocol.md states the bound.
"""

import argparse
import multiprocessing
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import uuid  # noqa: E402

import release as bench_release  # noqa: E402  (bench/release.py: the bench farm, django set up)
from django.conf import settings  # noqa: E402
from django.db import connections  # noqa: E402

from accounting.live import booking  # noqa: E402
from accounting.reconcile.reseed import ReseedSkipped, bootstrap_if_empty, reseed_booked  # noqa: E402
from accounting.release.unbook import unbook_proc  # noqa: E402
from infra.redis_factory import accounting_redis  # noqa: E402

TTL_SECONDS = 2
RELEASERS = 2
ROUNDS = 3


@contextmanager
def private_redis():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    directory = tempfile.mkdtemp()
    server = subprocess.Popen(
        [shutil.which("redis-server"), "--port", str(port), "--save", "", "--appendonly", "no", "--dir", directory],
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("bench: redis-server did not start")
                time.sleep(0.05)  # a starting server has no event to wait on
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def release_at(proc_ids: list[str], rate: float, stop) -> None:
    """Release these procs, one every 1/rate seconds, until stopped or done."""
    started, interval = time.monotonic(), 1 / rate
    for i, proc_id in enumerate(proc_ids):
        if stop.is_set():
            break
        delay = started + i * interval - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        unbook_proc(proc_id=proc_id)


def _book_at(farm, rate: float, stop) -> None:
    """Book one proc every 1/rate seconds as the scheduler does, until stopped."""
    started, interval, ids = time.monotonic(), 1 / rate, farm.key_ids()
    for i in range(10**9):
        if stop.is_set():
            break
        delay = started + i * interval - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        op = uuid.uuid4().hex
        booking.book(**ids, cores=100, gpus=0, op_id=op, force=True)  # the bench keys carry no caps
        farm.add_procs(1)
        booking.settle(op_id=op)


@contextmanager
def release_load(proc_ids: list[str], rate: float, *, farm=None):
    """RELEASERS forked processes releasing `rate` procs a second between them; with `farm`,
    as many more booking `rate` procs a second on it."""
    connections.close_all()
    accounting_redis.cache_clear()
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    workers = [
        context.Process(target=release_at, args=(proc_ids[i::RELEASERS], rate / RELEASERS, stop))
        for i in range(RELEASERS)
    ]
    if farm is not None:
        workers += [context.Process(target=_book_at, args=(farm, rate / RELEASERS, stop)) for _ in range(RELEASERS)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        stop.set()
        for worker in workers:
            worker.join()


def timed_rebuild() -> tuple[float, str]:
    accounting_redis().flushdb()  # what a restart of a Redis without persistence leaves
    started = time.monotonic()
    try:
        done = bootstrap_if_empty()
    except ReseedSkipped:
        return time.monotonic() - started, "skipped"
    return time.monotonic() - started, "reopened" if done else "not empty?"


def timed_reseed(farm) -> tuple[float, str]:
    started = time.monotonic()
    outcome = reseed_booked(show_ids=[farm.show.id])
    verdict = f"written at attempt {outcome.attempts}" if outcome.written else "SKIPPED"
    return time.monotonic() - started, verdict


def print_rounds(results: dict[str, list[tuple[float, str]]], *, extra: float = 0.0) -> None:
    for label, runs in results.items():
        seconds = sorted(s for s, _ in runs)
        print(
            f"{label:10s} {statistics.median(seconds):9.2f} s ({seconds[0]:.2f}–{seconds[-1]:.2f})"
            f"{statistics.median(seconds) - extra:17.2f} s      {', '.join(o for _, o in runs)}"
        )
    base, load = (statistics.median(s for s, _ in results[k]) for k in ("no load", "load"))
    print(f"load / no load: {load / base:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=20000, help="procs running on the farm")
    parser.add_argument("--rate", type=float, default=200, help="releases per second under load")
    options = parser.parse_args()
    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = TTL_SECONDS
    with private_redis() as url:
        settings.ACCOUNTING_REDIS_URL = url
        accounting_redis.cache_clear()
        farm = bench_release.BenchFarm()
        try:
            farm.add_procs(options.procs)
            results = {"no load": [], "load": []}
            for _ in range(ROUNDS):
                results["no load"].append(timed_rebuild())
                with release_load(farm.add_procs(int(options.rate * 30)), options.rate):
                    results["load"].append(timed_rebuild())
            reseeds = {"no load": [], "load": []}
            for _ in range(ROUNDS):
                reseeds["no load"].append(timed_reseed(farm))
                with release_load(farm.add_procs(int(options.rate * 30)), options.rate, farm=farm):
                    reseeds["load"].append(timed_reseed(farm))
        finally:
            farm.remove()
    print(
        f"Rebuild of an empty Redis, {options.procs} procs on the farm, in-flight TTL {TTL_SECONDS} s, "
        f"{ROUNDS} rounds; load: {options.rate:g} releases/s from {RELEASERS} processes; "
        f"ACCOUNTING_SCHEDULER_RESEEDS={settings.ACCOUNTING_SCHEDULER_RESEEDS}"
    )
    print(f"{'':10s} {'keys closed, median (spread)':>30s}  {'after the TTL wait':>18s}  outcomes")
    print_rounds(results, extra=TTL_SECONDS)
    print(f"\nPeriodic booked reseed of open keys; load: {options.rate:g} releases/s and {options.rate:g} bookings/s")
    print(f"{'':10s} {'reseed, median (spread)':>30s}  {'':>18s}  outcomes")
    print_rounds(reseeds)


if __name__ == "__main__":
    main()
