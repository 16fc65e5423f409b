"""Release-path benchmark: releases/s against the release floor, in the same process.

    DJANGO_SETTINGS_MODULE=settings .venv/bin/python bench/release.py [--procs 1000] [--skip http]

Runs against the configured PostgreSQL and Redis. Builds its own farms (ids unique to the
run, so a demo farm in the same database is untouched) and removes them, their Redis keys
and their API user afterwards.

The floor (issue 11) is what a release cannot do without, written plainly on bare psycopg
(statements prepared as psycopg does by default) and redis-py: DELETE FROM proc USING
host, job ... RETURNING the amounts and key ids, UPDATE host, COMMIT, then one EVALSHA of
bench/floor_release.lua (5 x HINCRBY of int_cores/int_gpus and INCR acct:seq on keys that
exist). The batch floor does the same with = ANY($1) and one script call per batch; the
Cuebot-managed floor runs Cuebot's five decrements one by one before the COMMIT.
Every path runs in each of ROUNDS interleaved rounds; ratios are taken within a round and
printed as the median with the spread. The bench pins itself to one CPU and its PostgreSQL
backends and Redis to the others while the library paths run, vacuums the tables it churns
before each round, and prints the floor again on a second connection (A/A): what the method
reads for identical code (see pinned() and vacuum_churned()). Then POST /api/v1/procs/{id}/unbook against the
gunicorn command scripts/server.py deploys, at 1 client against in-process unbook_proc
and at 4 clients against 4 in-process releasers (the machine's capacity), with p99.
Measured, never asserted: the targets are printed beside the ratios.

The NOTIFY era (--skip notify leaves it out) has a floor of its own, as plain: DELETE ...
RETURNING, host UPDATE, one pg_notify per proc with its payload formatted in place, COMMIT
(a batch: one SELECT pg_notify over unnest). Then 1, 4 and 8 forked processes releasing at
once with notify on against the same with both eras off: PostgreSQL serialises the commits
of transactions that notified, so the throughput ratio and p99 are printed per count.
"""

import argparse
import http.client
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

import django  # noqa: E402
import server  # noqa: E402  (scripts/server.py: the deployed gunicorn command)

django.setup()

import psycopg  # noqa: E402
import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402
from django.test import override_settings  # noqa: E402
from django_redis import get_redis_connection  # noqa: E402

from accounting.live import keys  # noqa: E402
from accounting.live.units import cores_from_centicores  # noqa: E402
from accounting.models import (  # noqa: E402
    FolderResource,
    JobResource,
    LayerResource,
    Point,
    Subscription,
)
from accounting.operators.auth import grant_permissions, issue_token  # noqa: E402
from accounting.release.unbook import unbook_proc, unbook_procs  # noqa: E402
from infra.era import era, from_old_switches  # noqa: E402
from infra.permissions import RELEASE_PROCS  # noqa: E402
from infra.redis_factory import accounting_redis  # noqa: E402
from shows.models import Alloc, Dept, Facility, Folder, Host, Job, Show  # noqa: E402
from shows.selectors import flag_cache_key  # noqa: E402
from simulator.farm_builder import (  # noqa: E402
    ADD_HOST_STATS,
    FRAME_COLUMNS,
    PROC_COLUMNS,
    frame_number,
    new_layer,
)

HOSTS = 8
PROC_CORES = (100, 250, 400, 200)
HTTP_CLIENTS = 4
ROUNDS = 3
# Starting PG booked counters of a Cuebot-managed bench farm, in centicores: above what
# the bench releases, so no counter goes negative.
PG_BOOKED = 10**8


class BenchFarm:
    """One show (scheduler-managed or not), one job and layer, a few hosts; procs added per phase."""

    def __init__(self, *, scheduler_managed: bool = True) -> None:
        run = uuid.uuid4().hex[:10]
        self.run = run
        self.frame_numbers: set[int] = set()
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
            folder=self.folder,
            show=self.show,
            dept=self.dept,
            facility=self.facility,
            str_name=f"bench-{run}",
            str_visible_name=f"bench-{run}",
            str_shot="sh001",
            str_user="bench",
            str_state="PENDING",
        )
        self.layer = new_layer(job_id=self.job.id, name="render", mem_min=1024)
        self.layer.save(force_insert=True)
        # Cuebot's insert triggers made the resource rows; start their counters as the farm needs.
        FolderResource.objects.filter(folder=self.folder).update(**booked)
        JobResource.objects.filter(job=self.job).update(int_max_cores=10**9, int_max_gpus=10**9, **booked)
        LayerResource.objects.filter(layer=self.layer).update(**booked)
        self.hosts = Host.objects.bulk_create(
            [
                Host(
                    alloc=self.alloc,
                    str_name=f"bench-{run}-{h}",
                    str_lock_state="OPEN",
                    int_cores=10**9,
                    int_cores_idle=10**9,
                    int_mem=10**12,
                    int_mem_idle=10**12,
                )
                for h in range(HOSTS)
            ]
        )
        with connection.cursor() as cursor:
            cursor.execute(ADD_HOST_STATS, {"hosts": [h.id for h in self.hosts]})
        self.redis_keys = keys.of_proc(
            show_id=self.show.id,
            alloc_id=self.alloc.id,
            folder_id=self.folder.id,
            job_id=self.job.id,
            layer_id=self.layer.id,
            dept_id=self.dept.id,
        )
        if era().keeps_redis:  # the Maestro era keeps no acct:* keys
            for key in self.redis_keys:  # high enough that no release clamps
                accounting_redis().hset(key, mapping={"int_cores": 10**12, "int_gpus": 10**9})
        self.user = get_user_model().objects.create_user(username=f"bench-{run}")
        grant_permissions(user=self.user, permissions=[RELEASE_PROCS])
        self.token = issue_token(user=self.user, name="bench/release.py")

    def key_ids(self) -> dict[str, str]:
        """The ids booking.book names the farm's five keys by."""
        return dict(
            show_id=self.show.id,
            alloc_id=self.alloc.id,
            folder_id=self.folder.id,
            job_id=self.job.id,
            layer_id=self.layer.id,
            dept_id=self.dept.id,
        )

    def add_procs(self, n: int) -> list[str]:
        ids = []
        while len(ids) < n:  # frame numbers are unique per layer: skip an id whose number is taken
            pid = str(uuid.uuid4())
            if frame_number(pid) not in self.frame_numbers:
                self.frame_numbers.add(frame_number(pid))
                ids.append(pid)
        frames = (
            (
                pid,
                self.layer.id,
                self.job.id,
                f"{frame_number(pid):04d}-render",
                "RUNNING",
                frame_number(pid),
                0,
                PROC_CORES[i % len(PROC_CORES)],
                self.hosts[i % HOSTS].str_name,
            )
            for i, pid in enumerate(ids)
        )
        rows = (
            (
                pid,
                self.hosts[i % HOSTS].id,
                self.job.id,
                self.show.id,
                self.layer.id,
                pid,
                PROC_CORES[i % len(PROC_CORES)],
                0,
                4096,
                0,
            )
            for i, pid in enumerate(ids)
        )
        # On a connection of its own, opened here (the benches fork releasers, which must not share
        # it). On the service's connection, the farm builder's DROP TABLE made psycopg deallocate
        # every statement the release path had prepared there (psycopg clears them after a DROP, an
        # ALTER or a ROLLBACK), so each round's first releases were parsed and planned anew, while
        # the floor's connections kept theirs.
        with psycopg.connect(settings.DATABASE_URL) as builder, builder.cursor() as cursor:
            for table, columns, table_rows in (("frame", FRAME_COLUMNS, frames), ("proc", PROC_COLUMNS, rows)):
                with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                    for row in table_rows:
                        copy.write_row(row)
        return ids

    def remove(self) -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM proc WHERE pk_show = %s", [self.show.id])
            for statement in (
                "DELETE FROM frame WHERE pk_job = %(job)s",
                "DELETE FROM layer_resource WHERE pk_job = %(job)s",
                "DELETE FROM layer WHERE pk_job = %(job)s",
                "DELETE FROM job_resource WHERE pk_job = %(job)s",
                "DELETE FROM job WHERE pk_job = %(job)s",
                "DELETE FROM folder_resource WHERE pk_folder = %(folder)s",
                "DELETE FROM folder WHERE pk_folder = %(folder)s",
                "DELETE FROM point WHERE pk_show = %(show)s",
                "DELETE FROM subscription WHERE pk_show = %(show)s",
                "DELETE FROM host WHERE pk_alloc = %(alloc)s",
                "DELETE FROM show WHERE pk_show = %(show)s",
                "DELETE FROM dept WHERE pk_dept = %(dept)s",
                "DELETE FROM alloc WHERE pk_alloc = %(alloc)s",
                "DELETE FROM facility WHERE pk_facility = %(facility)s",
            ):
                cursor.execute(
                    statement,
                    {
                        "job": self.job.id,
                        "folder": self.folder.id,
                        "show": self.show.id,
                        "dept": self.dept.id,
                        "alloc": self.alloc.id,
                        "facility": self.facility.id,
                    },
                )
            self.user.delete()
        if era().keeps_redis:
            accounting_redis().delete(*self.redis_keys)
        cache.delete(flag_cache_key(show_id=self.show.id))


# The floor (issue 11): what a release cannot do without, written plainly on bare clients.
# psycopg prepares a statement after its fifth execution (its default), as any client would.
FLOOR_DELETE = """
DELETE FROM proc p USING host h, job j
 WHERE p.pk_proc = %s AND h.pk_host = p.pk_host AND j.pk_job = p.pk_job
RETURNING p.pk_host, p.pk_show, h.pk_alloc, j.pk_folder, p.pk_job, p.pk_layer, j.pk_dept, j.pk_show,
          p.int_cores_reserved, p.int_gpus_reserved, p.int_mem_reserved, p.int_gpu_mem_reserved
"""
FLOOR_DELETE_MANY = FLOOR_DELETE.replace("p.pk_proc = %s", "p.pk_proc = ANY(%s)")
FLOOR_HOST = """
UPDATE host SET int_cores_idle = int_cores_idle + %s, int_mem_idle = int_mem_idle + %s,
                int_gpus_idle = int_gpus_idle + %s, int_gpu_mem_idle = int_gpu_mem_idle + %s
 WHERE pk_host = %s
"""
FLOOR_HOSTS = """
UPDATE host h SET int_cores_idle = h.int_cores_idle + d.cores, int_mem_idle = h.int_mem_idle + d.mem,
                  int_gpus_idle = h.int_gpus_idle + d.gpus, int_gpu_mem_idle = h.int_gpu_mem_idle + d.gpu_mem
  FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]) AS d(pk_host, cores, mem, gpus, gpu_mem)
 WHERE h.pk_host = d.pk_host
"""
# Cuebot's own decrements, one statement per table in its lock order.
FLOOR_CUEBOT = (
    (
        "UPDATE subscription SET int_cores = int_cores - %s, int_gpus = int_gpus - %s WHERE pk_show = %s AND pk_alloc = %s",
        lambda r: (r[8], r[9], r[1], r[2]),
    ),
    (
        "UPDATE layer_resource SET int_cores = int_cores - %s, int_gpus = int_gpus - %s WHERE pk_layer = %s",
        lambda r: (r[8], r[9], r[5]),
    ),
    (
        "UPDATE job_resource SET int_cores = int_cores - %s, int_gpus = int_gpus - %s WHERE pk_job = %s",
        lambda r: (r[8], r[9], r[4]),
    ),
    (
        "UPDATE folder_resource SET int_cores = int_cores - %s, int_gpus = int_gpus - %s WHERE pk_folder = %s",
        lambda r: (r[8], r[9], r[3]),
    ),
    (
        "UPDATE point SET int_cores = int_cores - %s, int_gpus = int_gpus - %s WHERE pk_dept = %s AND pk_show = %s",
        lambda r: (r[8], r[9], r[6], r[7]),
    ),
)
FLOOR_SCRIPT = (Path(__file__).resolve().parent / "floor_release.lua").read_text()


def _floor_keys(row: tuple) -> tuple[str, ...]:
    (_, show, alloc, folder, job, layer, dept, point_show, *_) = row
    return keys.of_proc(
        show_id=show,
        alloc_id=alloc,
        folder_id=folder,
        job_id=job,
        layer_id=layer,
        dept_id=dept,
        point_show_id=point_show,
    )


def floor_decrements(cursor, rows: list[tuple]) -> None:
    """Cuebot's five decrements of a batch, summed per key and sent in key order, table after table
    (batchDeleteVirtualProcs, written plainly)."""
    for sql, params in FLOOR_CUEBOT:
        per_key: dict[tuple, list[int]] = {}
        for row in rows:
            cores, gpus, *key = params(row)
            total = per_key.setdefault(tuple(key), [0, 0])
            total[0] += cores
            total[1] += gpus
        for key in sorted(per_key):
            cursor.execute(sql, (*per_key[key], *key))


def _per_host(rows: list[tuple]) -> tuple:
    """The batch floor's host UPDATE parameters: cores, memory, GPUs, GPU memory summed per host."""
    per_host: dict[str, list[int]] = {}
    for row in rows:
        total = per_host.setdefault(row[0], [0, 0, 0, 0])
        for j, column in enumerate((8, 10, 9, 11)):
            total[j] += row[column]
    hosts = list(per_host)
    return (hosts, *([per_host[h][j] for h in hosts] for j in range(4)))


def floor_deltas(rows: list[tuple]) -> dict[str, list[int]]:
    """Per key, the cores (Redis's unit, per proc) and GPUs the floor's DELETE rows give back."""
    totals: dict[str, list[int]] = {}
    for row in rows:
        cores = cores_from_centicores(row[8])
        for key in _floor_keys(row):
            total = totals.setdefault(key, [0, 0])
            total[0] += cores
            total[1] += row[9]
    return totals


class Floor:
    """Bare psycopg and redis-py, connected once per bench like the service's pools. Cuebot's floors
    (the Maestro era's) write its tables alone, and that era's settings name no Redis: none then."""

    def __init__(self) -> None:
        self.pg = psycopg.connect(settings.DATABASE_URL)
        self.redis = redis.Redis.from_url(settings.ACCOUNTING_REDIS_URL) if era().keeps_redis else None
        self.sha = self.redis.script_load(FLOOR_SCRIPT) if self.redis is not None else None

    def publish(self, rows: list[tuple]) -> None:
        totals = floor_deltas(rows)
        args = [-amount for total in totals.values() for amount in total]
        self.redis.evalsha(self.sha, len(totals) + 1, *totals, keys.SEQ, *args)

    def single(self, proc_ids: list[str]) -> float:
        """DELETE, host UPDATE, COMMIT, one script call: per proc."""
        started = time.perf_counter()
        for proc_id in proc_ids:
            with self.pg.cursor() as cursor:
                cursor.execute(FLOOR_DELETE, (proc_id,))
                row = cursor.fetchone()
                cursor.execute(FLOOR_HOST, (row[8], row[10], row[9], row[11], row[0]))
            self.pg.commit()
            self.publish([row])
        return len(proc_ids) / (time.perf_counter() - started)

    def batched(self, proc_ids: list[str], size: int = 100) -> float:
        """The same per batch: = ANY($1), one host UPDATE, COMMIT, one script call."""
        started = time.perf_counter()
        for i in range(0, len(proc_ids), size):
            with self.pg.cursor() as cursor:
                cursor.execute(FLOOR_DELETE_MANY, (proc_ids[i : i + size],))
                rows = cursor.fetchall()
                cursor.execute(FLOOR_HOSTS, _per_host(rows))
            self.pg.commit()
            self.publish(rows)
        return len(proc_ids) / (time.perf_counter() - started)

    def cuebot(self, proc_ids: list[str]) -> float:
        """Cuebot's release the bare way: DELETE, host UPDATE, the five decrements one by one, COMMIT."""
        started = time.perf_counter()
        for proc_id in proc_ids:
            with self.pg.cursor() as cursor:
                cursor.execute(FLOOR_DELETE, (proc_id,))
                row = cursor.fetchone()
                cursor.execute(FLOOR_HOST, (row[8], row[10], row[9], row[11], row[0]))
                for sql, params in FLOOR_CUEBOT:
                    cursor.execute(sql, params(row))
            self.pg.commit()
        return len(proc_ids) / (time.perf_counter() - started)

    def cuebot_batched(self, proc_ids: list[str], size: int = 100) -> float:
        """Cuebot's batched release (batchDeleteVirtualProcs) the bare way, per batch: DELETE = ANY,
        host refunds summed per host, each table's decrements summed per key and sent in key
        order, table after table, COMMIT."""
        started = time.perf_counter()
        for i in range(0, len(proc_ids), size):
            with self.pg.cursor() as cursor:
                cursor.execute(FLOOR_DELETE_MANY, (proc_ids[i : i + size],))
                rows = cursor.fetchall()
                cursor.execute(FLOOR_HOSTS, _per_host(rows))
                floor_decrements(cursor, rows)
            self.pg.commit()
        return len(proc_ids) / (time.perf_counter() - started)

    def close(self) -> None:
        self.pg.close()
        if self.redis is not None:
            self.redis.close()


def timed(fn, n: int) -> float:
    started = time.perf_counter()
    fn()
    return n / (time.perf_counter() - started)


# The service's two entry points, each timed on fresh procs: one call per proc, and
# batches of 100 (given BATCH_FACTOR times the procs, so a round has several batches).
BATCH_FACTOR = 5
HTTP_SLICE = 60  # releases per HTTP path in turn: 15 per client at 4 clients
LIBRARY_PATHS = {
    "unbook_proc": lambda ids: timed(lambda: [unbook_proc(proc_id=p) for p in ids], len(ids)),
    "unbook_procs": lambda ids: timed(
        lambda: [unbook_procs(proc_ids=ids[i : i + 100]) for i in range(0, len(ids), 100)], len(ids)
    ),
}


SLICE = 20  # releases per path and turn (interleaved_rates)
# The floor again on a connection of its own: what the method reads for identical code.
A_A_LABEL = "the floor again, second connection (A/A)"


def vacuum_churned() -> None:
    """VACUUM the tables every round fills and empties, as autovacuum would at a site.

    Left to accumulate (a PostgreSQL with autovacuum off, as a test machine's may run, and bench
    runs one after another), dead proc rows and index entries slowed each probe of a proc by
    its id, and a path that reads a proc before releasing it probes twice: on 665,000 dead proc
    rows the read before any lock took 1.32 ms for 100 fresh procs, 0.88 ms once vacuumed.
    A role that does not own the tables gets a warning and a skip, not an error.
    """
    with connection.cursor() as cursor:
        cursor.execute("VACUUM proc, frame, host")


def interleaved_rates(
    farm: "BenchFarm",
    n: int,
    paths: dict,
    *,
    batched=("unbook_procs", "batch_floor"),
    slice_size: int = SLICE,
    rounds: int = ROUNDS,
    before_round=vacuum_churned,
) -> dict[str, list[float]]:
    """Releases/s per path and round, over `rounds` rounds, `before_round` run untimed ahead of
    each (a farm of fixed size refills what the last round released). Within a round the paths take
    turns in slices of `slice_size` releases (BATCH_FACTOR times more for a batched path),
    so a change in machine load hits every path alike; ratios are taken within a round."""
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):
        before_round()
        ids = {name: farm.add_procs(BATCH_FACTOR * n if name in batched else n) for name in paths}
        seconds = dict.fromkeys(paths, 0.0)
        slices = n // slice_size
        for i in range(slices):
            for name, release in paths.items():
                size = len(ids[name]) // slices
                chunk = ids[name][i * size : (i + 1) * size]
                seconds[name] += len(chunk) / release(chunk)
        for name in paths:
            rates[name].append(len(ids[name]) // slices * slices / seconds[name])
    return rates


# Placement. On a machine of a few CPUs the bench and a PostgreSQL backend each run on a CPU of
# their own or share one, as the kernel happens to place them, and a path's rate moved with its
# connection's placement: unpinned, on 2 CPUs, a second floor connection measured 0.79 to 1.31 of
# the floor (the A/A row). The bench pins itself to its first CPU and the servers it releases
# through (its PostgreSQL backends, Redis) to the others, as at a site where the database runs on
# a machine of its own: every path's round trips then cost alike, and the A/A row reads 1.00.
# Where a server is not a local process the bench may pin (another host, another user, a
# container), it stays where it is and the header says so.
SERVER_COMMANDS = ("postgres", "redis-server")


def _local_server(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip().startswith(SERVER_COMMANDS)
    except OSError:
        return False


@contextmanager
def pinned(server_pids: list[int]) -> Iterator[str]:
    """The bench on its first CPU and `server_pids` on the rest while the block runs; yields
    what was pinned, for the header."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        yield "not pinned (1 CPU)"
        return
    plan = {0: {cpus[0]}, **{pid: set(cpus[1:]) for pid in server_pids if _local_server(pid)}}
    saved = {}
    for pid, cpu_set in plan.items():
        try:
            saved[pid] = os.sched_getaffinity(pid)
            os.sched_setaffinity(pid, cpu_set)
        except OSError:
            saved.pop(pid, None)
    servers = sum(1 for pid in saved if pid)  # pid 0 is the bench itself
    try:
        yield (
            f"bench on CPU {cpus[0]}, {servers} of {len(server_pids)} server processes on CPU "
            f"{','.join(map(str, cpus[1:]))}"
        )
    finally:
        for pid, cpu_set in saved.items():
            try:
                os.sched_setaffinity(pid, cpu_set)
            except OSError:  # a backend that has gone
                pass


def redis_servers() -> list[tuple[redis.Redis, str]]:
    """The service's Redis clients, those its settings name: none in the Maestro era without one."""
    clients = [(accounting_redis(), "redis accounting")] if settings.ACCOUNTING_REDIS_URL else []
    return clients + ([(get_redis_connection("default"), "redis cache")] if settings.CACHE_REDIS_URL else [])


def server_pids(*floors: "Floor") -> list[int]:
    """The backends of the service's connection and of the floors, and the Redis servers."""
    connection.ensure_connection()
    pids = [connection.connection.info.backend_pid, *(floor.pg.info.backend_pid for floor in floors)]
    for client, _ in redis_servers():
        pids.append(int(client.info("server")["process_id"]))
    return sorted(set(pids))


def ratio_text(rates: dict[str, list[float]], path: str, base: str) -> str:
    """Median ratio over the rounds, with the spread (lowest–highest round)."""
    ratios = sorted(a / b for a, b in zip(rates[path], rates[base]))
    return f"{statistics.median(ratios):5.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f})"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def gunicorn_server(*, extra: tuple[str, ...] = ()):
    """The web server exactly as scripts/server.py deploys it (workers, threads, metrics dir);
    `extra` arguments after the deployed ones override them (bench/worker_memory.py: one worker)."""
    port = free_port()
    metrics_dir = tempfile.TemporaryDirectory()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings",
        "LOG_LEVEL": "WARNING",
        "PROMETHEUS_MULTIPROC_DIR": metrics_dir.name,
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or uuid.uuid4().hex * 2,
    }
    process = subprocess.Popen(
        server.gunicorn_command(f"127.0.0.1:{port}") + ["--log-level", "warning", *extra], cwd=ROOT, env=env
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
        metrics_dir.cleanup()


def http_rate(port: int, token: str, proc_ids: list[str], clients: int, latencies: list[float]) -> float:
    """Releases/s of `clients` keep-alive clients over the proc ids; each request's latency appended."""
    shares = [proc_ids[i::clients] for i in range(clients)]
    failures: list[str] = []
    barrier = threading.Barrier(clients + 1)

    def client(share: list[str]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        barrier.wait()
        for proc_id in share:
            sent = time.perf_counter()
            conn.request("POST", f"/api/v1/procs/{proc_id}/unbook", headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - sent)
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


def _in_process_worker(proc_ids: list[str], barrier, done) -> None:
    barrier.wait()
    for proc_id in proc_ids:
        unbook_proc(proc_id=proc_id)
    done.put(len(proc_ids))


def in_process_capacity(proc_ids: list[str], processes: int) -> float:
    """Releases/s of `processes` forked copies of this process calling unbook_proc at once:
    what the machine does without HTTP."""
    connections.close_all()  # each child opens its own; none inherits this one's socket
    context = multiprocessing.get_context("fork")
    barrier, done = context.Barrier(processes + 1), context.Queue()
    workers = [
        context.Process(target=_in_process_worker, args=(proc_ids[i::processes], barrier, done))
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    released = sum(done.get() for _ in workers)
    elapsed = time.perf_counter() - started
    for worker in workers:
        worker.join()
    return released / elapsed


def p99(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100)[98] * 1000


@contextmanager
def counting_round_trips():
    """SQL statements, PostgreSQL round trips and Redis commands by database while the block runs.

    A PostgreSQL round trip is one wait in libpq's protocol trace: the client sends (a simple
    Query, or a pipeline's statements up to a Sync or a Flush), then reads the answer.
    """
    counts: Counter = Counter()

    def sql(execute, sql_text, params, many, context):
        counts["sql"] += 1
        return execute(sql_text, params, many, context)

    patched = redis_servers()
    for client, label in patched:
        original = client.execute_command

        def wrapper(*args, _original=original, _label=label, **kwargs):
            counts[_label] += 1
            return _original(*args, **kwargs)

        client.execute_command = wrapper
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile() as trace, connection.execute_wrapper(sql):
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield counts
        finally:
            pgconn.untrace()
            for client, _ in patched:
                del client.execute_command
            trace.seek(0)
            directions = [line[:1] for line in trace]
            counts["pg round trips"] = sum(
                1 for sent, answer in zip(directions, directions[1:]) if sent == b"F" and answer == b"B"
            )


def counts_per_call(farm: BenchFarm) -> tuple[dict, dict]:
    """What a warm unbook_proc and an unbook_procs of 100 procs send."""
    procs = farm.add_procs(102)
    unbook_proc(proc_id=procs.pop())  # warm: the flag is in the local memo
    with counting_round_trips() as one:
        unbook_proc(proc_id=procs[0])
    with counting_round_trips() as hundred:
        unbook_procs(proc_ids=procs[1:])
    return one, hundred


def warm(farm: BenchFarm, floor: Floor) -> None:
    """Connections, scripts, prepared statements and the flag memo, for every path."""
    for proc_id in farm.add_procs(20):
        unbook_proc(proc_id=proc_id)
    unbook_procs(proc_ids=farm.add_procs(200))
    floor.single(farm.add_procs(20))
    floor.batched(farm.add_procs(200))


def print_rates(rates: dict[str, list[float]], rows: list[tuple[str, str, str, str]]) -> None:
    print(f"{'path':52s} {'releases/s':>11s}  {'x its floor, median (spread)':>28s}  target")
    for label, path, base, target in rows:
        print(f"{label:52s} {statistics.median(rates[path]):11.0f}  {ratio_text(rates, path, base):>28s}  {target}")


def count_line(label: str, counts: dict) -> str:
    return (
        f"{label}: SQL {counts['sql']}, PG round trips {counts['pg round trips']} (BEGIN and COMMIT included), "
        f"Redis accounting {counts['redis accounting']}, Redis cache {counts['redis cache']}"
    )


def against_floors(
    farm: BenchFarm, n: int, *, floors: tuple["Floor", "Floor"], single, again, batched
) -> tuple[dict, str, dict, dict]:
    """The library's paths in turns with a floor (single and batched) and the single floor on a
    second connection (A/A), pinned with the floors' backends; then what a warm call sends."""
    with pinned(server_pids(*floors)) as placement:
        rates = interleaved_rates(
            farm, n, {"floor": single, "floor_again": again, "batch_floor": batched, **LIBRARY_PATHS}
        )
    return rates, placement, *counts_per_call(farm)


def print_against_floors(
    rates: dict,
    *,
    floor: str,
    batch_floor: str,
    single_target: str,
    one: dict,
    hundred: dict,
    single: str = "unbook_proc",
) -> None:
    print_rates(
        rates,
        [
            (floor, "floor", "floor", ""),
            (A_A_LABEL, "floor_again", "floor", "1.00"),
            (batch_floor, "batch_floor", "batch_floor", ""),
            (single, "unbook_proc", "floor", single_target),
            ("unbook_procs, batches of 100", "unbook_procs", "batch_floor", ">= 0.90"),
        ],
    )
    print(count_line("per unbook_proc", one))
    print(count_line("per unbook_procs of 100", hundred))


def scheduler_phase(n: int, http_procs: int, *, with_http: bool) -> None:
    farm, floor, again = BenchFarm(), Floor(), Floor()
    try:
        warm(farm, floor)
        again.single(farm.add_procs(20))
        rates, placement, one, hundred = against_floors(
            farm, n, floors=(floor, again), single=floor.single, again=again.single, batched=floor.batched
        )
        print(
            f"Scheduler-managed show: {n} releases per path and round ({BATCH_FACTOR * n} for batches), "
            f"{ROUNDS} interleaved rounds; PG {connection.settings_dict['HOST']}, Redis {settings.ACCOUNTING_REDIS_URL}; "
            f"{placement}"
        )
        print_against_floors(
            rates,
            floor="floor: DELETE, host UPDATE, COMMIT, one script",
            batch_floor="batch floor: the same with = ANY($1), per 100",
            single="unbook_proc (warm flag)",
            single_target=">= 0.80",
            one=one,
            hundred=hundred,
        )

        if not with_http:
            return
        latencies: dict[int, list[float]] = {1: [], HTTP_CLIENTS: []}
        with gunicorn_server() as port:
            http_rate(port, farm.token, farm.add_procs(4 * HTTP_CLIENTS), HTTP_CLIENTS, [])  # warm the workers
            http = interleaved_rates(
                farm,
                http_procs,
                {
                    "in-process": LIBRARY_PATHS["unbook_proc"],
                    "http 1": lambda ids: http_rate(port, farm.token, ids, 1, latencies[1]),
                    "capacity": lambda ids: in_process_capacity(ids, HTTP_CLIENTS),
                    f"http {HTTP_CLIENTS}": lambda ids: http_rate(
                        port, farm.token, ids, HTTP_CLIENTS, latencies[HTTP_CLIENTS]
                    ),
                },
                slice_size=HTTP_SLICE,
            )
        print(
            f"HTTP POST /api/v1/procs/{{id}}/unbook, gunicorn as scripts/server.py runs it "
            f"({' '.join(server.gunicorn_command('ADDR')[1:])}), {http_procs} releases per path and round"
        )
        print(f"{'path':52s} {'releases/s':>11s}  {'x in-process, median (spread)':>28s}  target   p99")
        for label, path, base, target, clients in (
            ("unbook_proc in-process, 1 caller", "in-process", "in-process", "", None),
            ("HTTP, 1 client", "http 1", "in-process", ">= 0.60", 1),
            (f"unbook_proc in-process, {HTTP_CLIENTS} processes (capacity)", "capacity", "capacity", "", None),
            (f"HTTP, {HTTP_CLIENTS} clients", f"http {HTTP_CLIENTS}", "capacity", ">= 0.80", HTTP_CLIENTS),
        ):
            tail = f"  {p99(latencies[clients]):5.1f} ms" if clients else ""
            print(
                f"{label:52s} {statistics.median(http[path]):11.0f}  {ratio_text(http, path, base):>28s}  {target:7s}{tail}"
            )
    finally:
        floor.close()
        again.close()
        farm.remove()


def cuebot_phase(n: int) -> None:
    """Cuebot-managed releases on a farm of their own, interleaved with their floor."""
    farm, floor = BenchFarm(scheduler_managed=False), Floor()
    try:
        warm(farm, floor)
        floor.cuebot(farm.add_procs(20))
        with pinned(server_pids(floor)) as placement:
            rates = interleaved_rates(farm, n, {"floor": floor.cuebot, **LIBRARY_PATHS})
        one, hundred = counts_per_call(farm)
    finally:
        floor.close()
        farm.remove()
    print()
    print(
        f"Cuebot-managed show (PG accounting tables written in the transaction, no Redis): {n} releases per path "
        f"and round ({BATCH_FACTOR * n} for batches), {ROUNDS} interleaved rounds; {placement}"
    )
    print_rates(
        rates,
        [
            ("floor: DELETE, host UPDATE, 5 decrements, COMMIT", "floor", "floor", ""),
            ("unbook_proc", "unbook_proc", "floor", ">= 0.80"),
            ("unbook_procs, batches of 100 (vs the one-by-one floor)", "unbook_procs", "floor", ""),
        ],
    )
    print(count_line("per unbook_proc", one))
    print(count_line("per unbook_procs of 100", hundred))


def maestro_phase(n: int) -> None:
    """The Maestro era (OpenCue v1.34.20 and later): a flagged show's releases credit the five
    tables, against Cuebot's own statements written plainly, single and batched."""
    farm, floor, again = BenchFarm(scheduler_managed=True), Floor(), Floor()
    try:
        with eras(redis_on=False, notify_on=False):
            warm(farm, floor)
            again.cuebot(farm.add_procs(20))
            floor.cuebot_batched(farm.add_procs(200))
            rates, placement, one, hundred = against_floors(
                farm, n, floors=(floor, again), single=floor.cuebot, again=again.cuebot, batched=floor.cuebot_batched
            )
    finally:
        floor.close()
        again.close()
        farm.remove()
    print()
    print(
        f"Maestro era (ACCOUNTING_SCHEDULER=maestro), flagged show, the five tables written in the transaction: "
        f"{n} releases per path and round ({BATCH_FACTOR * n} for batches), {ROUNDS} interleaved rounds; {placement}"
    )
    print_against_floors(
        rates,
        floor="floor: DELETE, host UPDATE, 5 decrements, COMMIT",
        batch_floor="batch floor: the same per 100, decrements summed per key",
        single_target=">= 0.90",
        one=one,
        hundred=hundred,
    )


# The NOTIFY era's floor: the release and its notification, written plainly.
FLOOR_NOTIFY = "SELECT pg_notify('acct_release', %s)"
FLOOR_NOTIFY_MANY = "SELECT pg_notify('acct_release', p) FROM unnest(%s::text[]) AS p"


def _floor_payload(row: tuple) -> str:
    (_, show, alloc, folder, job, layer, dept, _, cores, gpus, *_) = row
    return (
        f'{{"show":"{show}","alloc":"{alloc}","folder":"{folder}","job":"{job}","layer":"{layer}",'
        f'"dept":"{dept}","cores":{-(cores // 100)},"gpus":{-gpus}}}'
    )


class NotifyFloor(Floor):
    def single(self, proc_ids: list[str]) -> float:
        started = time.perf_counter()
        for proc_id in proc_ids:
            with self.pg.cursor() as cursor:
                cursor.execute(FLOOR_DELETE, (proc_id,))
                row = cursor.fetchone()
                cursor.execute(FLOOR_HOST, (row[8], row[10], row[9], row[11], row[0]))
                cursor.execute(FLOOR_NOTIFY, (_floor_payload(row),))
            self.pg.commit()
        return len(proc_ids) / (time.perf_counter() - started)

    def batched(self, proc_ids: list[str], size: int = 100) -> float:
        started = time.perf_counter()
        for i in range(0, len(proc_ids), size):
            with self.pg.cursor() as cursor:
                cursor.execute(FLOOR_DELETE_MANY, (proc_ids[i : i + size],))
                rows = cursor.fetchall()
                cursor.execute(FLOOR_HOSTS, _per_host(rows))
                cursor.execute(FLOOR_NOTIFY_MANY, ([_floor_payload(row) for row in rows],))
            self.pg.commit()
        return len(proc_ids) / (time.perf_counter() - started)


def _timed_worker(proc_ids: list[str], barrier, done) -> None:
    barrier.wait()
    latencies = []
    for proc_id in proc_ids:
        sent = time.perf_counter()
        unbook_proc(proc_id=proc_id)
        latencies.append(time.perf_counter() - sent)
    done.put(latencies)


def concurrent_releases(proc_ids: list[str], processes: int) -> tuple[float, list[float]]:
    """Releases/s and latencies of `processes` forked copies releasing at once."""
    connections.close_all()
    context = multiprocessing.get_context("fork")
    barrier, done = context.Barrier(processes + 1), context.Queue()
    workers = [
        context.Process(target=_timed_worker, args=(proc_ids[i::processes], barrier, done)) for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    latencies = [latency for _ in workers for latency in done.get()]
    elapsed = time.perf_counter() - started
    for worker in workers:
        worker.join()
    return len(proc_ids) / elapsed, latencies


@contextmanager
def eras(*, redis_on: bool, notify_on: bool):
    with override_settings(ACCOUNTING_SCHEDULER=from_old_switches(redis=redis_on, notify=notify_on)):
        yield


def notify_phase(n: int) -> None:
    """The NOTIFY era: the release against its own floor, then the cost of notifying under concurrency."""
    farm, floor, again = BenchFarm(), NotifyFloor(), NotifyFloor()
    try:
        with eras(redis_on=False, notify_on=True):
            warm(farm, floor)
            again.single(farm.add_procs(20))
            with pinned(server_pids(floor, again)) as placement:
                rates = interleaved_rates(
                    farm,
                    n,
                    {"floor": floor.single, "floor_again": again.single, "batch_floor": floor.batched, **LIBRARY_PATHS},
                )
        concurrency = {}
        for clients in (1, 4, 8):
            for label, notify_on in (("off", False), ("notify", True)):
                with eras(redis_on=False, notify_on=notify_on):
                    results = [concurrent_releases(farm.add_procs(n), clients) for _ in range(ROUNDS)]
                concurrency[(clients, label)] = results
    finally:
        floor.close()
        again.close()
        farm.remove()
    print()
    print(
        f"NOTIFY era (ACCOUNTING_NOTIFY_ENABLED, Redis off), scheduler-managed show: {n} releases per path and "
        f"round ({BATCH_FACTOR * n} for batches), {ROUNDS} interleaved rounds; {placement}"
    )
    print_rates(
        rates,
        [
            ("floor: DELETE, host UPDATE, pg_notify, COMMIT", "floor", "floor", ""),
            (A_A_LABEL, "floor_again", "floor", "1.00"),
            ("batch floor: the same per 100, one pg_notify per proc", "batch_floor", "batch_floor", ""),
            ("unbook_proc", "unbook_proc", "floor", ">= 0.90"),
            ("unbook_procs, batches of 100", "unbook_procs", "batch_floor", ">= 0.90"),
        ],
    )
    print(
        f"{'processes releasing at once':30s} {'both eras off':>14s} {'notify on':>10s}  "
        f"{'ratio, median (spread)':>24s}  {'p99 off':>8s} {'p99 notify':>10s}"
    )
    for clients in (1, 4, 8):
        off, on = concurrency[(clients, "off")], concurrency[(clients, "notify")]
        ratios = sorted(a[0] / b[0] for a, b in zip(on, off))
        p99s = [p99([lat for _, lats in results for lat in lats]) for results in (off, on)]
        print(
            f"{clients:<30d} {statistics.median(r for r, _ in off):14.0f} {statistics.median(r for r, _ in on):10.0f}  "
            f"{statistics.median(ratios):5.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f}){'':9s}  "
            f"{p99s[0]:6.1f} ms {p99s[1]:7.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=1000, help="releases per path and round (batches 5x)")
    parser.add_argument("--http-procs", type=int, default=600, help="releases per HTTP path and round")
    parser.add_argument("--skip", choices=["http", "cuebot", "notify", "redis", "maestro"], action="append", default=[])
    options = parser.parse_args()
    if "redis" not in options.skip:
        scheduler_phase(options.procs, options.http_procs, with_http="http" not in options.skip)
    if "cuebot" not in options.skip:
        cuebot_phase(options.procs)
    if "notify" not in options.skip:
        notify_phase(options.procs)
    if "maestro" not in options.skip:
        maestro_phase(options.procs)


if __name__ == "__main__":
    main()
