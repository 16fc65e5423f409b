"""Ownership switches under load (Redis era): release p99 over HTTP while a show is switched to
Cuebot and back to the scheduler mid-run, against the same run without switches; then how long
the accounting Redis takes to equal SUM(proc) again.

    ACCOUNTING_SCHEDULER=redis DJANGO_SETTINGS_MODULE=settings .venv/bin/python bench/switch.py [--procs 1500]

Two gunicorn instances as scripts/server.py deploys them and its task cluster (which runs the
settling work a switch schedules), 8 keep-alive HTTP clients (threads of this process) each on
one instance, two bench farms of bench/release.py (each a scheduler-managed show; only the first
one is switched), their procs released in a shuffled order. The flag cache and in-flight TTLs
are shortened (5 s and 30 s, in the environment the servers inherit: the task cluster runs a
one-off task up to 15 s late, so the settling reseed lands within 20 s of a switch) so that the
settling work falls inside a round; a round starts once the last one's settling tasks have run,
so that none of them lands in the next round's load. Rounds alternate: without switches, then with one
switch each way (to Cuebot once a third of the releases answered, back to the scheduler at two
thirds). p99 is printed for the whole run, per phase (before the first switch, between, after
the second) and per show (the switched one, the other). After each run the switched show's booked
Redis counters are compared with SUM(proc) until they agree or one in-flight TTL has passed.
Printed, never asserted.
"""

import argparse
import http.client
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

os.environ.setdefault("ACCOUNTING_INFLIGHT_TTL_SECONDS", "30")
os.environ.setdefault("SHOW_FLAG_CACHE_SECONDS", "5")
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-switch-" + "k" * 50)  # the servers refuse the development key
sys.path.insert(0, str(Path(__file__).resolve().parent))
import release as bench_release  # noqa: E402  (bench/release.py: its farm and servers, django set up)
from django.conf import settings  # noqa: E402
from django_q.models import Schedule  # noqa: E402

from accounting.ownership.toggle import set_scheduler_managed  # noqa: E402
from accounting.reconcile.redis_against_pg import drift_report  # noqa: E402
from accounting.reconcile.reseed import seed_show  # noqa: E402
from infra.era import era  # noqa: E402

CLIENTS = 8
ROUNDS = 3


@contextmanager
def task_cluster():
    """`manage.py qcluster` as scripts/server.py starts it."""
    process = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"], cwd=bench_release.ROOT, env={**os.environ, "LOG_LEVEL": "WARNING"}
    )
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


class Progress:
    """How many releases answered; events at the thresholds the switcher waits for."""

    def __init__(self, total: int) -> None:
        self.lock, self.done = threading.Lock(), 0
        self.thresholds = {total // 3: threading.Event(), 2 * total // 3: threading.Event()}

    def one_more(self) -> None:
        with self.lock:
            self.done += 1
            event = self.thresholds.get(self.done)
        if event is not None:
            event.set()

    def reached(self, fraction: int) -> threading.Event:
        return list(self.thresholds.values())[fraction]


def release_over_http(
    *, ports: list[int], token: str, proc_ids: list[str], progress: Progress, shows: dict[str, int]
) -> tuple[list[tuple[float, float]], list[int]]:
    """(when sent, latency) of each release, and the index of its proc's show."""
    latencies: list[tuple[float, float]] = []
    released_shows: list[int] = []
    failures: list[str] = []
    barrier = threading.Barrier(CLIENTS)

    def client(number: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", ports[number % len(ports)], timeout=30)
        barrier.wait()
        for proc_id in proc_ids[number::CLIENTS]:
            sent = time.perf_counter()
            conn.request("POST", f"/api/v1/procs/{proc_id}/unbook", headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            response.read()
            latencies.append((sent, time.perf_counter() - sent))
            released_shows.append(shows[proc_id])
            progress.one_more()
            if response.status != 200:
                failures.append(f"{proc_id}: {response.status}")
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"bench: {len(failures)} HTTP releases failed, first: {failures[0]}")
    return latencies, released_shows


def switcher(*, farm, progress: Progress, switched_at: list[float]) -> threading.Thread:
    def switch() -> None:
        progress.reached(0).wait()
        switched_at.append(time.perf_counter())
        set_scheduler_managed(show=farm.show, managed=False)
        progress.reached(1).wait()
        switched_at.append(time.perf_counter())
        set_scheduler_managed(show=farm.show, managed=True)

    return threading.Thread(target=switch)


LEFT_HIGH = (
    "cuebot_acct_release_publish_failures_total",
    "cuebot_acct_release_withheld_total",
    "cuebot_acct_release_publish_stale_total",
)


def left_high(ports: list[int]) -> int:
    """Releases the web servers left out of Redis so far (publish failures, withheld, stale): each
    leaves the counters high until a reseed, by design."""
    total = 0.0
    for port in ports:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        for line in conn.getresponse().read().decode().splitlines():
            if line.startswith(LEFT_HIGH):
                total += float(line.rsplit(" ", 1)[1])
        conn.close()
    return int(total)


def booked_drift_cores(*, show_id: str) -> int:
    """The switched show's booked Redis counters minus SUM(proc), in cores over its keys."""
    return sum(row.difference for row in drift_report(show_ids=[show_id]).rows if row.field == "int_cores")


def settled_after(*, show_id: str, seconds: float) -> tuple[float | None, int]:
    """Seconds until Redis equals SUM(proc) for the show (None if not within `seconds`), and the
    difference last seen."""
    started = time.monotonic()
    while True:
        difference = booked_drift_cores(show_id=show_id)
        if difference == 0:
            return time.monotonic() - started, 0
        if time.monotonic() - started > seconds:
            return None, difference
        time.sleep(0.25)  # polls a state that no event announces


def phase_p99s(latencies: list[tuple[float, float]], switched_at: list[float]) -> str:
    """p99 of the releases sent before the first switch, between the two, and after the second."""
    bounds = [float("-inf"), *switched_at, float("inf")]
    phases = [[lat for sent, lat in latencies if low <= sent < high] for low, high in zip(bounds, bounds[1:])]
    return " / ".join(f"{bench_release.p99(phase):.0f}" if len(phase) > 1 else "-" for phase in phases)


def show_p99s(latencies: list[tuple[float, float]], shows: list[int]) -> str:
    """p99 of the switched show's releases, then of the other show's."""
    return " / ".join(
        f"{bench_release.p99([lat for (_, lat), s in zip(latencies, shows) if s == show]):.0f}" for show in (0, 1)
    )


def one_run(
    *, farms, ports: list[int], procs: int, switched: bool, rng: random.Random
) -> tuple[list[float], str, str, str]:
    shows = {proc_id: index for index, farm in enumerate(farms) for proc_id in farm.add_procs(procs)}
    ids = list(shows)
    rng.shuffle(ids)
    for farm in farms:
        seed_show(show_id=farm.show.id)  # Redis equals SUM(proc) when the run starts
    progress, switched_at, high_before = Progress(len(ids)), [], left_high(ports)
    thread = switcher(farm=farms[0], progress=progress, switched_at=switched_at) if switched else None
    if thread:
        thread.start()
    latencies, released_shows = release_over_http(
        ports=ports, token=farms[0].token, proc_ids=ids, progress=progress, shows=shows
    )
    if thread:
        thread.join()
    took, left = settled_after(show_id=farms[0].show.id, seconds=settings.ACCOUNTING_INFLIGHT_TTL_SECONDS)
    while Schedule.objects.filter(name__endswith=farms[0].show.id).exists():
        time.sleep(0.25)  # the task cluster's settling tasks, which no event announces
    settled = (
        f"equal after {took:.1f} s"
        if took is not None
        else f"{left:+d} cores after {settings.ACCOUNTING_INFLIGHT_TTL_SECONDS} s"
    )
    settled += f" ({left_high(ports) - high_before} releases left out of Redis by design)"
    return (
        [lat for _, lat in latencies],
        settled,
        phase_p99s(latencies, switched_at),
        show_p99s(latencies, released_shows),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=1500, help="procs per show and run")
    parser.add_argument("--seed", type=int, default=2533)
    options = parser.parse_args()
    if not era().keeps_redis:
        raise SystemExit("bench/switch.py measures the Redis era: run it with ACCOUNTING_SCHEDULER=redis")
    rng = random.Random(options.seed)
    farms = [bench_release.BenchFarm(), bench_release.BenchFarm()]
    results: dict[bool, list[tuple[float, float, str, str, str]]] = {False: [], True: []}
    try:
        with ExitStack() as servers:
            ports = [servers.enter_context(bench_release.gunicorn_server()) for _ in range(2)]
            servers.enter_context(task_cluster())
            for _ in range(ROUNDS):
                for switched in (False, True):
                    latencies, settled, phases, by_show = one_run(
                        farms=farms, ports=ports, procs=options.procs, switched=switched, rng=rng
                    )
                    results[switched].append(
                        (bench_release.p99(latencies), statistics.median(latencies) * 1000, settled, phases, by_show)
                    )
    finally:
        for farm in farms:
            set_scheduler_managed(show=farm.show, managed=True)
            farm.remove()
    print(
        f"Switches under load: 2 gunicorn instances, {CLIENTS} HTTP clients, 2 shows x {options.procs} procs per run, "
        f"{ROUNDS} rounds; flag cache and in-flight TTL {settings.SHOW_FLAG_CACHE_SECONDS} s / "
        f"{settings.ACCOUNTING_INFLIGHT_TTL_SECONDS} s"
    )
    print(
        f"{'run':20s} {'p99 ms':>7s} {'p50 ms':>7s}  {'p99 by phase':>15s}  {'p99 by show':>11s}  "
        "switched show's Redis against SUM(proc) after"
    )
    for switched in (False, True):
        for p99, p50, settled, phases, by_show in results[switched]:
            print(
                f"{'one switch each way' if switched else 'no switch':20s} {p99:7.1f} {p50:7.1f}  {phases:>15s}  "
                f"{by_show:>11s}  {settled}"
            )
    ratios = sorted(b[0] / a[0] for a, b in zip(results[False], results[True]))
    print(
        f"p99 with switches / without, per round: median {statistics.median(ratios):.2f} "
        f"({ratios[0]:.2f}–{ratios[-1]:.2f}); target <= 2"
    )


if __name__ == "__main__":
    main()
