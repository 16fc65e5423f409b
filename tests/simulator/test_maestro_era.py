"""`simulate_farm --era maestro`: Maestro's bookings and Cuebot's releases beside this service's,
every invariant held under every fault, and each invariant shown able to fail.

Each broken variant changes one seam for one short run on a fresh farm and must be caught by the
invariant named for it; the same run with nothing broken holds every invariant, so the catch is
the variant's doing.
"""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from accounting.reconcile import recompute
from accounting.release import statements, transport
from shows.models import Show
from simulator.era import RunOptions
from simulator.eras.maestro import MaestroEra
from simulator.runner import run
from simulator.workers.maestro import booking, cuebot_booking, cuebot_release, operating, releasing
from simulator.workers.maestro.cuebot_rows import CAP_KINDS
from simulator.workers.maestro.play import MAESTRO_FAULTS

# It books as Maestro (INSERT on proc and frame), kills jobs and ends other sessions: more than
# the service's role may do. The service's own writes run as a role the run makes with the
# documented grants.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.superuser, pytest.mark.slow]


def test_every_fault_keeps_every_invariant_and_every_cap_binds(maestro_era):
    """The CI run: the command as an operator runs it, releases over HTTP included, on a site
    whose accounting Redis does not answer (the Maestro era has none): its clean-up too."""
    out = StringIO()
    call_command(
        "simulate_farm", "--era", "maestro", "--faults", "all", "--seconds", "12", "--seed", "4", "--json",
        stdout=out, stderr=StringIO(),
    )  # fmt: skip
    report = json.loads(out.getvalue())
    assert report["ok"] is True, report["invariants"]
    assert not any(report["invariants"].values())
    assert set(report["faults"]) == set(MAESTRO_FAULTS) and report["faults_pending"] == {}
    assert all(report["rejections"][kind] > 0 for kind in CAP_KINDS if kind != "job finished"), str(
        report["rejections"]
    )
    assert report["samples"] >= 15 and report["repairs"] >= 3
    assert {"service single", "service batch", "cuebot", "job-kill"} <= set(report["releases_by_kind"])
    assert any(kind.startswith("service http") for kind in report["releases_by_kind"])
    assert report["procs"]["gone"] == report["releases"] or report["release_outcome_unknown"] > 0
    assert report["service_role"].startswith("sim_service_")
    assert not Show.objects.filter(str_name__startswith="sim-").exists()


def short_run(*, faults: tuple[str, ...] = (), seed: int = 8) -> dict:
    """A small busy farm for a few seconds, in process (no web server: the seams are here). No
    repair but the deadlock-order fault's: the lock order is then shown by that fault alone, not
    by a periodic repair's luck, and no repair rewrites a drift before a sample sees it."""
    options = RunOptions(shows=3, hosts=8, jobs=24, seconds=4, bookers=3, releasers=2, faults=faults, seed=seed)
    return run(era=MaestroEra(repair_seconds=3600), options=options).as_dict()


@pytest.fixture(autouse=True)
def maestro(settings):
    settings.ACCOUNTING_SCHEDULER = "maestro"


def release_skips_the_point(monkeypatch):
    """The point's statement, for one row and for several, writes nothing."""
    monkeypatch.setitem(statements.ONE_ROW_ADJUSTMENT_SQL, "point", "SELECT 1")
    monkeypatch.setitem(statements.ADJUSTMENT_SQL, "point", "SELECT 1")


def release_credits_twice(monkeypatch):
    real = transport.write_accounting

    def twice(cursor, *, plan):
        real(cursor, plan=plan)
        real(cursor, plan=plan)

    monkeypatch.setattr(transport, "write_accounting", twice)


def booking_skips_the_layer(monkeypatch):
    monkeypatch.setattr(
        cuebot_booking, "BOOKING_WRITES", tuple(t for t in cuebot_booking.BOOKING_WRITES if t != "layer_resource")
    )


def booking_ignores_the_caps(monkeypatch):
    """Every cap check dropped; the host's room still checked (PostgreSQL's own trigger guards it)."""
    real = cuebot_booking.fits

    def fits(*, plan, host, rows):
        return "host" if real(plan=plan, host=host, rows=rows) == "host" else None

    monkeypatch.setattr(cuebot_booking, "fits", fits)


def repair_locks_point_first(monkeypatch):
    by_table = {table.table: table for table in recompute.TABLES}
    order = ("point", "subscription", "layer_resource", "job_resource", "folder_resource")
    monkeypatch.setattr(recompute, "TABLES", tuple(by_table[name] for name in order))


def flip_recomputes_the_show(monkeypatch):
    """A flip that hands the show's rows over as the Redis and NOTIFY eras' switch back did: every
    row rewritten from its sums, changed or not (here job_resource's, the values kept; the
    service's repair no longer writes a row that has not drifted, so it cannot stand in)."""
    real = operating.set_scheduler_managed

    def flip(*, show, managed):
        changed = real(show=show, managed=managed)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE job_resource r SET int_cores = r.int_cores FROM job j WHERE j.pk_job = r.pk_job AND j.pk_show = %s",
                [show.pk],
            )
        return changed

    monkeypatch.setattr(operating, "set_scheduler_managed", flip)


def release_leaves_the_host_full(monkeypatch):
    """Cuebot's release takes its procs off the five tables but gives their hosts nothing back."""
    monkeypatch.setattr(cuebot_release, "REFUND_HOST", "SELECT %(host)s, %(cores)s, %(mem)s, %(gpus)s, %(gpu_mem)s")


def release_says_nothing_was_released(monkeypatch):
    """The service's release deletes the procs and answers that it found none of them."""
    real_one, real_many = releasing.unbook_proc, releasing.unbook_procs
    monkeypatch.setattr(releasing, "unbook_proc", lambda *, proc_id: real_one(proc_id=proc_id) and None)
    monkeypatch.setattr(releasing, "unbook_procs", lambda *, proc_ids: [None for _ in real_many(proc_ids=proc_ids)])


def booker_fails(monkeypatch):
    """An unexpected error in a booker's tick: the worker ends, and the run says so."""

    def tick(**_):
        raise RuntimeError("a booker fails here on purpose")

    monkeypatch.setattr(booking, "tick", tick)


VARIANTS = {
    # variant: (faults it needs to show, the invariant that catches it, what the violation names)
    release_skips_the_point: ((), "tables_differ_from_sum_proc", "point"),
    release_credits_twice: ((), "tables_differ_from_sum_proc", "subscription"),
    booking_skips_the_layer: ((), "tables_differ_from_sum_proc", "layer_resource"),
    booking_ignores_the_caps: ((), "over_cap", ""),
    repair_locks_point_first: (("deadlock-order",), "lock_order_deadlocks", ""),
    flip_recomputes_the_show: ((), "flag_flip_wrote_accounting", "job_resource"),
    release_leaves_the_host_full: ((), "host_idle_differs", "host"),
    release_says_nothing_was_released: ((), "released_differs_from_gone", ""),
    booker_fails: ((), "worker_errors", ""),
}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda variant: variant.__name__)
def test_a_broken_variant_is_caught_by_its_invariant(variant, monkeypatch):
    faults, invariant, named = VARIANTS[variant]
    variant(monkeypatch)
    report = short_run(faults=faults)
    assert report["invariants"][invariant] > 0, report
    assert report["ok"] is False
    if named:
        assert any(named in " ".join(v) for v in report["violations"][invariant]), report["violations"]


@pytest.mark.parametrize("faults", sorted({v[0] for v in VARIANTS.values()}), ids=lambda f: ",".join(f) or "none")
def test_the_same_runs_unbroken_hold_every_invariant(faults):
    report = short_run(faults=faults)
    assert report["ok"] is True, report
    assert report["bookings"] > 0 and report["releases"] > 0 and report["samples"] >= 6
    assert set(report["faults"]) == set(faults)


def test_unknown_faults_and_an_existing_farm_are_refused():
    with pytest.raises(CommandError, match="unknown fault") as raised:
        call_command(
            "simulate_farm", "--era", "maestro", "--faults", "redis-kill", stdout=StringIO(), stderr=StringIO()
        )
    assert raised.value.returncode == 2
    with pytest.raises(CommandError, match="builds its own farm") as raised:
        call_command("simulate_farm", "--era", "maestro", "--existing", stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2
