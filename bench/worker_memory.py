#!/usr/bin/env python
"""A gunicorn worker's resident memory across 200,000 releases of procs of 10,000 distinct jobs.

    ACCOUNTING_SCHEDULER=maestro DJANGO_SETTINGS_MODULE=settings DATABASE_URL=postgres://…/a_database_of_its_own \\
        .venv/bin/python bench/worker_memory.py [--procs 200000] [--batch 100] [--every 20000]

Why: production runs its workers for months (no --max-requests, docs/production.md) while the farm
runs tens of thousands of jobs a day, each new to the worker. Whatever a worker keeps between
requests must be bounded, or its memory grows with the farm's history. The goal (issue 49): the
worker's RSS after 200,000 releases within 10 MB of its RSS after 20,000.

The farm is a demo farm of --procs procs (20 shows, 2,000 hosts; seed_demo_farm gives it a job per
20 procs: 10,020 jobs of two layers for 200,000), built or completed first on DATABASE_URL's
database (use one of its own: the bench releases every proc of it, and the next run completes it
again). The server is the command scripts/server.py deploys (bench/release.py's gunicorn_server),
with one worker instead of two so that one worker serves every release. One client
releases the procs job after job, as a farm's jobs finish one after another, in batches of --batch
(POST /api/v1/procs/unbook; --batch 1: POST /api/v1/procs/{id}/unbook; the simulator's client,
simulator.processes.WebServer.release, a connection a request), and reads the worker's
VmRSS from /proc after the first batch and every --every releases. Every answer must be a
release. Prints the RSS at each point and the growth from 20,000 releases to the last.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from release import gunicorn_server  # noqa: E402  (sets Django up)

from accounting.operators.auth import grant_permissions, issue_token  # noqa: E402
from infra.permissions import RELEASE_PROCS  # noqa: E402
from simulator.farm_builder import DemoFarmSize, build_demo_farm  # noqa: E402
from simulator.processes import WebServer  # noqa: E402

GOAL_MB = 10.0
MARK = 20_000  # the releases after which the growth is counted


def worker_pid(*, port: int) -> int:
    """The one worker of the gunicorn master bound to `port`."""
    bind = f"127.0.0.1:{port}".encode()
    processes = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            processes[int(entry.name)] = (ppid, cmdline)
    masters = {pid for pid, (_, cmdline) in processes.items() if b"gunicorn" in cmdline and bind in cmdline}
    workers = [pid for pid, (ppid, _) in processes.items() if ppid in masters]
    if len(workers) != 1:
        raise SystemExit(f"bench: expected one gunicorn worker on {port}, found {workers}")
    return workers[0]


def rss_mb(*, pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"bench: no VmRSS for {pid}")


def procs_job_after_job() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pk_proc FROM proc ORDER BY pk_job, pk_proc")
        return [pk for (pk,) in cursor.fetchall()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=200_000, help="releases, one per proc of the farm")
    parser.add_argument("--batch", type=int, default=100, help="procs per request (1: single releases)")
    parser.add_argument("--every", type=int, default=MARK, help="releases between two readings of the RSS")
    options = parser.parse_args()
    started = time.perf_counter()
    summary = build_demo_farm(size=DemoFarmSize(shows=20, hosts=2000, procs=options.procs))
    procs = procs_job_after_job()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(DISTINCT pk_job) FROM proc")
        (jobs,) = cursor.fetchone()
        cursor.execute("VACUUM ANALYZE proc, frame, host")
    print(
        f"farm: {summary.procs} procs of {jobs} jobs ({summary.procs_added} added, "
        f"in {time.perf_counter() - started:.1f} s); releasing {len(procs)} job after job, {options.batch} a request"
    )
    user = get_user_model().objects.create_user(username=f"bench-worker-memory-{os.getpid()}")
    try:
        grant_permissions(user=user, permissions=[RELEASE_PROCS])
        token = issue_token(user=user, name="bench/worker_memory.py")
        with gunicorn_server(extra=("--workers", "1")) as port:
            pid = worker_pid(port=port)
            server = WebServer(port=port, metrics_dir="", token=token)  # the simulator's client of the API
            readings: list[tuple[int, float]] = [(0, rss_mb(pid=pid))]
            released, begun = 0, time.perf_counter()
            for i in range(0, len(procs), options.batch):
                chunk = procs[i : i + options.batch]
                if not all(server.release(chunk)):
                    raise SystemExit("bench: a proc of the farm was not released")
                released += len(chunk)
                if released == len(chunk) or released % options.every == 0 or released == len(procs):
                    readings.append((released, rss_mb(pid=pid)))
            took = time.perf_counter() - begun
    finally:
        user.delete()
    print(f"{released} releases in {took:.0f} s ({released / took:.0f}/s); the worker's RSS:")
    for count, mb in readings:
        print(f"  after {count:>7,} releases  {mb:7.1f} MB")
    at_mark = dict(readings).get(MARK)
    if at_mark is not None:
        growth = readings[-1][1] - at_mark
        later = [(count, mb) for count, mb in readings if count >= MARK]
        slope = statistics.linear_regression([c for c, _ in later], [mb for _, mb in later]).slope
        print(
            f"growth from {MARK:,} to {readings[-1][0]:,} releases: {growth:+.1f} MB "
            f"(goal: at most {GOAL_MB:.0f} MB{', met' if growth <= GOAL_MB else ', NOT met'}); "
            f"the line through the readings from {MARK:,} on: {slope * 20_000:+.2f} MB per 20,000 releases, "
            f"{slope * len(procs) / jobs * 1024:+.2f} KB per job whose procs were released"
        )


if __name__ == "__main__":
    main()
