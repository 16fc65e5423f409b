"""The simulator's invariants can fail: each deliberately broken variant of the protocol is run
through `simulate_farm`'s engine and must be caught by the invariant named for it.

Each variant changes one thing (a line of a Lua script, one step of the release path, the
reseed's snapshot) for the length of one short run on a fresh farm, and the report must name
its failure. The unbroken runs beside them (test_simulation.py, test_counting_rules.py) hold
every invariant at 0, so a catch here is the variant's doing.
"""

from dataclasses import replace

import pytest

from accounting.live import booking
from accounting.live.scripts import LuaScript
from accounting.live.scripts import script as real_script
from accounting.models import FolderResource, JobResource, Subscription
from accounting.reconcile import reseed
from accounting.release import publish, unbook
from simulator import runner
from simulator.runner import SimConfig, run_simulation

pytestmark = [
    pytest.mark.slow,
    pytest.mark.superuser,
    pytest.mark.django_db(transaction=True),
]  # it books as the scheduler


def booking_script_without(monkeypatch, check: str) -> None:
    """booking.lua with one limit check turned off (the line must be there to turn off)."""
    source = real_script("booking").source
    assert check in source
    broken = LuaScript(name="booking", source=source.replace(check, "if false then"))
    monkeypatch.setattr(booking, "script", lambda name: broken if name == "booking" else real_script(name))


def with_farm_caps(monkeypatch, **caps) -> None:
    """The run's farm with these caps (centicores) on every show: already reached by the procs
    it starts with, so the enforced protocol books nothing more there and a broken one must."""
    real = runner.build_sim_farm

    def build(**options):
        farm = real(**options)
        Subscription.objects.filter(show_id__in=farm.show_ids).update(**caps.get("subscription", {}))
        FolderResource.objects.filter(folder__show_id__in=farm.show_ids).update(**caps.get("folder", {}))
        JobResource.objects.filter(job__show_id__in=farm.show_ids).update(**caps.get("job", {}))
        return farm

    monkeypatch.setattr(runner, "build_sim_farm", build)


def burst_not_enforced(monkeypatch):
    booking_script_without(monkeypatch, "if burst == 0 or booked + cores > burst then")
    with_farm_caps(monkeypatch, subscription={"int_burst": 400})


def caps_not_enforced(monkeypatch):
    booking_script_without(monkeypatch, "if cap > 0 and current + delta > cap then")  # cores and GPUs: one loop
    with_farm_caps(monkeypatch, folder={"int_max_cores": 200}, job={"int_max_cores": 100})


def publish_with(monkeypatch, deltas) -> None:
    real = publish.RedisReleasePublisher.publish

    def broken(self, *, prepared):
        return real(self, prepared=replace(prepared, deltas=deltas(prepared.deltas)))

    monkeypatch.setattr(publish.RedisReleasePublisher, "publish", broken)


def double_decrement(monkeypatch):
    publish_with(monkeypatch, lambda deltas: {key: (2 * c, 2 * g) for key, (c, g) in deltas.items()})


def decrement_lost(monkeypatch):
    publish_with(monkeypatch, lambda deltas: {})  # the entry settled, nothing taken off


def finished_jobs_left_out_of_the_snapshot(monkeypatch):
    """The upstream scheduler's reseed rule, in this project's reseed."""
    real = reseed.booked_rows
    monkeypatch.setattr(
        reseed, "booked_rows", lambda *, show_ids, finished_jobs=True: real(show_ids=show_ids, finished_jobs=False)
    )


def published_before_commit(monkeypatch):
    """The decrement sent at once instead of from transaction.on_commit: a rolled-back
    release still takes its procs off."""

    def at_once(registered, covered, era):
        era.publisher.publish(prepared=publish.made(prepared=registered.prepared, releases=covered))

    monkeypatch.setattr(unbook, "_publish_on_commit", at_once)


# A counter seen low: in a quiet sample, by a release that found it below what it took off,
# or once the run is over. Which of them sees it first is the threads' timing; each names it.
LOW = ("low_counters_sampled", "releases_found_counter_low", "low_before_final_reseed")

VARIANTS = {
    # variant: (faults it needs to show, the invariants that catch it)
    burst_not_enforced: ((), ("over_cap",)),
    caps_not_enforced: ((), ("over_cap",)),
    double_decrement: ((), LOW),
    decrement_lost: ((), ("high_before_final_reseed",)),
    finished_jobs_left_out_of_the_snapshot: (("job-kill",), LOW),
    published_before_commit: (("pg-rollback",), LOW),
}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda variant: variant.__name__)
def test_a_broken_variant_is_caught_by_its_invariant(variant, monkeypatch):
    faults, invariants = VARIANTS[variant]
    variant(monkeypatch)
    # A small, busy farm: one releaser for four bookers, so caps and bursts are reached.
    report = run_simulation(
        config=SimConfig(
            shows=4, hosts=8, jobs=40, seconds=6, releasers=1, faults=faults, seed=7, reconcile_interval=0.5
        )
    )
    assert any(report.invariants[name] > 0 for name in invariants), report.as_table()
    assert not report.ok


@pytest.mark.parametrize(
    "faults", sorted({faults for faults, _ in VARIANTS.values()}), ids=lambda f: ",".join(f) or "none"
)
def test_the_same_runs_of_the_unbroken_protocol_hold_every_invariant(faults):
    """The control: each run above, with nothing broken, is clean, exactness judged."""
    report = run_simulation(
        config=SimConfig(
            shows=4, hosts=8, jobs=40, seconds=6, releasers=1, faults=faults, seed=7, reconcile_interval=0.5
        )
    )
    assert report.ok and report.exactness_judged, report.as_table()
