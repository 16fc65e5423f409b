"""The release over HTTP against its floor (issue 35): the service's `cuebot_acct.wsgi` and the
plainest WSGI app doing the same release (bench/floor_wsgi.py), each under the gunicorn command
scripts/server.py deploys (only the app differs), on the same farm.

    ACCOUNTING_SCHEDULER=redis DJANGO_SETTINGS_MODULE=settings .venv/bin/python bench/over_http.py [--procs 240] [--rounds 3]

The era is the environment's (ACCOUNTING_SCHEDULER=redis: the floor runs the Redis script;
maestro: the floor writes Cuebot's five tables instead), and both servers read it. Clients are
separate processes, each on one keep-alive connection: 1 client, and 4 (the machine's
capacity on 2 cores with the servers). Single releases (POST /api/v1/procs/{id}/unbook) and
batches of 100 (POST /api/v1/procs/unbook). Every path runs in each round, in turns of a slice
of releases, so a change in machine load hits every path alike; a path's ratio to its floor
(same kind of release, same clients) is taken within a round and printed as the median with
the spread. p50 and p99 are over every request of every round. The bench builds its own farm
(bench/release.py's BenchFarm: every show scheduler-managed) and removes it afterwards.

In the Redis era a third app is served, the floor with the step the design puts before any
lock (bench/floor_wsgi.py `registering`: the procs read, their decrements registered in
flight), and the service is reported against it as well: the plain floor shows what the
service costs beyond the release alone, this one what it costs beyond the design's release.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from django.db import connections  # noqa: E402
from release import ROOT, BenchFarm, free_port, server, vacuum_churned  # noqa: E402  (bench/release.py)

from infra.era import MAESTRO, REDIS, era  # noqa: E402
from infra.redis_factory import accounting_redis  # noqa: E402

CLIENTS = (1, 4)
BATCH = 100
SINGLE_SLICE = 60  # single releases per path and turn: 15 per client at 4 clients
BATCH_SLICE = 8 * BATCH  # 8 batches per path and turn: 2 per client at 4 clients
SIZING: dict[str, int] = {}  # gunicorn options overridden from the command line
APPS = {"floor": "bench.floor_wsgi:application", "service": "cuebot_acct.wsgi"}
# The Redis era's second floor: the plain one with the design's registration before any lock
# (bench/floor_wsgi.py `registering`); the service is reported against it too.
REGISTERING = "floor+registration"


def gunicorn_command(bind: str) -> list[str]:
    """scripts/server.py's command, with --workers/--threads as the command line sets them
    (both servers sized alike: the numbers behind docs/production.md's sizing)."""
    command = server.gunicorn_command(bind)
    for option, value in SIZING.items():
        command[command.index(option) + 1] = str(value)
    return command


@contextmanager
def served(app: str):
    """`app` under scripts/server.py's gunicorn command, the app argument swapped."""
    port = free_port()
    metrics_dir = tempfile.TemporaryDirectory()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings",
        "LOG_LEVEL": "WARNING",
        "PROMETHEUS_MULTIPROC_DIR": metrics_dir.name,
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or uuid.uuid4().hex * 2,
    }
    command = [app if arg == "cuebot_acct.wsgi" else arg for arg in gunicorn_command(f"127.0.0.1:{port}")]
    process = subprocess.Popen([*command, "--log-level", "warning"], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/healthz")
                conn.getresponse().read()  # any answer: the floor has no /healthz and says 404
                break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench: gunicorn serving {app} did not come up")
            time.sleep(0.1)  # a server starting up has no event to wait on
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)
        metrics_dir.cleanup()


def _requests(proc_ids: list[str], batch: bool) -> list[tuple[str, bytes | None]]:
    if not batch:
        return [(f"/api/v1/procs/{p}/unbook", None) for p in proc_ids]
    return [
        ("/api/v1/procs/unbook", json.dumps({"proc_ids": proc_ids[i : i + BATCH]}).encode())
        for i in range(0, len(proc_ids), BATCH)
    ]


def _client(port: int, token: str, requests: list, barrier, done) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies, failures = [], []
    barrier.wait()
    for path, body in requests:
        sent = time.perf_counter()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        latencies.append(time.perf_counter() - sent)
        if response.status != 200:
            failures.append(f"{path}: {response.status}")
    conn.close()
    done.put((latencies, failures))


def http_run(port: int, token: str, proc_ids: list[str], *, clients: int, batch: bool) -> tuple[float, list[float]]:
    """Releases/s of `clients` client processes sharing the proc ids, and each request's latency."""
    requests = _requests(proc_ids, batch)
    context = multiprocessing.get_context("fork")
    barrier, done = context.Barrier(clients + 1), context.Queue()
    workers = [
        context.Process(target=_client, args=(port, token, requests[i::clients], barrier, done)) for i in range(clients)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    results = [done.get() for _ in workers]
    elapsed = time.perf_counter() - started
    for worker in workers:
        worker.join()
    failures = [f for _, fs in results for f in fs]
    if failures:
        raise SystemExit(f"bench: {len(failures)} HTTP releases failed, first: {failures[0]}")
    return len(proc_ids) / elapsed, [lat for lats, _ in results for lat in lats]


def paths() -> list[tuple[str, int, bool]]:
    return [(app, clients, batch) for batch in (False, True) for clients in CLIENTS for app in APPS]


def top_up(farm: BenchFarm) -> None:
    """The farm's Redis counters high again, as BenchFarm made them: a worker that boots against
    a Redis not yet seeded rebuilds every flagged show's keys from SUM(proc), small for the
    bench's farm; the floor's and the service's releases of the same farm would then take them
    below zero, and the service's clamp (a warning per release) is no part of the floor."""
    client = accounting_redis()
    for key in farm.redis_keys:
        client.hset(key, mapping={"int_cores": 10**12, "int_gpus": 10**9})


def measure(farm: BenchFarm, ports: dict[str, int], *, procs: int, rounds: int) -> tuple[dict, dict]:
    rates = {path: [] for path in paths()}
    latencies = {path: [] for path in paths()}
    slices = max(procs // SINGLE_SLICE, 1)
    for _ in range(rounds):
        vacuum_churned()
        if era().keeps_redis:
            top_up(farm)
        connections.close_all()  # the forked clients must inherit no connection
        seconds = dict.fromkeys(paths(), 0.0)
        released = dict.fromkeys(paths(), 0)
        for _ in range(slices):
            for path in paths():
                app, clients, batch = path
                ids = farm.add_procs(BATCH_SLICE if batch else SINGLE_SLICE)
                connections.close_all()
                rate, lats = http_run(ports[app], farm.token, ids, clients=clients, batch=batch)
                seconds[path] += len(ids) / rate
                released[path] += len(ids)
                latencies[path].extend(lats)
        for path in paths():
            rates[path].append(released[path] / seconds[path])
    return rates, latencies


def quantile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000


def report(rates: dict, latencies: dict, *, against: str = "floor") -> None:
    print(
        f"{'path':46s} {'releases/s':>10s}  {'x ' + against + ', median (spread)':>24s}  {'p50 ms':>7s} {'p99 ms':>7s}"
        f"  {'p99 x ' + against:>11s}"
    )
    for path in paths():
        app, clients, batch = path
        if against != "floor" and app not in (against, "service"):
            continue
        floor = (against, clients, batch)
        ratios = sorted(a / b for a, b in zip(rates[path], rates[floor]))
        tail = quantile(latencies[path], 99) / quantile(latencies[floor], 99)
        label = f"{app}, {'batches of 100' if batch else 'single'}, {clients} client{'s' if clients > 1 else ''}"
        print(
            f"{label:46s} {statistics.median(rates[path]):10.0f}  "
            f"{statistics.median(ratios):5.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f}){'':7s}  "
            f"{quantile(latencies[path], 50):7.2f} {quantile(latencies[path], 99):7.2f}  {tail:11.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=240, help="single releases per path and round (batches: 13x)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, help="instead of the deployed command's, for both servers")
    parser.add_argument("--threads", type=int, help="instead of the deployed command's, for both servers")
    options = parser.parse_args()
    SIZING.update({f"--{name}": getattr(options, name) for name in ("workers", "threads") if getattr(options, name)})
    if era().name not in (REDIS, MAESTRO):
        raise SystemExit(
            "bench/over_http.py: the NOTIFY era has no HTTP floor here; ACCOUNTING_SCHEDULER=redis or maestro"
        )
    if era().keeps_redis:
        APPS[REGISTERING] = "bench.floor_wsgi:registering"
    farm = BenchFarm()
    try:
        if era().keeps_redis:
            top_up(farm)
        with ExitStack() as servers:
            ports = {app: servers.enter_context(served(module)) for app, module in APPS.items()}
            connections.close_all()
            for app in APPS:  # warm: connections, prepared statements, the token and name caches
                for clients in CLIENTS:
                    for batch in (False, True):
                        http_run(
                            ports[app],
                            farm.token,
                            farm.add_procs(BATCH_SLICE if batch else SINGLE_SLICE),
                            clients=clients,
                            batch=batch,
                        )
            if era().keeps_redis:
                top_up(farm)
            rates, latencies = measure(farm, ports, procs=options.procs, rounds=options.rounds)
    finally:
        farm.remove()
    print(
        f"HTTP release against the bare WSGI floor, {era} era: gunicorn "
        f"{' '.join(gunicorn_command('ADDR')[2:])}; {options.procs} single releases and "
        f"{options.procs // SINGLE_SLICE * BATCH_SLICE} in batches per path and round, {options.rounds} interleaved rounds; "
        f"load at the end {os.getloadavg()[0]:.1f}"
    )
    report(rates, latencies)
    if REGISTERING in APPS:
        print(
            f"\nAgainst the {REGISTERING} floor (the plain floor's release after the design's read and registration):"
        )
        report(rates, latencies, against=REGISTERING)


if __name__ == "__main__":
    main()
