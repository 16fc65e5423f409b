#!/usr/bin/env python
"""Server time of every admin page, the operator's pages and /metrics, on the demo farm of this database.

    ACCOUNTING_SCHEDULER=maestro DJANGO_SETTINGS_MODULE=settings .venv/bin/python bench/admin_pages.py \
        [--rounds 5] [--drifted 100] [--only SUBSTRING]

Why: an operator looks for a proc, a job or a show's drift on a farm of a studio's size, and a
page that scans the farm to draw its first hundred rows makes them wait on every click. The
goal (issue 49) is each page within 300 ms of server time at ten times Maestro's proof farm
(`seed_demo_farm --shows 200 --hosts 15530 --procs 200000 --cores-per-host 37`).

Build the farm first (`manage.py seed_demo_farm ...`, on a database of its own); the bench reads
whatever farm is there, prints its size and vacuums and analyzes its tables (as autovacuum
would at a site; this machine's PostgreSQL runs without it). Server time is the in-process time of Django's test
client's GET: every middleware, the view, its queries and its template, no network. Each page
is requested once to warm it, then `--rounds` times, every page once a round in turn (so a
stall of the shared machine spreads over the pages), and printed as the median (lowest-highest),
with its median ratio to a bare admin list timed in the same round (the facilities: a few rows)
and the queries of its last request. Pages: every registered model admin's list and the change
form of its first row by key (none where the table is empty), the proc and frame lists searched
by a host's or a job's name, filtered by a show, ten pages in, the farm overview, the drift index,
the drift page of a show and /metrics; twice: with nothing drifted (the periodic check run first,
so its status and gauges are there), then with `--drifted` rows of each of Cuebot's five tables a
core low and seen by the periodic check (its records of them written), the drift page being the
show with most drifted rows. The farm is repaired at the end.
"""

import argparse
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

import django  # noqa: E402

django.setup()

from django.contrib import admin  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402
from maestro_farm import drift_targets, make_drift  # noqa: E402

from accounting.reconcile.drift_check import run_check  # noqa: E402
from accounting.reconcile.recompute import recompute_pg_accounting  # noqa: E402
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES  # noqa: E402
from shows.models import Host, Job, Show  # noqa: E402

GOAL_MS = 300.0
# The baseline every page is also read against, timed in every round: the admin's list of a table
# of a few rows (the facilities), which the farm's size leaves alone. The goal is the absolute
# time; the ratio says how much of a figure is the page and how much the machine's load.
BARE = "a bare admin list (the facilities)"


def farm_size() -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM show), (SELECT count(*) FROM host), (SELECT count(*) FROM proc), "
            "(SELECT count(*) FROM job), (SELECT count(*) FROM layer), (SELECT count(*) FROM frame)"
        )
        shows, hosts, procs, jobs, layers, frames = cursor.fetchone()
    return f"{shows} shows, {hosts} hosts, {procs} procs, {jobs} jobs, {layers} layers, {frames} frames"


def vacuum_analyze() -> None:
    """What autovacuum does at a site, which this machine's PostgreSQL leaves off: the planner's
    statistics (a table never analyzed is planned from a guess of its rows, and the proc list's
    estimated count reads none) and the visibility map, after a farm built by COPY."""
    with connection.cursor() as cursor:
        cursor.execute(
            "VACUUM ANALYZE show, alloc, subscription, folder, folder_resource, dept, point, job, job_resource, "
            "layer, layer_resource, host, host_stat, host_local, frame, proc"
        )


def admin_urls() -> list[tuple[str, str]]:
    """(label, URL) of every registered model's list and of its first row's change form."""
    urls = []
    for model, model_admin in sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label):
        opts = model._meta
        name = f"{opts.app_label}_{opts.model_name}"
        urls.append((f"{opts.label} list", reverse(f"admin:{name}_changelist")))
        first = model_admin.get_queryset(None).order_by("pk").values_list("pk", flat=True).first()
        if first is not None:
            urls.append((f"{opts.label} change form", reverse(f"admin:{name}_change", args=[first])))
    return urls


def bare_list() -> tuple[str, str]:
    return BARE, reverse("admin:shows_facility_changelist")


def looking_for() -> list[tuple[str, str]]:
    """The proc and frame lists as a person looking for something opens them: searched by a host's
    or a job's name, filtered by a show, ten pages in."""
    host = Host.objects.order_by("str_name").values_list("str_name", flat=True)[0]
    job = Job.objects.order_by("str_name").values_list("str_name", flat=True)[0]
    show = Show.objects.order_by("str_name").values_list("pk", flat=True)[0]
    procs, frames = reverse("admin:accounting_proc_changelist"), reverse("admin:shows_frame_changelist")
    return [
        ("proc list, searched by a host's name", f"{procs}?{urlencode({'q': host})}"),
        ("proc list, searched by a job's name", f"{procs}?{urlencode({'q': job})}"),
        ("proc list, filtered by a show", f"{procs}?show__id__exact={show}"),
        ("proc list, page 10", f"{procs}?p=10"),
        ("frame list, searched by a job's name", f"{frames}?{urlencode({'q': job})}"),
        ("frame list, filtered by a show", f"{frames}?job__show__id__exact={show}"),
    ]


def operator_urls(*, drift_show: str) -> list[tuple[str, str]]:
    return [
        ("farm overview", reverse("acct-overview")),
        ("drift index", reverse("acct-drift")),
        ("drift page of a show", reverse("acct-drift-show", args=[drift_show])),
        ("/metrics", reverse("metrics")),
    ]


def most_drifted_show() -> str:
    """The show whose rows the last check found drifted most, or the first show by name."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT show_id FROM acct_drift_record GROUP BY show_id ORDER BY count(*) DESC, show_id LIMIT 1")
        row = cursor.fetchone()
    return row[0] if row else Show.objects.order_by("str_name").values_list("pk", flat=True)[0]


def timed_pages(*, client: Client, pages: list[tuple[str, str]], rounds: int) -> dict[str, tuple[list[float], int]]:
    """Per label: the server times of `rounds` GETs (after one warm-up), pages in turn; the queries of the last."""
    samples: dict[str, list[float]] = {label: [] for label, _ in pages}
    queries: dict[str, int] = {}
    for round_ in range(rounds + 1):
        for label, url in pages:
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get(url)
                took = time.perf_counter() - started
            if response.status_code != 200:
                raise SystemExit(f"{label}: {url} answered {response.status_code}")
            if round_:
                samples[label].append(took)
            queries[label] = len(captured)
    return {label: (samples[label], queries[label]) for label, _ in pages}


def report(*, title: str, timings: dict[str, tuple[list[float], int]], rounds: int) -> None:
    """Each page's median and spread, and its median ratio to the bare list's time in the same round."""
    bare = timings[BARE][0]
    print(
        f"\n{title}: server time, median of {rounds} (lowest-highest), x the bare list in the same round, "
        "queries of the last request"
    )
    for label, (values, queries) in timings.items():
        median = statistics.median(values) * 1000
        ratio = statistics.median(v / b for v, b in zip(values, bare, strict=True))
        flag = "  OVER" if median > GOAL_MS else ""
        print(
            f"  {label:48s} {median:8.1f} ms ({min(values) * 1000:6.1f}-{max(values) * 1000:6.1f}) "
            f"{ratio:6.1f}x {queries:4d} queries{flag}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--drifted", type=int, default=100, help="rows of each of Cuebot's five tables drifted")
    parser.add_argument("--only", default="", help="time only the pages whose label contains this")
    options = parser.parse_args()
    print(f"farm: {farm_size()}")
    vacuum_analyze()
    user = get_user_model().objects.create_superuser(username=f"bench-admin-pages-{secrets.token_hex(4)}")
    client = Client()
    client.force_login(user)
    show_ids = list(Show.objects.values_list("pk", flat=True))
    try:
        run_check(CUEBOT_TABLES)
        pages = admin_urls() + looking_for() + operator_urls(drift_show=most_drifted_show())
        pages = [bare_list(), *((label, url) for label, url in pages if options.only in label)]
        report(
            title="nothing drifted",
            timings=timed_pages(client=client, pages=pages, rounds=options.rounds),
            rounds=options.rounds,
        )
        targets = drift_targets(per_table=options.drifted, show_ids=show_ids)
        make_drift(targets=targets)
        run_check(CUEBOT_TABLES)
        drifted = sum(len(target.pks) for target in targets)
        operator = operator_urls(drift_show=most_drifted_show())
        pages = [bare_list(), *((label, url) for label, url in operator if options.only in label)]
        report(
            title=f"{drifted} rows drifted, seen by the periodic check",
            timings=timed_pages(client=client, pages=pages, rounds=options.rounds),
            rounds=options.rounds,
        )
    finally:
        recompute_pg_accounting(show_ids=show_ids)
        run_check(CUEBOT_TABLES)
        user.delete()


if __name__ == "__main__":
    main()
