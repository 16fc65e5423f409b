#!/usr/bin/env python
"""The drift selector of Cuebot's tables against the bare sums it compares with, on the demo farm.

Baseline: the five bare aggregates of SUM(proc) (per show and host allocation, per folder, per
job, per layer, per department and show; local procs where the counting rules put them),
fetched, nothing compared. accounting.reconcile.tables_against_procs.cuebot_table_drift reads the same
sums and the five tables and returns the rows that differ. Prints the median of each and the
ratio, in the era ACCOUNTING_SCHEDULER names (maestro: every show). Run after
`manage.py migrate` (it completes the demo farm to the size asked for).
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

from accounting.reconcile.tables_against_procs import cuebot_table_drift  # noqa: E402

BARE_SUMS = (
    """SELECT p.pk_show, h.pk_alloc, SUM(p.int_cores_reserved), SUM(p.int_gpus_reserved)
         FROM proc p JOIN host h ON h.pk_host = p.pk_host WHERE NOT p.b_local GROUP BY p.pk_show, h.pk_alloc""",
    """SELECT j.pk_folder, SUM(p.int_cores_reserved), SUM(p.int_gpus_reserved)
         FROM proc p JOIN job j ON j.pk_job = p.pk_job WHERE NOT p.b_local GROUP BY j.pk_folder""",
    """SELECT p.pk_job, SUM(p.int_cores_reserved) FILTER (WHERE NOT p.b_local), SUM(p.int_gpus_reserved) FILTER (WHERE NOT p.b_local),
              SUM(p.int_cores_reserved) FILTER (WHERE p.b_local), SUM(p.int_gpus_reserved) FILTER (WHERE p.b_local)
         FROM proc p GROUP BY p.pk_job""",
    """SELECT p.pk_layer, SUM(p.int_cores_reserved), SUM(p.int_gpus_reserved) FROM proc p GROUP BY p.pk_layer""",
    """SELECT j.pk_dept, j.pk_show, SUM(p.int_cores_reserved), SUM(p.int_gpus_reserved)
         FROM proc p JOIN job j ON j.pk_job = p.pk_job WHERE NOT p.b_local GROUP BY j.pk_dept, j.pk_show""",
)


def main() -> None:
    args = demo_farm_from_arguments(description=__doc__)

    def bare() -> None:
        with connection.cursor() as cursor:
            for sql in BARE_SUMS:
                cursor.execute(sql)
                cursor.fetchall()

    bare_s = timed(bare, rounds=args.rounds)
    ours = timed(cuebot_table_drift, rounds=args.rounds)
    print(
        f"{args.procs} procs, median of {args.rounds}: five bare sums {bare_s * 1000:7.2f} ms, "
        f"cuebot_table_drift {ours * 1000:7.2f} ms = {ours / bare_s:.2f}x ({len(cuebot_table_drift().rows)} rows drifted)"
    )


if __name__ == "__main__":
    main()
