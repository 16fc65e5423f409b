"""Release-path benchmark: releases/s against a bare psycopg + redis-py floor, same process.

    DJANGO_SETTINGS_MODULE=settings .venv/bin/python bench/release.py [--procs 1000]

Runs against the configured PostgreSQL and Redis. Builds its own scheduler-managed farm
(ids unique to the run, so a demo farm in the same database is untouched) and removes it,
its Redis keys and its API user afterwards. Prints releases/s and the ratio to the floor
for: the floor, unbook_proc, unbook_procs in batches of 100, and POST
/api/v1/procs/{id}/unbook from concurrent clients against a gunicorn it starts on
127.0.0.1; then SQL statements and Redis round trips per release, by database.
Then the same for a Cuebot-managed farm of its own (PG accounting tables decremented in
the transaction, nothing in Redis): unbook_proc and batches of 100 against a bare psycopg
floor running the same statements, and SQL statements and PostgreSQL round trips per release.
Measured, never asserted: the targets are printed beside the ratios.
"""
import argparse
import http.client
import os
import socket
import subprocess
import sys
import threading
import time
import tempfile
import uuid
from collections import Counter
from contextlib import contextmanager, nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

import django  # noqa: E402

django.setup()

import psycopg  # noqa: E402
import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django_redis import get_redis_connection  # noqa: E402

from accounting import keys  # noqa: E402
from accounting.auth import grant_permissions, issue_token  # noqa: E402
from accounting.permissions import RELEASE_PROCS  # noqa: E402
from accounting.lua import script  # noqa: E402
from accounting.models import FolderResource, JobResource, LayerResource, Point, Subscription  # noqa: E402
from accounting.services import (  # noqa: E402
    ADJUSTMENT_SQL, ADJUSTMENTS, DELETE_PROCS, GIVE_BACK_TO_HOSTS, unbook_proc, unbook_procs,
)
from accounting.units import cores_from_centicores  # noqa: E402
from cuebot_acct.redis_factory import accounting_redis  # noqa: E402
from shows.farm import ADD_HOST_STATS, FRAME_COLUMNS, PROC_COLUMNS, copy_rows, frame_number, new_layer  # noqa: E402
from shows.models import Alloc, Dept, Facility, Folder, Host, Job, Show  # noqa: E402
from shows.selectors import flag_cache_key, is_scheduler_managed  # noqa: E402

HOSTS = 8
PROC_CORES = (100, 250, 400, 200)
HTTP_CLIENTS = 4
HTTP_WORKERS = 2
ROUNDS = 5
# Starting PG booked counters of a Cuebot-managed bench farm, in centicores: above what
# the bench releases, so no counter goes negative.
PG_BOOKED = 10**8


class BenchFarm:
    """One show (scheduler-managed or not), one job and layer, a few hosts; procs added per phase."""

    def __init__(self, *, scheduler_managed: bool = True) -> None:
        run = uuid.uuid4().hex[:10]
        self.run = run
        # A Cuebot-managed farm's PG counters start high; a scheduler-managed one's are not written.
        booked = {} if scheduler_managed else {"int_cores": PG_BOOKED, "int_gpus": PG_BOOKED}
        self.facility = Facility.objects.create(str_name=f"bench-{run}")
        self.alloc = Alloc.objects.create(str_name=f"bench-{run}", facility=self.facility, str_tag="bench")
        self.show = Show.objects.create(str_name=f"bench-{run}", b_scheduler_managed=scheduler_managed)
        self.dept = Dept.objects.create(str_name=f"bench-{run}")
        Subscription.objects.create(show=self.show, alloc=self.alloc, int_size=10**9, int_burst=10**9, **booked)
        Point.objects.create(show=self.show, dept=self.dept, **booked)
        self.folder = Folder.objects.create(show=self.show, dept=self.dept, str_name="root", b_default=True)
        self.job = Job.objects.create(
            folder=self.folder, show=self.show, dept=self.dept, facility=self.facility, str_name=f"bench-{run}",
            str_visible_name=f"bench-{run}", str_shot="sh001", str_user="bench", str_state="PENDING",
        )
        self.layer = new_layer(job_id=self.job.id, name="render", mem_min=1024)
        self.layer.save(force_insert=True)
        # Cuebot's insert triggers made the resource rows; start their counters as the farm needs.
        FolderResource.objects.filter(folder=self.folder).update(**booked)
        JobResource.objects.filter(job=self.job).update(int_max_cores=10**9, int_max_gpus=10**9, **booked)
        LayerResource.objects.filter(layer=self.layer).update(**booked)
        self.hosts = Host.objects.bulk_create([
            Host(alloc=self.alloc, str_name=f"bench-{run}-{h}", str_lock_state="OPEN", int_cores=10**9,
                 int_cores_idle=10**9, int_mem=10**12, int_mem_idle=10**12)
            for h in range(HOSTS)
        ])
        with connection.cursor() as cursor:
            cursor.execute(ADD_HOST_STATS, {"hosts": [h.id for h in self.hosts]})
        self.redis_keys = keys.of_proc(
            show_id=self.show.id, alloc_id=self.alloc.id, folder_id=self.folder.id,
            job_id=self.job.id, layer_id=self.layer.id, dept_id=self.dept.id,
        )
        client = accounting_redis()
        for key in self.redis_keys:  # high enough that no release clamps
            client.hset(key, mapping={"int_cores": 10**12, "int_gpus": 10**9})
        self.user = get_user_model().objects.create_user(username=f"bench-{run}")
        grant_permissions(user=self.user, permissions=[RELEASE_PROCS])
        self.token = issue_token(user=self.user, name="bench/release.py")

    def add_procs(self, n: int) -> list[str]:
        ids = [str(uuid.uuid4()) for _ in range(n)]
        frames = (
            (pid, self.layer.id, self.job.id, f"{frame_number(pid):04d}-render", "RUNNING", frame_number(pid), 0,
             PROC_CORES[i % len(PROC_CORES)], self.hosts[i % HOSTS].str_name)
            for i, pid in enumerate(ids)
        )
        rows = (
            (pid, self.hosts[i % HOSTS].id, self.job.id, self.show.id, self.layer.id, pid,
             PROC_CORES[i % len(PROC_CORES)], 0, 4096, 0)
            for i, pid in enumerate(ids)
        )
        with transaction.atomic():
            copy_rows(table="frame", columns=FRAME_COLUMNS, rows=frames)
            copy_rows(table="proc", columns=PROC_COLUMNS, rows=rows)
        return ids

    def remove(self) -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM proc WHERE pk_show = %s", [self.show.id])
            for statement in (
                "DELETE FROM frame WHERE pk_job = %(job)s", "DELETE FROM layer_resource WHERE pk_job = %(job)s",
                "DELETE FROM layer WHERE pk_job = %(job)s", "DELETE FROM job_resource WHERE pk_job = %(job)s",
                "DELETE FROM job WHERE pk_job = %(job)s", "DELETE FROM folder_resource WHERE pk_folder = %(folder)s",
                "DELETE FROM folder WHERE pk_folder = %(folder)s", "DELETE FROM point WHERE pk_show = %(show)s",
                "DELETE FROM subscription WHERE pk_show = %(show)s", "DELETE FROM host WHERE pk_alloc = %(alloc)s",
                "DELETE FROM show WHERE pk_show = %(show)s", "DELETE FROM dept WHERE pk_dept = %(dept)s",
                "DELETE FROM alloc WHERE pk_alloc = %(alloc)s", "DELETE FROM facility WHERE pk_facility = %(facility)s",
            ):
                cursor.execute(statement, {"job": self.job.id, "folder": self.folder.id, "show": self.show.id,
                                           "dept": self.dept.id, "alloc": self.alloc.id, "facility": self.facility.id})
            self.user.delete()
        accounting_redis().delete(*self.redis_keys)
        cache.delete(flag_cache_key(show_id=self.show.id))


def floor(farm: BenchFarm, proc_ids: list[str], *, with_flag_and_prepare: bool) -> float:
    """The same statements and scripts on bare clients; optionally the same extra round trips."""
    release = script("release")
    prepare = script("release_prepare")
    acct = redis.Redis.from_url(settings.ACCOUNTING_REDIS_URL)
    flags = redis.Redis.from_url(settings.CACHE_REDIS_URL)
    flag_key = f"bench-floor:{farm.show.id}"
    flags.set(flag_key, b"1")
    acct.script_load(release.source)
    acct.script_load(prepare.source)
    ttl_ms = settings.ACCOUNTING_INFLIGHT_TTL_SECONDS * 1000
    with psycopg.connect(settings.DATABASE_URL) as pg:
        started = time.perf_counter()
        for proc_id in proc_ids:
            with pg.cursor() as cursor:
                cursor.execute(DELETE_PROCS, {"ids": [proc_id]})
                (_, host, show, alloc, folder, job, layer, dept, centicores, gpus, mem, gpu_mem, _local) = cursor.fetchone()
                if with_flag_and_prepare:
                    flags.get(flag_key)
                cursor.execute(GIVE_BACK_TO_HOSTS, {"hosts": [host], "cores": [centicores], "mem": [mem], "gpus": [gpus], "gpu_mem": [gpu_mem]})
            cores = cores_from_centicores(centicores)
            key_names = keys.of_proc(show_id=show, alloc_id=alloc, folder_id=folder, job_id=job, layer_id=layer, dept_id=dept)
            op_id = uuid.uuid4().hex
            if with_flag_and_prepare:
                payload = "|".join(f"{k}|{cores}|{gpus}" for k in key_names)
                acct.evalsha(prepare.sha, 2, keys.INFLIGHT, keys.SEQ, op_id, ttl_ms, payload)
            pg.commit()
            acct.evalsha(release.sha, 2 + len(key_names), keys.INFLIGHT, keys.SEQ, *key_names, op_id, *([cores, gpus] * len(key_names)))
        elapsed = time.perf_counter() - started
    flags.delete(flag_key)
    return len(proc_ids) / elapsed


def decrement_params(row: tuple) -> dict[str, dict[str, list]]:
    """Per accounting table, the parameters of its decrement for one non-local proc's DELETE row."""
    (_, _, show, alloc, folder, job, layer, dept, point_show, centicores, gpus, _, _, _) = row
    values = {"pk_show": show, "pk_alloc": alloc, "pk_folder": folder, "pk_job": job, "pk_layer": layer,
              "pk_dept": dept, "int_cores": centicores, "int_gpus": gpus, "int_local_cores": 0, "int_local_gpus": 0}
    return {
        a.table: {column: [point_show if (a.table, column) == ("point", "pk_show") else values[column]]
                  for column in a.keys + a.amounts}
        for a in ADJUSTMENTS if a.table != "host_local"
    }


def cuebot_floor(proc_ids: list[str], *, pipelined: bool) -> float:
    """A Cuebot-managed release on bare psycopg: DELETE, host UPDATE, the five decrements in
    lock order, COMMIT, each statement prepared as the service's are; optionally with the
    statements after the DELETE in one pipeline (one round trip)."""
    with psycopg.connect(settings.DATABASE_URL) as pg:
        started = time.perf_counter()
        for proc_id in proc_ids:
            with pg.cursor() as cursor:
                cursor.execute(DELETE_PROCS, {"ids": [proc_id]}, prepare=True)
                row = cursor.fetchone()
                (_, host, _, _, _, _, _, _, _, centicores, gpus, mem, gpu_mem, _) = row
                with pg.pipeline() if pipelined else nullcontext():
                    cursor.execute(GIVE_BACK_TO_HOSTS, {"hosts": [host], "cores": [centicores], "mem": [mem],
                                                        "gpus": [gpus], "gpu_mem": [gpu_mem]}, prepare=True)
                    for table, params in decrement_params(row).items():
                        cursor.execute(ADJUSTMENT_SQL[table], params, prepare=True)
            pg.commit()
        elapsed = time.perf_counter() - started
    return len(proc_ids) / elapsed


def timed(fn, n: int) -> float:
    started = time.perf_counter()
    fn()
    return n / (time.perf_counter() - started)


# The service's two entry points, each timed on fresh procs: one call per proc, and
# batches of 100 (given twice the procs, so a round has several batches).
LIBRARY_PATHS = {
    "single": lambda ids: timed(lambda: [unbook_proc(proc_id=p) for p in ids], len(ids)),
    "batched": lambda ids: timed(lambda: [unbook_procs(proc_ids=ids[i:i + 100]) for i in range(0, len(ids), 100)], len(ids)),
}


def interleaved_rates(farm: "BenchFarm", n: int, paths: dict) -> dict[str, float]:
    """Releases/s per path, over ROUNDS rounds that run every path in turn, so drift in
    machine load hits every path alike. Each path gets n releases in all (batches 2n)."""
    seconds: Counter = Counter()
    per_round = max(1, n // ROUNDS)
    for _ in range(ROUNDS):
        for name, release in paths.items():
            count = 2 * per_round if name == "batched" else per_round
            seconds[name] += count / release(farm.add_procs(count))
    return {name: (2 if name == "batched" else 1) * per_round * ROUNDS / seconds[name] for name in paths}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def gunicorn_server():
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "settings", "LOG_LEVEL": "WARNING"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "cuebot_acct.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", str(HTTP_WORKERS), "--log-level", "warning"],
        cwd=ROOT, env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("bench: gunicorn did not come up")
            time.sleep(0.1)  # a server starting up has no event to wait on
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


def http_rate(port: int, token: str, proc_ids: list[str]) -> float:
    shares = [proc_ids[i::HTTP_CLIENTS] for i in range(HTTP_CLIENTS)]
    failures: list[str] = []
    barrier = threading.Barrier(HTTP_CLIENTS + 1)

    def client(share: list[str]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        barrier.wait()
        for proc_id in share:
            conn.request("POST", f"/api/v1/procs/{proc_id}/unbook", headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                failures.append(f"{proc_id}: {response.status}")
        conn.close()

    threads = [threading.Thread(target=client, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"bench: {len(failures)} HTTP releases failed, first: {failures[0]}")
    return len(proc_ids) / elapsed


@contextmanager
def counting_round_trips():
    """Counts SQL statements and Redis commands by database while the block runs."""
    counts: Counter = Counter()

    def sql(execute, sql_text, params, many, context):
        counts["sql"] += 1
        return execute(sql_text, params, many, context)

    patched = [(accounting_redis(), "redis accounting db"), (get_redis_connection("default"), "redis cache db")]
    for client, label in patched:
        original = client.execute_command

        def wrapper(*args, _original=original, _label=label, **kwargs):
            counts[_label] += 1
            return _original(*args, **kwargs)

        client.execute_command = wrapper
    try:
        with connection.execute_wrapper(sql):
            yield counts
    finally:
        for client, _ in patched:
            del client.execute_command


@contextmanager
def counting_pg_round_trips():
    """SQL statements (execute_wrappers) and PostgreSQL round trips while the block runs.

    A round trip is one ReadyForQuery in libpq's protocol trace: the server's answer to a
    Sync or a simple Query, which the client waits for (a pipeline sends many statements
    and one Sync).
    """
    counts: Counter = Counter()

    def sql(execute, sql_text, params, many, context):
        counts["sql"] += 1
        return execute(sql_text, params, many, context)

    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile() as trace, connection.execute_wrapper(sql):
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield counts
        finally:
            pgconn.untrace()
            trace.seek(0)
            counts["round trips"] = sum(1 for line in trace if line.startswith(b"B\t") and b"\tReadyForQuery" in line)


def counts_per_call(farm: BenchFarm, counter) -> tuple[dict, dict]:
    """What `counter` sees for one unbook_proc and for one unbook_procs of 100 procs."""
    procs = farm.add_procs(101)
    with counter() as one:
        unbook_proc(proc_id=procs[0])
    with counter() as hundred:
        unbook_procs(proc_ids=procs[1:])
    return one, hundred


def cuebot_phase(n: int) -> dict:
    """Cuebot-managed releases on a farm of their own, interleaved with their floors."""
    farm = BenchFarm(scheduler_managed=False)
    try:
        for proc_id in farm.add_procs(20):
            unbook_proc(proc_id=proc_id)
        unbook_procs(proc_ids=farm.add_procs(100))
        cuebot_floor(farm.add_procs(20), pipelined=False)
        cuebot_floor(farm.add_procs(20), pipelined=True)

        rates = interleaved_rates(farm, n, {
            "floor": lambda ids: cuebot_floor(ids, pipelined=False),
            "floor_pipelined": lambda ids: cuebot_floor(ids, pipelined=True),
            **LIBRARY_PATHS,
        })

        one, hundred = counts_per_call(farm, counting_pg_round_trips)
    finally:
        farm.remove()
    return {"rates": rates, "one": one, "hundred": hundred}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=1000, help="releases per measured phase (batches use 2x)")
    parser.add_argument("--http-procs", type=int, default=400)
    options = parser.parse_args()
    n = options.procs

    farm = BenchFarm()
    try:
        # Warm everything each path uses: connections, scripts, the flag cache.
        for proc_id in farm.add_procs(20):
            unbook_proc(proc_id=proc_id)
        floor(farm, farm.add_procs(20), with_flag_and_prepare=False)

        rates = interleaved_rates(farm, n, {
            "bare": lambda ids: floor(farm, ids, with_flag_and_prepare=False),
            "bare_same_trips": lambda ids: floor(farm, ids, with_flag_and_prepare=True),
            **LIBRARY_PATHS,
        })
        bare, bare_same_trips, single, batched = (rates[k] for k in ("bare", "bare_same_trips", "single", "batched"))
        http_ids = farm.add_procs(options.http_procs)
        with gunicorn_server() as port:
            for proc_id in farm.add_procs(2 * HTTP_CLIENTS):  # warm the workers
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("POST", f"/api/v1/procs/{proc_id}/unbook", headers={"Authorization": f"Bearer {farm.token}"})
                conn.getresponse().read()
            over_http = http_rate(port, farm.token, http_ids)

        is_scheduler_managed(show_id=farm.show.id)  # the counts below are for a warm flag cache
        one, hundred = counts_per_call(farm, counting_round_trips)
    finally:
        farm.remove()
    cuebot = cuebot_phase(n)

    print(f"release bench: {n} releases per path (2x for batches) in {ROUNDS} interleaved rounds, scheduler-managed show, warm flag cache, "
          f"PG {connection.settings_dict['HOST']}, Redis {settings.ACCOUNTING_REDIS_URL}")
    print(f"{'path':46s} {'releases/s':>11s} {'x floor':>8s}")
    rows = [
        ("floor: DELETE, host UPDATE, COMMIT, release.lua", bare),
        ("floor + flag GET + in-flight prepare", bare_same_trips),
        ("unbook_proc", single),
        ("unbook_procs, batches of 100", batched),
        (f"HTTP POST /procs/{{id}}/unbook, {HTTP_CLIENTS} clients, {HTTP_WORKERS} workers", over_http),
    ]
    for label, rate in rows:
        print(f"{label:46s} {rate:11.0f} {rate / bare:8.2f}")
    print(f"unbook_proc vs floor with the same round trips: {single / bare_same_trips:.2f}x")
    print(f"targets: unbook_proc >= 0.80x floor (measured {single / bare:.2f}x); "
          f"batches of 100 >= 15x unbook_proc (measured {batched / single:.1f}x)")
    print("per release (unbook_proc): "
          f"SQL {one['sql']}, Redis accounting db {one['redis accounting db']} (prepare + release), "
          f"Redis cache db {one['redis cache db']} (flag lookup)")
    print("per batch of 100 (unbook_procs): "
          f"SQL {hundred['sql']}, Redis accounting db {hundred['redis accounting db']}, "
          f"Redis cache db {hundred['redis cache db']}")

    rates, one, hundred = cuebot["rates"], cuebot["one"], cuebot["hundred"]
    print()
    print(f"Cuebot-managed show: {n} releases per path (2x for batches) in {ROUNDS} interleaved rounds, no Redis")
    print(f"{'path':46s} {'releases/s':>11s} {'x floor':>8s}")
    cuebot_rows = [
        ("floor: DELETE, host UPDATE, 5 decrements, COMMIT", rates["floor"]),
        ("floor, host UPDATE + decrements pipelined", rates["floor_pipelined"]),
        ("unbook_proc", rates["single"]),
        ("unbook_procs, batches of 100", rates["batched"]),
    ]
    for label, rate in cuebot_rows:
        print(f"{label:46s} {rate:11.0f} {rate / rates['floor']:8.2f}")
    print(f"unbook_proc vs the pipelined floor: {rates['single'] / rates['floor_pipelined']:.2f}x; "
          f"batches of 100: {rates['batched'] / rates['single']:.1f}x unbook_proc")
    print(f"per release (unbook_proc): SQL {one['sql']}, PG round trips {one['round trips']} (BEGIN and COMMIT included)")
    print(f"per batch of 100 (unbook_procs): SQL {hundred['sql']}, PG round trips {hundred['round trips']}")


if __name__ == "__main__":
    main()
