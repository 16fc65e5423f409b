"""Processes a simulation run starts and owns: a private accounting Redis that the `redis-kill`
fault kills with SIGKILL and starts again empty (a real restart of a server without
persistence, not a FLUSHDB), and the web server exactly as deployed, which the `http-release`
fault's releases go through.

Both listen on loopback ports picked here and are stopped when the run ends, whatever happens.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import redis
from django.conf import settings
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from infra.serving import gunicorn_args
from simulator import service_era

ROOT = Path(__file__).resolve().parent.parent  # the project root, where gunicorn finds cuebot_acct
START_SECONDS = 30


class ProcessRefused(Exception):
    """A process the run needs cannot be started here (a missing program, say)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _await(ready, *, process: subprocess.Popen, what: str) -> None:
    """Poll `ready` until true; ProcessRefused if the process exits or START_SECONDS pass."""
    deadline = time.monotonic() + START_SECONDS
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise ProcessRefused(f"{what} did not come up")
        time.sleep(0.05)  # a starting server has no event to wait on


@dataclass
class PrivateRedis:
    port: int
    directory: str
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        program = shutil.which("redis-server")
        if program is None:
            raise ProcessRefused("the redis-kill fault needs redis-server on PATH (it runs a Redis of its own to kill)")
        self.process = subprocess.Popen(
            [
                program,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.directory,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _await(self._answers, process=self.process, what=f"redis-server on port {self.port}")

    def _answers(self) -> bool:
        try:
            with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(10)

    def restart(self) -> None:
        """kill -9, then the same server again, empty: what a Redis without persistence is after a crash."""
        self.kill()
        self.start()


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    with tempfile.TemporaryDirectory(prefix="sim-redis-") as directory:
        server = PrivateRedis(port=_free_port(), directory=directory)
        server.start()
        try:
            yield server
        finally:
            server.kill()


def _database_url() -> str:
    db = settings.DATABASES["default"]
    credentials = quote(db.get("USER") or "", safe="")
    if db.get("PASSWORD"):
        credentials += ":" + quote(db["PASSWORD"], safe="")
    return f"postgres://{credentials}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{quote(db['NAME'], safe='')}"


@dataclass(frozen=True)
class WebServer:
    port: int
    metrics_dir: str
    token: str

    def release(self, proc_ids: list[str]) -> list[bool]:
        """Release through the API, one proc (POST /procs/{id}/unbook) or a batch (POST
        /procs/unbook); True per proc released, False per proc not found."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        try:
            if len(proc_ids) == 1:
                conn.request("POST", f"/api/v1/procs/{proc_ids[0]}/unbook", headers=headers)
            else:
                conn.request("POST", "/api/v1/procs/unbook", body=json.dumps({"proc_ids": proc_ids}), headers=headers)
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if len(proc_ids) == 1 and response.status == 404:
            return [False]
        if response.status != 200:
            raise RuntimeError(f"HTTP release answered {response.status}: {body[:200]!r}")
        if len(proc_ids) == 1:
            return [True]
        return [result["status"] == "released" for result in json.loads(body)["results"]]

    def counter(self, name: str) -> float:
        """A counter summed over the server's worker processes (their multiprocess directory)."""
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.metrics_dir)
        return registry.get_sample_value(name) or 0.0


@contextmanager
def web_server(*, token: str, database_url: str | None = None) -> Iterator[WebServer]:
    """gunicorn as deployed (infra.serving), on this run's database (as `database_url`'s
    role when given) and Redis, with the run's settings, its era included, where the simulation
    overrides them."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="sim-metrics-") as metrics_dir:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "settings",
            "LOG_LEVEL": "WARNING",
            "PROMETHEUS_MULTIPROC_DIR": metrics_dir,
            "DJANGO_SECRET_KEY": uuid.uuid4().hex * 2,
            "DATABASE_URL": database_url or _database_url(),
            **service_era.environment(),
            "ACCOUNTING_REDIS_URL": settings.ACCOUNTING_REDIS_URL,
            "CACHE_REDIS_URL": settings.CACHE_REDIS_URL,
            "TASK_BROKER_REDIS_URL": settings.TASK_BROKER_REDIS_URL,
            "ACCOUNTING_REDIS_TIMEOUT": str(settings.ACCOUNTING_REDIS_TIMEOUT),
            "ACCOUNTING_INFLIGHT_TTL_SECONDS": str(settings.ACCOUNTING_INFLIGHT_TTL_SECONDS),
            "ACCOUNTING_SCHEDULER_RESEEDS": str(settings.ACCOUNTING_SCHEDULER_RESEEDS),
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", *gunicorn_args(bind=f"127.0.0.1:{port}"), "--log-level", "warning"],
            cwd=ROOT,
            env=env,
        )
        try:
            _await(lambda: _healthy(port), process=process, what="gunicorn")
            yield WebServer(port=port, metrics_dir=metrics_dir, token=token)
        finally:
            process.terminate()
            try:
                process.wait(30)  # gunicorn's graceful timeout
            except subprocess.TimeoutExpired:
                process.kill()  # a server that does not stop is not left behind
                process.wait(10)


def _healthy(port: int) -> bool:
    """The web server answers and every part it checks is up but the task cluster, which a
    simulation does not run (/healthz names it down, 503, the rest of the answer as usual)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/healthz")
        checks = json.loads(conn.getresponse().read())["checks"]
    except (OSError, ValueError, KeyError):
        return False
    return all(state == "ok" for part, state in checks.items() if part != "task_cluster")
