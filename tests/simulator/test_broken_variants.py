"""The simulator's invariants can fail: each deliberately broken variant of the protocol is run
through `simulate_farm`'s engine and must be caught by the invariant named for it.

Each variant changes one thing (a line of a Lua script, one step of the release path, the
reseed's snapshot, the scheduler's sizing of a frame) for the length of one short run on a
fresh farm, and the report must name its failure. The caps are caught on the farm every run
uses (simulate_farm's defaults), not on one built for the test: a default run reaches each of
them. The same runs with nothing broken hold every invariant at 0, so a catch here is the
variant's doing.
"""

import json
from dataclasses import replace
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from accounting.live import booking
from accounting.live.scripts import LuaScript
from accounting.live.scripts import script as real_script
from accounting.notify import send as notify_send
from accounting.notify.payloads import LIMIT_CHANGE, RELEASE
from accounting.reconcile import reseed
from accounting.release import after_commit, publish, transport, unbook
from accounting.release.types import Release
from simulator.era import RunOptions
from simulator.eras.redis import RedisEra
from simulator.report import CAP_KINDS
from simulator.runner import run
from simulator.workers.notify import booking as notify_booking
from simulator.workers.notify import model as notify_model
from simulator.workers.redis import booking as redis_booking
from simulator.workers.redis import releasing as redis_releasing

pytestmark = [
    pytest.mark.slow,
    pytest.mark.superuser,
    pytest.mark.django_db(transaction=True),
]  # it books as the scheduler


def script_without(monkeypatch, *, module, name: str, check: str, instead: str) -> None:
    """The service's script `name`, as `module` loads it, with `check` replaced by `instead`
    (the line must be there to replace)."""
    source = real_script(name).source
    assert check in source
    broken = LuaScript(name=name, source=source.replace(check, instead))
    monkeypatch.setattr(module, "script", lambda wanted: broken if wanted == name else real_script(wanted))


def burst_not_enforced(monkeypatch):
    script_without(
        monkeypatch,
        module=booking,
        name="booking",
        check="if burst == 0 or booked + cores > burst then",
        instead="if false then",
    )


def core_caps_not_enforced(monkeypatch):
    """The folder's and the job's max cores: the caps loop's cores entry, its delta made 0."""
    script_without(
        monkeypatch,
        module=booking,
        name="booking",
        check="{cores, 'int_max_cores', 'int_cores', 'cores'}",
        instead="{0, 'int_max_cores', 'int_cores', 'cores'}",
    )


def gpu_caps_not_enforced(monkeypatch):
    """The folder's and the job's max GPUs: the caps loop's GPU entry, its delta made 0."""
    script_without(
        monkeypatch,
        module=booking,
        name="booking",
        check="{gpus, 'int_max_gpus', 'int_gpus', 'gpus'}",
        instead="{0, 'int_max_gpus', 'int_gpus', 'gpus'}",
    )


def layer_limits_not_enforced(monkeypatch):
    """The scheduler books a frame whatever size its layer allows."""
    monkeypatch.setattr(redis_booking, "layer_refusal", lambda *, layer, cores, gpus: None)


def expired_inflight_entry_applied(monkeypatch):
    """release.lua decrements for an entry whose TTL has passed, as for a live one."""
    script_without(
        monkeypatch,
        module=publish,
        name="release",
        check="if entry_expiry(entry) <= now_ms() then",
        instead="if false then",
    )


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


def finished_jobs_decrements_published(monkeypatch):
    """The release path without its rule for the scheduler's own reseed: a FINISHED job's procs
    are decremented too, after that reseed already left them out (issue 42)."""
    monkeypatch.setattr(Release, "job_finished", property(lambda release: False))


def published_before_commit(monkeypatch):
    """The decrement sent at once instead of from transaction.on_commit: a rolled-back
    release still takes its procs off."""
    real = unbook.publish_and_count_on_commit

    def at_once(releases, registered, *, era, at_commit):
        real(releases, registered, era=era, at_commit=after_commit.at_once)

    monkeypatch.setattr(unbook, "publish_and_count_on_commit", at_once)


# A counter seen low: in a quiet sample, by a release that found it below what it took off,
# or once the run is over. Which of them sees it first is the threads' timing; each names it.
LOW = ("low_counters_sampled", "releases_found_counter_low", "low_before_final_reseed")

# The farm every run uses (simulate_farm's defaults), for a short run, with release-stall: each
# variant below needs the farm and its own break only, and one control then covers them all.
DEFAULT_FARM = RunOptions(seconds=6, seed=7)
STALLS = ("release-stall",)
# The same farm with the scheduler's own reseed in place of this project's (--reseeder scheduler).
SCHEDULER_RESEEDS = replace(DEFAULT_FARM, reseeder="scheduler")
# A small, busy farm: one releaser for four bookers.
SMALL_FARM = RunOptions(shows=4, hosts=8, jobs=40, seconds=6, releasers=1, seed=7)
# Every run here reconciles twice a second.
ERA = RedisEra(reconcile_interval=0.5)

VARIANTS = {
    # variant: (the run, the faults it runs with, the invariants that catch it)
    burst_not_enforced: (DEFAULT_FARM, STALLS, ("over_cap",)),
    core_caps_not_enforced: (DEFAULT_FARM, STALLS, ("over_cap",)),
    gpu_caps_not_enforced: (DEFAULT_FARM, STALLS, ("over_cap",)),
    layer_limits_not_enforced: (DEFAULT_FARM, STALLS, ("over_cap",)),
    expired_inflight_entry_applied: (DEFAULT_FARM, STALLS, ("expired_inflight_applied",)),
    double_decrement: (DEFAULT_FARM, STALLS, LOW),
    decrement_lost: (DEFAULT_FARM, STALLS, ("high_before_final_reseed",)),
    finished_jobs_left_out_of_the_snapshot: (SMALL_FARM, ("job-kill",), LOW),
    published_before_commit: (SMALL_FARM, ("pg-rollback",), LOW),
    finished_jobs_decrements_published: (SCHEDULER_RESEEDS, ("job-kill",), LOW),
}


# The cap a variant ignores, as over_cap names the bookings past it: (tables, unit).
CAP_IGNORED = {
    burst_not_enforced: ({"subscription"}, "cores"),
    core_caps_not_enforced: ({"folder", "job"}, "cores"),
    gpu_caps_not_enforced: ({"folder", "job"}, "gpus"),
    layer_limits_not_enforced: ({"layer"}, "per frame"),
}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda variant: variant.__name__)
def test_a_broken_variant_is_caught_by_its_invariant(variant, monkeypatch):
    config, faults, invariants = VARIANTS[variant]
    variant(monkeypatch)
    report = run(era=ERA, options=replace(config, faults=faults))
    assert any(report.invariants[name] > 0 for name in invariants), report.as_text()
    assert not report.ok
    if variant in CAP_IGNORED:  # and past the very cap it ignores
        tables, unit = CAP_IGNORED[variant]
        assert any(v.table in tables and unit in v.unit for v in report.stats.counted_over_cap()), report.as_text()


@pytest.mark.parametrize(
    ("config", "faults"),
    sorted({(config, faults) for config, faults, _ in VARIANTS.values()}, key=str),
    ids=lambda value: (
        {DEFAULT_FARM: "default farm", SCHEDULER_RESEEDS: "default farm, scheduler's reseed"}.get(value, "small farm")
        if isinstance(value, RunOptions)
        else ",".join(value) or "no faults"
    ),
)
def test_the_same_runs_of_the_unbroken_protocol_hold_every_invariant(config, faults):
    """The control: each run above, with nothing broken, is clean, exactness judged (where this
    project reseeds: the scheduler's own reseed is exact only at its write)."""
    report = run(era=ERA, options=replace(config, faults=faults))
    assert report.ok, report.as_text()
    if config.reseeder == "scheduler":
        # Its reseed came between a kill and the releases (counters read low within its bound),
        # the window a release that publishes a FINISHED job's decrements is caught in.
        assert report.stats.low_within_scheduler_bound > 0, report.as_text()
    else:
        assert report.exactness_judged, report.as_text()


def release_credits_cuebots_rows_twice(monkeypatch):
    """A Cuebot-managed show's accounting rows credited twice per release."""
    real = transport.write_accounting

    def twice(cursor, *, plan):
        real(cursor, plan=plan)
        real(cursor, plan=plan)

    monkeypatch.setattr(transport, "write_accounting", twice)


def reseed_writes_below_zero(monkeypatch):
    """The reseed's snapshot a thousand cores below what the procs book (below zero everywhere)."""
    real = reseed.booked_rows

    def below(*, show_ids, finished_jobs=True):
        rows = real(show_ids=show_ids, finished_jobs=finished_jobs)
        return (row for key, cores, gpus, first in rows for row in [(key, cores - 1000, gpus, first)])

    monkeypatch.setattr(reseed, "booked_rows", below)


def one_releaser_fails(monkeypatch):
    """An unexpected error in a releaser's first release: that worker ends, and the run says so."""
    real, failed = redis_releasing.release, []

    def release(proc_ids):
        if not failed:
            failed.append(proc_ids)
            raise RuntimeError("a releaser fails here on purpose")
        return real(proc_ids)

    monkeypatch.setattr(redis_releasing, "release", release)


# The invariants no variant above breaks, each broken here by its own change, all in one run of
# the default farm (a run is what costs): each change leaves the others' invariants to catch it.
THE_OTHER_INVARIANTS = {
    release_credits_cuebots_rows_twice: ("pg_drift_after_reconcile", "negative_pg_rows"),
    reseed_writes_below_zero: ("drift_after_reconcile", "negative_counters"),
    one_releaser_fails: ("worker_errors",),
}


def test_the_other_invariants_each_catch_their_own_break(monkeypatch):
    for variant in THE_OTHER_INVARIANTS:
        variant(monkeypatch)
    report = run(era=ERA, options=DEFAULT_FARM)
    for variant, invariants in THE_OTHER_INVARIANTS.items():
        for name in invariants:
            assert report.invariants[name] > 0, (variant.__name__, name, report.as_text())


# The NOTIFY era's run on the farm every run uses, with its job kills (FINISHED first, procs
# released later), and no fault that loses a notification.
NOTIFY_RUN = ("--era", "notify", "--seconds", "5", "--faults", "job-kill", "--seed", "7")


def notify_era_run() -> dict:
    out = StringIO()
    try:
        call_command("simulate_farm", *NOTIFY_RUN, "--json", stdout=out, stderr=StringIO())
    except CommandError as failed:
        assert failed.returncode == 1  # an invariant failed: the report says which
    return json.loads(out.getvalue())


def test_a_notify_era_release_sent_for_a_killed_jobs_procs_is_caught(monkeypatch):
    """Cuebot's own rule (it sends every release): a killed job's procs are heard after its
    kill, and the scheduler's recompute has already left them out."""
    monkeypatch.setattr(Release, "job_finished", property(lambda release: False))
    report = notify_era_run()
    assert report["invariants"]["killed_job_releases_heard"] > 0, report
    assert report["ok"] is False


def test_a_notify_era_scheduler_ignoring_gpu_caps_is_caught(monkeypatch):
    """The NOTIFY-era scheduler model checks the folder's and the job's max cores, not their
    max GPUs: the default farm's GPU caps bind, so it books past them."""
    monkeypatch.setattr(notify_model, "FOLDER_AND_JOB_CAPS", (("cores", 0),))
    report = notify_era_run()
    assert report["invariants"]["over_cap"] > 0, report
    assert {v["unit"] for v in report["over_cap_examples"]} == {"gpus"}
    assert report["ok"] is False


def test_the_same_notify_era_run_of_the_unbroken_protocol_holds_every_invariant():
    report = notify_era_run()
    assert report["ok"] is True and report["exactness_judged"] is True, report
    assert report["faults"]["job-kill"] > 0
    # The default farm's every cap turned the scheduler model's bookings away, as in the Redis era.
    assert all(report["refused_at_cap"][kind] > 0 for kind in CAP_KINDS), report["refused_at_cap"]


def limit_changes_not_sent(monkeypatch):
    """The limit services commit a cap change and send nothing on acct_limit_change."""
    real = notify_send.notify

    def notify(*, cursor, channel, payloads):
        if channel != LIMIT_CHANGE:
            real(cursor=cursor, channel=channel, payloads=payloads)

    monkeypatch.setattr(notify_send, "notify", notify)


def a_garbled_payload_beside_each_release(monkeypatch):
    """Each release's notifications carry one more payload, which the scheduler cannot read."""
    notify, notify_and_commit = notify_send.notify, notify_send.notify_and_commit

    def garbled(channel: str, payloads: list[str]) -> list[str]:
        return [*payloads, "garbled"] if channel == RELEASE else payloads

    monkeypatch.setattr(
        notify_send,
        "notify",
        lambda *, cursor, channel, payloads: notify(
            cursor=cursor, channel=channel, payloads=garbled(channel, payloads)
        ),
    )
    monkeypatch.setattr(
        notify_send,
        "notify_and_commit",
        lambda *, channel, payloads: notify_and_commit(channel=channel, payloads=garbled(channel, payloads)),
    )


def recompute_counts_a_core_short(monkeypatch):
    """The scheduler's recompute writes SUM(proc) less a core into its counters."""
    real = notify_model.Store.overwrite

    def overwrite(self, *, snapshot, epoch):
        real(self, snapshot={key: (cores - 1, gpus) for key, (cores, gpus) in snapshot.items()}, epoch=epoch)

    monkeypatch.setattr(notify_model.Store, "overwrite", overwrite)


def one_booker_fails(monkeypatch):
    """An unexpected error in a booker's first booking: that worker ends, and the run says so."""
    real, failed = notify_booking.book_one, []

    def book_one(run, **kwargs):
        if not failed:
            failed.append(kwargs)
            raise RuntimeError("a booker fails here on purpose")
        real(run, **kwargs)

    monkeypatch.setattr(notify_booking, "book_one", book_one)


NOTIFY_OTHER_INVARIANTS = {
    limit_changes_not_sent: ("cap_changes_not_heard",),
    a_garbled_payload_beside_each_release: ("unparsable_payloads",),
    recompute_counts_a_core_short: ("store_below_sum_proc", "store_differs_after_final_recompute"),
    one_booker_fails: ("worker_errors",),
}


def test_the_other_notify_era_invariants_each_catch_their_own_break(monkeypatch):
    """As in the Redis era, the invariants no variant above breaks, each by its own change, in one run."""
    for variant in NOTIFY_OTHER_INVARIANTS:
        variant(monkeypatch)
    report = notify_era_run()
    for variant, invariants in NOTIFY_OTHER_INVARIANTS.items():
        for name in invariants:
            assert report["invariants"][name] > 0, (variant.__name__, name, report["invariants"])
