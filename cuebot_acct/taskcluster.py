"""`manage.py qcluster`: django-q2's task cluster, run so that a supervisor (systemd) can rely
on its exit: status 1, with one line saying why, when PostgreSQL or the broker stays down, when
a stop outlasts TASK_STOP_SECONDS, or when the cluster's sentinel dies. The start-up checks run
before, in infra.startup.run_with_clear_service_errors."""

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import redis
from django.conf import settings
from django.db import DatabaseError, connection, connections

from infra.redis_factory import build_client
from infra.startup import ServiceUnreachable, postgres_problem, redis_problem, servers_line
from infra.writes import mode_line

logger = logging.getLogger(__name__)

PROBE_SECONDS = 1.0
KILL_WAIT_SECONDS = 5.0


# django-q2's own command leaves everything to the cluster's processes: with PostgreSQL gone the
# cluster logs a traceback from every heartbeat for ever, with its broker gone it keeps restarting
# its pusher, and its SIGTERM handler joins the cluster with no deadline. So the main process
# here runs a watchdog (PostgreSQL and the broker probed every PROBE_SECONDS; one silent for
# TASK_OUTAGE_SECONDS stops the cluster, and Restart=on-failure starts it again once the start-up
# check passes), makes SIGTERM and SIGINT only ask the main loop to stop (the cluster's orderly
# stop gets TASK_STOP_SECONDS, then what still runs is killed), and watches the sentinel.
def say(message: str) -> None:
    sys.stderr.write(f"cuebot-acct: {message}\n")
    sys.stderr.flush()


class Watchdog(threading.Thread):
    """Probes PostgreSQL and the broker; sets `lost` (and `problem`) once one of them has stayed
    unreachable for `outage_seconds`. Without a broker Redis the broker is PostgreSQL's table,
    and the probe of PostgreSQL is the broker's."""

    def __init__(self, *, outage_seconds: float, lost: threading.Event):
        super().__init__(name="taskcluster-watchdog", daemon=True)
        self.outage_seconds = outage_seconds
        self.lost = lost
        self.problem: ServiceUnreachable | None = None
        self.stopping = threading.Event()
        url = settings.TASK_BROKER_REDIS_URL
        self.broker = build_client(url=url, timeout=2.0) if url else None

    def probe(self) -> dict[str, ServiceUnreachable]:
        problems = {}
        try:
            connection.ensure_connection()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        except DatabaseError as error:
            problems["PostgreSQL"] = postgres_problem(error)
            try:
                connection.close()  # the next probe connects afresh
            except DatabaseError:
                pass
        if self.broker is not None:
            try:
                self.broker.ping()
            except (redis.ConnectionError, redis.TimeoutError) as error:
                problems["the task broker"] = redis_problem(
                    setting="TASK_BROKER_REDIS_URL", url=settings.TASK_BROKER_REDIS_URL, error=error
                )
        return problems

    def run(self) -> None:
        down_since: dict[str, float] = {}
        try:
            while not self.stopping.wait(PROBE_SECONDS):
                started = time.monotonic()
                problems = self.probe()
                for name in [n for n in down_since if n not in problems]:
                    logger.info("%s answers again", name)
                    del down_since[name]
                for name, problem in problems.items():
                    if name not in down_since:
                        down_since[name] = started
                        logger.warning("%s; the task cluster stops if this lasts %g s", problem, self.outage_seconds)
                    if time.monotonic() - down_since[name] >= self.outage_seconds:
                        self.problem = problem
                        self.lost.set()
                        return
        finally:
            connection.close()


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(root: int) -> dict[int, str]:
    """Every live process below `root`, with its start time (so that a reused pid is never taken for it)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        start = _start_time(pid)
        if start is not None:
            found[pid] = start
            todo.extend(children.get(pid, []))
    return found


def stop_cluster(cluster, *, seconds: float) -> bool:
    """Ask the cluster to stop; kill what is left of it after `seconds`. True if it stopped by itself."""
    # Taken before the sentinel goes: a worker it left behind would be the init process's child then.
    processes = descendants(os.getpid())
    logger.info("stopping the task cluster (at most %g s)", seconds)
    cluster.stop_event.set()
    cluster.sentinel.join(seconds)
    stopped = not cluster.sentinel.is_alive()
    left = [pid for pid, start in processes.items() if _start_time(pid) == start]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    cluster.sentinel.join(KILL_WAIT_SECONDS)
    if not stopped:
        say(f"the task cluster did not stop within {seconds:g} s; its {len(left)} remaining processes were killed")
    elif left:
        logger.warning("killed %d task cluster processes left behind by its sentinel", len(left))
    return stopped


def run_task_cluster(arguments: list[str]) -> int:
    """The qcluster command (django-q2's options), supervised as the module says; returns the exit status."""
    parser = argparse.ArgumentParser(prog="manage.py qcluster", description="Starts the task cluster (django-q2).")
    parser.add_argument("--run-once", action="store_true", help="start, then stop at once")
    parser.add_argument("-n", "--name", dest="cluster_name", help="cluster name instead of Q_CLUSTER's")
    options = parser.parse_args(arguments)
    if options.cluster_name:
        os.environ["Q_CLUSTER_NAME"] = options.cluster_name

    from django_q.cluster import Cluster  # needs the apps loaded, which the caller has done

    # The start-up check's connection must not be shared with the sentinel forked below.
    connections.close_all()
    stop = threading.Event()
    received: list[int] = []
    cluster = Cluster()

    def on_signal(signum: int, frame) -> None:
        # In place of django-q2's handler, which joins the cluster inside the handler, with no deadline.
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster.start()
    except RuntimeError as error:
        say(f"the task cluster did not start ({error})")
        return 1
    logger.info("task cluster started; %s; %s", mode_line(), servers_line())
    if options.run_once:
        return 0 if stop_cluster(cluster, seconds=settings.TASK_STOP_SECONDS) else 1

    return supervise(cluster, stop=stop, received=received)


def supervise(cluster, *, stop: threading.Event, received: list[int]) -> int:
    """Runs the watchdog beside the started cluster until a signal, an outage or the sentinel's
    death ends it; stops the cluster and returns the exit status."""
    watchdog = Watchdog(outage_seconds=settings.TASK_OUTAGE_SECONDS, lost=stop)
    watchdog.start()
    while not stop.wait(PROBE_SECONDS):
        if not cluster.sentinel.is_alive():
            watchdog.stopping.set()
            say(f"the task cluster's sentinel exited (status {cluster.sentinel.exitcode}); the task cluster stopped")
            stop_cluster(cluster, seconds=0)
            return 1
    watchdog.stopping.set()
    status = 0
    if watchdog.problem is not None:
        say(f"{watchdog.problem}; the task cluster stopped after {settings.TASK_OUTAGE_SECONDS:g} s without it")
        status = 1
    elif received:
        logger.info("%s received", signal.Signals(received[0]).name)
    return status if stop_cluster(cluster, seconds=settings.TASK_STOP_SECONDS) else 1
