#!/usr/bin/env python
"""What a scrape of /metrics costs the server once it carries the subscription gauges, on the farm
in DATABASE_URL, and how many series they add.

    ACCOUNTING_SCHEDULER=maestro DJANGO_SETTINGS_MODULE=settings .venv/bin/python bench/metrics_scrape.py [--rounds 5]

Why: the gauges are read from Cuebot's tables at each scrape (accounting.usage.gauges says why),
so a scrape costs that read on top of the rest of /metrics; at a site's size (issue 46: 200 shows,
400 subscriptions, 15,530 hosts, 200,000 procs, `manage.py seed_demo_farm --shows 200 --hosts 15530
--procs 200000 --cores-per-host 37`) it must stay within 50 ms of server time. Timed in this
process, warm, with PROMETHEUS_MULTIPROC_DIR set as deployed (this process's files only), the paths
taking turns within a round, a round's time its samples' median, printed as the median over the
rounds with the spread (lowest-highest round):
- GET /metrics through Django's handler (the test client): a scrape's server time;
- metrics.render() without the gauges: the rest of /metrics, what a scrape cost before them;
- the snapshot's statement alone, fetched (its floor: no Python beyond the driver);
- accounting.usage.snapshot.read_usage(), and the exposition of the gauges from it.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="bench-metrics-"))

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from accounting.usage.gauges import NAMES, scraped  # noqa: E402
from accounting.usage.snapshot import SNAPSHOT, read_usage  # noqa: E402
from infra.metrics import render  # noqa: E402


def bare_statement() -> None:
    with connection.cursor() as cursor:
        cursor.execute(SNAPSHOT)
        cursor.fetchall()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=5, help="per path and round")
    args = parser.parse_args()
    client = Client()
    paths: dict[str, Callable[[], object]] = {
        "GET /metrics (a scrape)": lambda: client.get("/metrics"),
        "render() without the gauges": render,
        "the snapshot's statement, bare": bare_statement,
        "read_usage()": read_usage,
        "the gauges' exposition (read included)": scraped,
    }
    for path in paths.values():  # warm: connection, prepared plans, imports
        path()
    rounds: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.rounds):
        samples: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.samples):
            for name, path in paths.items():
                started = time.perf_counter()
                path()
                samples[name].append(time.perf_counter() - started)
        for name, taken in samples.items():
            rounds[name].append(statistics.median(taken))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM show), (SELECT count(*) FROM subscription), (SELECT count(*) FROM alloc), "
            "(SELECT count(*) FROM host), (SELECT count(*) FROM proc)"
        )
        shows, subscriptions, allocs, hosts, procs = cursor.fetchone()
    print(f"farm: {shows} shows, {subscriptions} subscriptions, {allocs} allocations, {hosts} hosts, {procs} procs")
    print(f"{args.rounds} rounds of {args.samples} samples per path, in turns; median of the rounds (lowest-highest)")
    for name, taken in rounds.items():
        print(
            f"  {name:42s} {statistics.median(taken) * 1000:7.1f} ms ({min(taken) * 1000:.1f}-{max(taken) * 1000:.1f})"
        )
    body = client.get("/metrics").content.decode()
    print("series of the gauges, per measure:")
    for family in text_string_to_metric_families(body):
        if family.name in NAMES:
            print(f"  {family.name:45s} {len(family.samples)}")


if __name__ == "__main__":
    main()
