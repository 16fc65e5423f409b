#!/usr/bin/env python
"""recalculate_subs against raw baselines, in the same process, on the demo farm.

Baselines: the bare aggregate (SUM(proc) of the non-local procs per show and allocation of the
shows Cuebot owns in the era ACCOUNTING_SCHEDULER names, every show in the Maestro era, fetched,
nothing written), accounting.reconcile.recompute_sql.SUBSCRIPTIONS for those shows, i.e. the
plain set-based rewrite of every subscription row from SUM(proc), with no lock, no drift
filter and no FOR SHARE on the shows, and OpenCue's own recalculate_subs() (V45's, which
skips flagged shows; the test suite's rendering of it, in a pg_temp function). Prints the
median of each and the ratios. Run after `manage.py migrate` (it completes the demo farm to the size asked for).
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

import django  # noqa: E402

django.setup()

from demo_sized import demo_farm_from_arguments, timed  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import F  # noqa: E402

from accounting.models import Subscription  # noqa: E402
from accounting.reconcile.recalculate_subs import recalculate_subs  # noqa: E402
from accounting.reconcile.recompute_sql import SUBSCRIPTIONS  # noqa: E402
from infra.era import era  # noqa: E402
from shows.models import Show  # noqa: E402
from tests.accounting.reconcile.test_recalculate_subs import CUEBOT_RECALCULATE_SUBS  # noqa: E402

BARE_AGGREGATE = """
SELECT p.pk_show, h.pk_alloc, SUM(p.int_cores_reserved), SUM(p.int_gpus_reserved)
  FROM proc p JOIN host h ON h.pk_host = p.pk_host
 WHERE NOT p.b_local AND p.pk_show = ANY(%(shows)s)
 GROUP BY p.pk_show, h.pk_alloc
"""


def main() -> None:
    args = demo_farm_from_arguments(description=__doc__)
    # The shows recalculate_subs covers in the era the environment names: every show in the
    # Maestro era (ACCOUNTING_SCHEDULER=maestro), the Cuebot-managed ones otherwise.
    shows = Show.objects.all() if era().cuebot_owns_every_show else Show.objects.filter(b_scheduler_managed=False)
    cuebot_shows = list(shows.values_list("pk", flat=True))
    rows = Subscription.objects.filter(show_id__in=cuebot_shows).count()

    def drift_everything() -> None:
        # Down, and never below 0: OpenCue's function zeroes the rows first, which its burst
        # check refuses for a row below 0 whose burst is negative.
        Subscription.objects.filter(show_id__in=cuebot_shows, int_cores__gte=100).update(int_cores=F("int_cores") - 100)

    def baseline() -> None:
        with connection.cursor() as cursor:
            cursor.execute(SUBSCRIPTIONS, {"shows": cuebot_shows, "only": None})

    def bare_aggregate() -> None:
        with connection.cursor() as cursor:
            cursor.execute(BARE_AGGREGATE, {"shows": cuebot_shows})
            cursor.fetchall()

    def opencues() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_temp.cuebot_recalculate_subs()")

    with connection.cursor() as cursor:
        cursor.execute(CUEBOT_RECALCULATE_SUBS)
    print(
        f"farm: {Show.objects.count()} shows ({len(cuebot_shows)} whose rows Cuebot owns), {rows} such subscription rows, "
        f"{args.procs} procs; median of {args.rounds}; OpenCue's function covers the unflagged shows only"
    )
    for label, before in (("rows 1 core low", drift_everything), ("nothing drifted", lambda: None)):
        bare = timed(bare_aggregate, rounds=args.rounds, before=before)
        raw = timed(baseline, rounds=args.rounds, before=before)
        theirs = timed(opencues, rounds=args.rounds, before=before)
        ours = timed(lambda: recalculate_subs(), rounds=args.rounds, before=before)
        print(
            f"{label:>18}: bare aggregate {bare * 1000:7.2f} ms, raw rewrite {raw * 1000:7.2f} ms, OpenCue's "
            f"{theirs * 1000:7.2f} ms, recalculate_subs {ours * 1000:7.2f} ms = {ours / bare:.2f}x the aggregate, "
            f"{ours / raw:.2f}x the rewrite, {ours / theirs:.2f}x OpenCue's"
        )


if __name__ == "__main__":
    main()
