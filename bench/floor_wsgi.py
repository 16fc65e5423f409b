"""The HTTP floor (issue 35): the plainest WSGI app that releases a proc, served by bench/http.py
under the same gunicorn options as the service.

    POST /api/v1/procs/<id>/unbook          one release
    POST /api/v1/procs/unbook {"proc_ids"}  a batch, one transaction

Per request, on a psycopg connection and a redis-py client of the serving thread's own: the
release floor of bench/release.py (DELETE ... USING host, job RETURNING, host UPDATE, COMMIT,
one EVALSHA of bench/floor_release.lua), and a small JSON answer. No routing, authentication,
validation or names: what any web backend doing the release would have to pay.

In the Maestro era, after the DELETE's answer, the host refund, Cuebot's five decrements and the
COMMIT go pipelined (psycopg's pipeline mode), in one round trip, as the service sends what follows
its releasing statement: none of them needs anything back, and a backend that knows it pays one
round trip for them. (Before issue 43 this floor sent them one by one, seven round trips where
the service makes one: a floor that flattered the service.)

`registering` (Redis era): the same, with the step the design adds before any lock
(docs/redis-protocol.md): the procs read (one SELECT by key, their host and job joined) and
their decrements registered in flight (one HSET of a hash of the floor's own), the entry
removed by the release's script (bench/floor_release_registered.lua). What a web backend doing
the design's release plainly would pay: bench/over_http.py reports the service against both.
"""

import json
import os
import sys
import threading
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

import psycopg  # noqa: E402
import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from release import (  # noqa: E402  (bench/release.py: the in-process floor's statements and script)
    FLOOR_DELETE,
    FLOOR_HOST,
    FLOOR_HOSTS,
    FLOOR_SCRIPT,
    Floor,
    _per_host,
    floor_decrements,
    floor_deltas,
)

from accounting.live import keys  # noqa: E402
from infra.era import era  # noqa: E402

MAESTRO = not era().keeps_redis
# The release floor's DELETE, also returning the proc's id (column 12) for the batch's answer.
DELETE_ONE = FLOOR_DELETE.replace("p.int_gpu_mem_reserved", "p.int_gpu_mem_reserved, p.pk_proc")
DELETE_MANY = DELETE_ONE.replace("p.pk_proc = %s", "p.pk_proc = ANY(%s)")
# The batch floor's host UPDATE, its rows locked in key order first: concurrent batches share
# hosts, and an UPDATE ... FROM unnest locks them in whatever order its plan visits them
# (PostgreSQL aborted one of two such batches, 40P01). The service locks hosts the same way.
UPDATE_HOSTS = (
    "WITH locked AS MATERIALIZED (SELECT pk_host FROM host WHERE pk_host = ANY(%s::text[]) "
    "ORDER BY pk_host FOR NO KEY UPDATE) "
    + FLOOR_HOSTS.replace(
        "WHERE h.pk_host = d.pk_host", "WHERE h.pk_host = d.pk_host AND d.pk_host IN (SELECT pk_host FROM locked)"
    )
)
PREFIX, SUFFIX = "/api/v1/procs/", "/unbook"
_local = threading.local()


def _floor(*, registering: bool = False) -> Floor:
    """The serving thread's floor (one per app: `registering` keeps its own)."""
    name = "registering" if registering else "floor"
    floor = getattr(_local, name, None)
    if floor is None:
        floor = _RegisteringFloor() if registering else _RedisFloor() if not MAESTRO else Floor()
        setattr(_local, name, floor)
    return floor


class _RedisFloor(Floor):
    """A script flushed from Redis (SCRIPT FLUSH, by a test suite sharing the server) is loaded
    again, as the service's scripts are (accounting.live.scripts): a floor answering 500 is
    no floor."""

    def publish(self, rows: list[tuple]) -> None:
        try:
            super().publish(rows)
        except redis.exceptions.NoScriptError:
            self.sha = self.redis.script_load(FLOOR_SCRIPT)
            super().publish(rows)


REGISTERED_SCRIPT = (Path(__file__).resolve().parent / "floor_release_registered.lua").read_text()
INFLIGHT = "bench:floor:inflight"  # the floor's own: the service's acct:inflight is not touched
# The read before any lock: by key, the columns DELETE_ONE returns.
READ_ONE = """
SELECT p.pk_host, p.pk_show, h.pk_alloc, j.pk_folder, p.pk_job, p.pk_layer, j.pk_dept, j.pk_show,
       p.int_cores_reserved, p.int_gpus_reserved, p.int_mem_reserved, p.int_gpu_mem_reserved, p.pk_proc
  FROM proc p JOIN host h ON h.pk_host = p.pk_host JOIN job j ON j.pk_job = p.pk_job
 WHERE p.pk_proc = %s
"""
READ_MANY = READ_ONE.replace("p.pk_proc = %s", "p.pk_proc = ANY(%s)")


class _RegisteringFloor(_RedisFloor):
    """The floor with the design's registration: the deltas read and registered in flight
    before the transaction, the entry removed by the release's script."""

    def __init__(self) -> None:
        super().__init__()
        self.registered_sha = self.redis.script_load(REGISTERED_SCRIPT)
        # The read is a statement on its own, as the service's (no BEGIN and COMMIT around it).
        self.reader = psycopg.connect(settings.DATABASE_URL, autocommit=True)

    def register(self, proc_ids: list[str], *, single: bool) -> str:
        rows = self.reader.execute(READ_ONE if single else READ_MANY, proc_ids if single else (proc_ids,)).fetchall()
        entry = uuid.uuid4().hex
        self.redis.hset(
            INFLIGHT, entry, "|".join(f"{key}|{cores}|{gpus}" for key, (cores, gpus) in floor_deltas(rows).items())
        )
        return entry

    def publish_registered(self, rows: list[tuple], entry: str) -> None:
        totals = floor_deltas(rows)
        args = [entry, *(-amount for total in totals.values() for amount in total)]
        names = list(totals)
        try:
            self.redis.evalsha(self.registered_sha, len(names) + 2, *names, keys.SEQ, INFLIGHT, *args)
        except redis.exceptions.NoScriptError:
            self.registered_sha = self.redis.script_load(REGISTERED_SCRIPT)
            self.redis.evalsha(self.registered_sha, len(names) + 2, *names, keys.SEQ, INFLIGHT, *args)


def _give_back(cursor, rows: list[tuple], *, single: bool) -> None:
    """The host refund of the DELETE's rows."""
    if single:
        row = rows[0]
        cursor.execute(FLOOR_HOST, (row[8], row[10], row[9], row[11], row[0]))
    else:
        hosts = _per_host(rows)
        cursor.execute(UPDATE_HOSTS, (hosts[0], *hosts))


def release(proc_ids: list[str], *, single: bool, registering: bool = False) -> list[tuple]:
    floor = _floor(registering=registering)
    entry = floor.register(proc_ids, single=single) if isinstance(floor, _RegisteringFloor) else None
    with floor.pg.cursor() as cursor:
        if single:
            cursor.execute(DELETE_ONE, proc_ids)
        else:
            cursor.execute(DELETE_MANY, (proc_ids,))
        rows = cursor.fetchall()
        if rows and MAESTRO:
            with floor.pg.pipeline():
                _give_back(cursor, rows, single=single)
                floor_decrements(cursor, rows)
                cursor.execute("COMMIT")
        elif rows:
            _give_back(cursor, rows, single=single)
    floor.pg.commit()  # sends nothing where the pipeline's COMMIT ended the transaction
    if entry is not None:
        floor.publish_registered(rows, entry)
    elif rows and not MAESTRO:
        floor.publish(rows)
    return rows


def _answer(row: tuple, proc_id: str) -> dict:
    return {"proc_id": proc_id, "host_id": row[0], "cores_centicores": row[8], "gpus": row[9]}


def _serve(environ, start_response, *, registering: bool):
    path = environ["PATH_INFO"]
    if not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
        body, status = {"detail": f"no endpoint {path}"}, "404 Not Found"
    elif path == PREFIX + "unbook":
        proc_ids = json.loads(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))["proc_ids"]
        rows = {row[12]: row for row in release(proc_ids, single=False, registering=registering)}
        body = {
            "results": [
                {"proc_id": p, "status": "released", "release": _answer(rows[p], p)}
                if p in rows
                else {"proc_id": p, "status": "not_found"}
                for p in proc_ids
            ]
        }
        status = "200 OK"
    else:
        proc_id = path[len(PREFIX) : -len(SUFFIX)]
        rows = release([proc_id], single=True, registering=registering)
        body, status = (_answer(rows[0], proc_id), "200 OK") if rows else ({"detail": "no proc"}, "404 Not Found")
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def application(environ, start_response):
    return _serve(environ, start_response, registering=False)


def registering(environ, start_response):
    return _serve(environ, start_response, registering=True)
