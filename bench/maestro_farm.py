#!/usr/bin/env python
"""The drift check, the repair and the release path on a farm the size of OpenCue Maestro's proof, or a multiple.

    ACCOUNTING_SCHEDULER=maestro DJANGO_SETTINGS_MODULE=settings .venv/bin/python bench/maestro_farm.py \
        [--scale 1] [--scale 10] [--rounds 7] [--releases 200] [--drifted 20] [--skip drift] [--skip release]

Why: in the Maestro era Cuebot writes the five tables of every show and Maestro plans each tick
from them, so at a site's size the check that they equal SUM(proc), the repair that makes them so,
and a release must each cost about what the bare SQL doing the same costs. The farm is
simulator.farm_builder.MAESTRO_PROOF (1,553 hosts, 57,461 cores, 20,000 procs, 20 shows) times
--scale (10: a studio's farm, 200 shows, 15,530 hosts, 574,610 cores, 200,000 procs), built or
completed first, its build timed. One --scale runs on DATABASE_URL's database; given more than
once, each size runs in a process of its own on a database of its own (DATABASE_URL's name with
`_x<scale>`, created and migrated if missing), and every ratio is printed again at the end with
each size side by side. Each figure is a ratio to a baseline run in the same process:

- the drift check (accounting.reconcile.tables_against_procs.cuebot_table_drift), the periodic check the
  task cluster runs (accounting.reconcile.drift_check.run_check of Cuebot's tables: the same read, then
  its gauges, its status in the cache and its record of when each drifted row was first seen),
  each with nothing drifted and with --drifted rows of each table a core low (the periodic check
  then records each as first seen, the most it writes; and again with the rows seen drifted by
  the check before, which writes nothing), and the repair with nothing drifted
  (recompute_pg_accounting of every show): bench/cuebot_drift.py's BARE_SUMS, the five
  aggregates of SUM(proc) by Cuebot's counting rules, fetched, nothing compared. A check or a
  repair must at least read those sums and compare them, so each is held to the same baseline;
- the repair with --drifted rows of each table a core low: the bare sums, then a bare UPDATE of
  those rows to the sums read (one statement per table, one transaction): no lock, no cap moved,
  no names, rows the bench already knows;
- releases: bench/release.py's Cuebot floors (single: DELETE ... RETURNING, host UPDATE, the five
  decrements one by one, COMMIT; batched as batchDeleteVirtualProcs) against unbook_proc and
  unbook_procs of 100, on procs of the farm taken at random, pinned and interleaved in slices as
  bench/release.py does; the floor again on a second connection (A/A) is the method's own error.
  A batch of random procs of this farm spans about 100 jobs and layers, and the batch floor as
  bench/release.py writes it waits on one round trip per key; the same floor with its writes
  pipelined (as JDBC's batchUpdate sends them) is printed beside it, and the batches against it.
  Before each round the farm is refilled to its size by `manage.py seed_demo_farm` (its size given)
  in a process of its own: on the service's connection the builder's DROP TABLE would make psycopg
  drop the release path's prepared statements.

Rounds are interleaved (the drift phase: each path once per pass, three passes a round, the order
reversed every other pass; a round's time is its passes' median), a ratio is taken within a round
and printed as the median with the spread (lowest-highest round). The repair is timed as
recompute_pg_accounting of every show of the farm, which is what acct_reseed runs in this era.
"""

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

import psycopg  # noqa: E402
from cuebot_drift import BARE_SUMS  # noqa: E402  (sets Django up)
from demo_sized import build_timed  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from release import (  # noqa: E402
    A_A_LABEL,
    BATCH_FACTOR,
    FLOOR_DELETE_MANY,
    FLOOR_HOSTS,
    Floor,
    _per_host,
    count_line,
    counts_per_call,
    floor_decrements,
    interleaved_rates,
    pinned,
    print_rates,
    ratio_text,
    server_pids,
    vacuum_churned,
)

from accounting.reconcile.drift_check import run_check  # noqa: E402
from accounting.reconcile.recompute import recompute_pg_accounting  # noqa: E402
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES, cuebot_table_drift  # noqa: E402
from accounting.release.unbook import unbook_proc, unbook_procs  # noqa: E402
from infra.era import era  # noqa: E402
from simulator.farm_builder import MAESTRO_PROOF, DemoFarmSize, demo_id  # noqa: E402

# The periodic check warns of the rows the bench drifts on purpose, at every pass.
logging.getLogger("accounting.reconcile.drift_check").setLevel(logging.ERROR)


def run_table_drift_check() -> None:
    """The periodic check of Cuebot's tables, as the task cluster runs it."""
    run_check(CUEBOT_TABLES)


# The rows the bench drifts, per table in the lock order: its key, the columns its sum is keyed by,
# and which of BARE_SUMS holds that sum (whose rows are the key, then cores and GPUs).
DRIFTED = (
    ("subscription", "pk_subscription", ("pk_show", "pk_alloc"), 0),
    ("layer_resource", "pk_layer_resource", ("pk_layer",), 3),
    ("job_resource", "pk_job_resource", ("pk_job",), 2),
    ("folder_resource", "pk_folder_resource", ("pk_folder",), 1),
    ("point", "pk_point", ("pk_dept", "pk_show"), 4),
)
# Passes per round of the drift phase: a round's time for a path is the median of its passes, so
# one stall of the shared machine does not make a round's ratio.
PASSES = 3


class Target(NamedTuple):
    """The rows of one table the bench drifts, and the keys their sums are found by."""

    table: str
    pk: str  # the table's key column
    pks: list[str]
    keys: list[tuple]  # each row's sum key, in BARE_SUMS' order of columns


BARE_SET = """
UPDATE {table} t SET int_cores = v.cores, int_gpus = v.gpus
  FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS v(pk, cores, gpus) WHERE t.{pk} = v.pk
"""


def seconds(*, fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def spread(*, samples: dict[str, list[float]], path: str, base: str) -> str:
    """bench/release.py's median (spread) of per-round ratios, for durations (lower is better)."""
    return ratio_text({name: [1 / s for s in values] for name, values in samples.items()}, base, path)


def ms(*, values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.1f} ms ({min(values) * 1000:.1f}–{max(values) * 1000:.1f})"


def bare_sums(*, cursor) -> list[list[tuple]]:
    sums = []
    for sql in BARE_SUMS:
        cursor.execute(sql)
        sums.append(cursor.fetchall())
    return sums


def drift_targets(*, per_table: int, show_ids: list[str]) -> list[Target]:
    """`per_table` rows of each table of these shows, spread over them: (table, key, keys, their sum keys)."""
    targets = []
    with connection.cursor() as cursor:
        for table, pk, key_columns, _ in DRIFTED:
            join = "" if "pk_show" in key_columns else _show_join(table=table)
            cursor.execute(
                f"SELECT t.{pk}, {', '.join(f't.{c}' for c in key_columns)} FROM {table} t {join} "
                f"WHERE {'t' if not join else 's'}.pk_show = ANY(%s) ORDER BY md5(t.{pk}) LIMIT %s",
                [show_ids, per_table],
            )
            rows = cursor.fetchall()
            targets.append(Target(table, pk, [row[0] for row in rows], [tuple(row[1:]) for row in rows]))
    return targets


def _show_join(*, table: str) -> str:
    """How a table without pk_show reaches its show."""
    parent = "folder" if table == "folder_resource" else "job"
    return f"JOIN {parent} s ON s.pk_{parent} = t.pk_{parent}"


def make_drift(*, targets: list[Target]) -> None:
    """Each target row a core low, as a lost update would leave it (a decrement is never refused)."""
    with transaction.atomic(), connection.cursor() as cursor:
        for table, pk, pks, _ in targets:
            cursor.execute(f"UPDATE {table} SET int_cores = int_cores - 100 WHERE {pk} = ANY(%s)", [pks])


def bare_fix(*, targets: list[Target]) -> None:
    """The baseline of a repair that writes: the bare sums, then the drifted rows set to them."""
    with transaction.atomic(), connection.cursor() as cursor:
        sums = bare_sums(cursor=cursor)
        for (table, pk, pks, keys), (_, _, key_columns, which) in zip(targets, DRIFTED, strict=True):
            width = len(key_columns)
            by_key = {row[:width]: row[width : width + 2] for row in sums[which]}
            values = [by_key.get(key, (0, 0)) for key in keys]
            cursor.execute(
                BARE_SET.format(table=table, pk=pk),
                [pks, [int(v[0] or 0) for v in values], [int(v[1] or 0) for v in values]],
            )


def vacuum_accounting(*, full: bool = False) -> None:
    """VACUUM the five tables and the periodic check's record of drift, as autovacuum would at a
    site. The bare sums never read them, so their dead rows weigh on the check and the repair
    alone: on a PostgreSQL with autovacuum off (this machine's), repeated repairs that rewrote
    every row left layer_resource at 943 pages for 2,160 rows (about 30 when built), which VACUUM
    frees but does not give back, so the check's scan still read them, and the bench's rows
    recorded first seen and deleted healed at every pass left acct_drift_record at 24 MB of dead
    rows for none live; `full` (once, before the first round) rewrites the files."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"VACUUM {'FULL ' if full else ''}subscription, layer_resource, job_resource, folder_resource, point, "
            "acct_drift_record"
        )


def scaled(*, scale: int) -> DemoFarmSize:
    """Maestro's proof farm `scale` times over: shows, hosts and procs; hosts of the same 37 cores."""
    proof = MAESTRO_PROOF
    return DemoFarmSize(
        shows=proof.shows * scale,
        hosts=proof.hosts * scale,
        procs=proof.procs * scale,
        cores_per_host=proof.cores_per_host,
    )


def farm_show_ids(*, size: DemoFarmSize) -> list[str]:
    return [demo_id(f"show:{i}") for i in range(size.shows)]


# Each figure a size prints, as (label, ratio text), gathered for the side-by-side table.
Figures = list[tuple[str, str]]


def drift_phase(*, size: DemoFarmSize, rounds: int, drifted: int) -> Figures:
    show_ids = farm_show_ids(size=size)
    targets = drift_targets(per_table=drifted, show_ids=show_ids)

    def bare() -> None:
        with connection.cursor() as cursor:
            bare_sums(cursor=cursor)

    def repair() -> None:
        recompute_pg_accounting(show_ids=show_ids)

    def healed() -> None:
        """After a path that leaves the rows drifted: repaired, and the periodic check's records of
        them gone (as the next check after a repair leaves them), so the next path starts clean."""
        repair()
        run_table_drift_check()

    clean: list[tuple[str, Callable[[], object]]] = [
        ("bare", bare),
        ("check", cuebot_table_drift),
        ("periodic", run_table_drift_check),
        ("repair", repair),
    ]
    # Each after make_drift, with what runs untimed before and after it.
    Step = Callable[[], object] | None
    written: list[tuple[str, Callable[[], object], Step, Step]] = [
        ("bare_fix", lambda: bare_fix(targets=targets), None, None),
        ("repair_drifted", repair, None, None),
        ("check_drifted", cuebot_table_drift, None, healed),
        ("periodic_drifted", run_table_drift_check, None, healed),
        # The same rows seen drifted by the check before: recorded already.
        ("periodic_kept", run_table_drift_check, run_table_drift_check, healed),
    ]
    samples: dict[str, list[float]] = {name: [] for name, *_ in clean + written}
    vacuum_accounting(full=True)
    for i in range(rounds):
        vacuum_accounting()
        passes: dict[str, list[float]] = {name: [] for name in samples}
        for j in range(PASSES):
            order = 1 if (i + j) % 2 == 0 else -1
            for name, fn in clean[::order]:
                passes[name].append(seconds(fn=fn))
            for name, fn, before, after in written[::order]:
                make_drift(targets=targets)
                if before is not None:
                    before()
                passes[name].append(seconds(fn=fn))
                if after is not None:
                    after()
        for name, values in passes.items():
            samples[name].append(statistics.median(values))
        left = cuebot_table_drift(show_ids=show_ids).rows
        if left:
            raise SystemExit(f"round {i + 1}: {len(left)} row(s) still drifted after the repair, first {left[0]}")
    rows = sum(len(pks) for _, _, pks, _ in targets)
    print(
        f"Drift check and repair, {rounds} rounds of {PASSES} interleaved passes (a round's time: its passes' median), "
        f"median (lowest–highest round); "
        f"drifted: {rows} rows ({', '.join(f'{t} {len(p)}' for t, _, p, _ in targets)}), each a core low"
    )
    print(f"{'':58s} {'time':>28s}  {'x its baseline':>22s}")
    figures = []
    for label, path, base in (
        ("five bare sums (baseline)", "bare", "bare"),
        ("cuebot_table_drift, nothing drifted", "check", "bare"),
        ("cuebot_table_drift, rows drifted", "check_drifted", "bare"),
        ("run_table_drift_check (periodic), nothing drifted", "periodic", "bare"),
        ("run_table_drift_check (periodic), rows first seen", "periodic_drifted", "bare"),
        ("run_table_drift_check (periodic), rows seen before", "periodic_kept", "bare"),
        ("recompute_pg_accounting, nothing drifted", "repair", "bare"),
        ("bare sums + bare UPDATE of the drifted rows (baseline)", "bare_fix", "bare_fix"),
        ("recompute_pg_accounting, rows drifted", "repair_drifted", "bare_fix"),
        ("recompute_pg_accounting, rows drifted, x the bare sums", "repair_drifted", "bare"),
    ):
        ratio = spread(samples=samples, path=path, base=base)
        print(f"{label:58s} {ms(values=samples[path]):>28s}  {ratio:>22s}")
        figures.append((label, ratio))
    return figures


class FarmProcs:
    """The farm's procs handed to the release paths at random, the farm refilled before each round."""

    def __init__(self, *, size: DemoFarmSize) -> None:
        self.size = size
        self.pool: list[str] = []
        self.refills: list[float] = []
        self.random = random.Random(34)

    def refill(self) -> None:
        self.refills.append(
            seconds(
                fn=lambda: subprocess.run(
                    [sys.executable, str(ROOT / "manage.py"), "seed_demo_farm", *size_arguments(size=self.size)],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        )
        vacuum_churned()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pk_proc FROM proc WHERE pk_show = ANY(%s) ORDER BY pk_proc", [farm_show_ids(size=self.size)]
            )
            self.pool = [pk for (pk,) in cursor.fetchall()]
        self.random.shuffle(self.pool)

    def add_procs(self, n: int) -> list[str]:
        if n > len(self.pool):
            raise SystemExit(f"the farm has {len(self.pool)} procs left for {n} releases: ask fewer (--releases)")
        taken, self.pool = self.pool[:n], self.pool[n:]
        return taken


def pipelined_batches(*, floor: Floor) -> Callable[[list[str]], float]:
    """bench/release.py's Cuebot batch floor with its host refunds and decrements sent in one
    pipeline, as JDBC's batchUpdate sends a batch: on this farm a batch of 100 procs spans about
    100 layers and jobs, and the floor as written waits on one round trip per key (about 300)."""

    def run(proc_ids: list[str], size: int = 100) -> float:
        started = time.perf_counter()
        for i in range(0, len(proc_ids), size):
            with floor.pg.cursor() as cursor:
                cursor.execute(FLOOR_DELETE_MANY, (proc_ids[i : i + size],))
                rows = cursor.fetchall()
                with floor.pg.pipeline():
                    cursor.execute(FLOOR_HOSTS, _per_host(rows))
                    floor_decrements(cursor, rows)
            floor.pg.commit()
        return len(proc_ids) / (time.perf_counter() - started)

    return run


def size_arguments(*, size: DemoFarmSize) -> list[str]:
    """seed_demo_farm's options for this size."""
    return [
        *("--shows", str(size.shows), "--hosts", str(size.hosts), "--procs", str(size.procs)),
        *("--cores-per-host", str(size.cores_per_host)),
        *("--history-days", "0"),  # the history is bench/usage.py's
    ]


def release_phase(*, size: DemoFarmSize, rounds: int, releases: int) -> Figures:
    procs, floor, again = FarmProcs(size=size), Floor(), Floor()
    try:
        procs.refill()
        for proc_id in procs.add_procs(20):  # connections, prepared statements
            unbook_proc(proc_id=proc_id)
        unbook_procs(proc_ids=procs.add_procs(100))
        floor.cuebot(procs.add_procs(20))
        again.cuebot(procs.add_procs(20))
        floor.cuebot_batched(procs.add_procs(200))
        pipelined = pipelined_batches(floor=again)
        pipelined(procs.add_procs(200))
        with pinned(server_pids(floor, again)) as placement:
            rates = interleaved_rates(
                procs,
                releases,
                {
                    "floor": floor.cuebot,
                    "floor_again": again.cuebot,
                    "batch_floor": floor.cuebot_batched,
                    "batch_floor_pipelined": pipelined,
                    "unbook_proc": lambda ids: _rate(ids=ids, release=lambda: [unbook_proc(proc_id=p) for p in ids]),
                    "unbook_procs": lambda ids: _rate(
                        ids=ids,
                        release=lambda: [unbook_procs(proc_ids=ids[i : i + 100]) for i in range(0, len(ids), 100)],
                    ),
                },
                batched=("unbook_procs", "batch_floor", "batch_floor_pipelined"),
                rounds=rounds,
                before_round=procs.refill,
            )
        one, hundred = counts_per_call(procs)
        left = cuebot_table_drift(show_ids=farm_show_ids(size=size)).rows
    finally:
        floor.close()
        again.close()
    procs.refill()  # the farm left whole
    print()
    print(
        f"Releases (Maestro era, the five tables written in the transaction), procs of the farm at random: "
        f"{releases} per path and round ({BATCH_FACTOR * releases} for batches), {rounds} interleaved rounds; "
        f"{placement}; the farm refilled before each round in {ms(values=procs.refills).strip()}"
    )
    rows = [
        ("floor: DELETE, host UPDATE, 5 decrements, COMMIT", "floor", "floor", ""),
        (A_A_LABEL, "floor_again", "floor", "1.00"),
        ("batch floor: the same per 100, decrements summed per key", "batch_floor", "batch_floor", ""),
        ("batch floor, its writes pipelined", "batch_floor_pipelined", "batch_floor", ""),
        ("unbook_proc", "unbook_proc", "floor", ">= 0.90"),
        ("unbook_procs, batches of 100", "unbook_procs", "batch_floor", ">= 0.90"),
        ("unbook_procs, x the pipelined batch floor", "unbook_procs", "batch_floor_pipelined", ""),
    ]
    print_rates(rates, rows)
    print(count_line("per unbook_proc", one))
    print(count_line("per unbook_procs of 100", hundred))
    print(f"rows drifted after every release of the rounds, before the last refill: {len(left)}")
    return [(label, ratio_text(rates, path, base)) for label, path, base, _ in rows[1:]]


def _rate(*, ids: list[str], release: Callable[[], object]) -> float:
    return len(ids) / seconds(fn=release)


def refuse_another_shape(*, size: DemoFarmSize, host_cores: int) -> None:
    """Stop if the demo farm here was built to another size first (bench/recalculate_subs.py's, say):
    completing it keeps its procs on their hosts, and the figures would not be of this farm."""
    hosts = [demo_id(f"host:{h}") for h in range(size.hosts)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM proc WHERE pk_show = ANY(%s) AND NOT pk_host = ANY(%s)",
            [farm_show_ids(size=size), hosts],
        )
        (elsewhere,) = cursor.fetchone()
    if elsewhere or host_cores != size.hosts * size.host_cores:
        raise SystemExit(
            "this database holds a demo farm of another size: run the bench on a database of its own "
            "(DATABASE_URL), migrated, where it builds this one"
        )


def one_size(*, scale: int, options: argparse.Namespace) -> dict[str, Figures]:
    """The farm of this size built or completed here, then each phase asked for."""
    size = scaled(scale=scale)
    summary = build_timed(size=size, name=f"farm (x{scale} Maestro's proof)")
    refuse_another_shape(size=size, host_cores=summary.host_cores)
    figures = {}
    if "drift" not in options.skip:
        figures["drift"] = drift_phase(size=size, rounds=options.rounds, drifted=options.drifted)
    if "release" not in options.skip:
        figures["release"] = release_phase(size=size, rounds=options.rounds, releases=options.releases)
    return figures


def database_of_its_own(*, scale: int) -> str:
    """DATABASE_URL with its database named `<name>_x<scale>`, created and migrated if missing."""
    url = urlsplit(settings.DATABASE_URL)
    name = f"{url.path.lstrip('/')}_x{scale}"
    with psycopg.connect(urlunsplit(url._replace(path="/postgres")), autocommit=True) as server:
        if server.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            server.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    own = urlunsplit(url._replace(path=f"/{name}"))
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
        env={**os.environ, "DATABASE_URL": own},
        check=True,
    )
    return own


def each_size(*, scales: list[int], options: argparse.Namespace) -> None:
    """Every size in a process and a database of its own, one after the other; then each ratio
    with the sizes side by side."""
    passed = ["--rounds", str(options.rounds), "--releases", str(options.releases), "--drifted", str(options.drifted)]
    passed += [argument for skipped in options.skip for argument in ("--skip", skipped)]
    found: dict[int, dict[str, Figures]] = {}
    for scale in scales:
        with tempfile.NamedTemporaryFile(suffix=".json") as results:
            print(f"\n=== x{scale} Maestro's proof ===", flush=True)
            subprocess.run(
                [sys.executable, __file__, "--scale", str(scale), "--results", results.name, *passed],
                env={**os.environ, "DATABASE_URL": database_of_its_own(scale=scale)},
                check=True,
            )
            found[scale] = json.loads(Path(results.name).read_text())
    print(f"\n{'x its baseline, median (spread), each size':58s}" + "".join(f"{f'x{s}':>24s}" for s in scales))
    for phase in ("drift", "release"):
        for label, _ in found[scales[0]].get(phase, []):
            print(f"{label:58s}" + "".join(f"{dict(found[s][phase])[label]:>24s}" for s in scales))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scale",
        type=int,
        action="append",
        help="the farm in Maestro proofs (default 1; 10 is a studio's); more than one: each on a database of its own",
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--releases", type=int, default=200, help="single releases per path and round (batches 5x)")
    parser.add_argument("--drifted", type=int, default=20, help="rows of each table drifted for the repair")
    parser.add_argument("--skip", choices=["drift", "release"], action="append", default=[])
    parser.add_argument("--results", help=argparse.SUPPRESS)  # where a size's process leaves its figures
    options = parser.parse_args()
    if not era().cuebot_owns_every_show:
        raise SystemExit("run with ACCOUNTING_SCHEDULER=maestro: this bench is the Maestro era's")
    scales = options.scale or [1]
    if len(scales) > 1:
        each_size(scales=scales, options=options)
        return
    figures = one_size(scale=scales[0], options=options)
    if options.results:
        Path(options.results).write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
