"""The simulator: its fault plan and, end to end, a short run with every fault (the CI run)."""

import json
import random
import time
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from accounting.live import keys
from accounting.reconcile import reseed
from accounting.reconcile.reseed import open_to_booking
from shows.models import Show
from simulator import reconcile
from simulator.era import RunOptions
from simulator.eras.redis import RELEASES_TO_JUDGE, RedisEra
from simulator.farm import foreign_redis_keys, sim_show_ids
from simulator.faults import FAULT_KINDS, FaultPlan, parse_faults
from simulator.management.commands.simulate_farm import Command as SimulateFarm
from simulator.reconcile import FarmReseed
from simulator.report import CAP_KINDS
from simulator.runner import run
from simulator.workers.maestro.play import MAESTRO_FAULTS
from simulator.workers.redis import releasing, reseeding
from tests.service_role import as_cuebot


def test_parse_faults_all_none_and_lists():
    assert parse_faults("all") == FAULT_KINDS
    assert parse_faults("none") == ()
    assert parse_faults("slow-commit, pg-rollback,slow-commit") == ("slow-commit", "pg-rollback")


def test_parse_faults_names_unknown_kinds():
    with pytest.raises(ValueError, match="unknown fault kind.*nope"):
        parse_faults("slow-commit,nope")


def test_fault_plan_is_fixed_by_the_seed_and_fires_each_kind_once_per_firing():
    first = FaultPlan(kinds=FAULT_KINDS, seconds=20, rng=random.Random(7))
    second = FaultPlan(kinds=FAULT_KINDS, seconds=20, rng=random.Random(7))
    assert first._due == second._due
    assert all(first.pending()[kind] >= 1 for kind in FAULT_KINDS)
    first._due = {"slow-commit": [0.0]}
    assert first.take("slow-commit") is True
    assert first.take("slow-commit") is False
    first.rearm("slow-commit")
    assert first.take("slow-commit") is True


@pytest.mark.django_db
def test_bad_fault_name_exits_2_and_builds_nothing():
    with pytest.raises(CommandError) as raised:
        call_command("simulate_farm", "--faults", "meteor", stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2
    assert sim_show_ids() == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args",
    [[], ["--era", "notify"], ["--era", "maestro"], ["--existing"]],
    ids=["redis-era", "notify-era", "maestro-era", "existing"],
)
def test_the_services_documented_role_is_refused_in_one_line_before_anything_is_written(args):
    """The simulator books as the scheduler (INSERT on proc, frame) and builds Cuebot's rows:
    under the role docs/attaching.md grants (the suite's) it stops at once, exit 2."""
    with pytest.raises(CommandError) as raised:
        call_command("simulate_farm", "--seconds", "1", *args, stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2
    assert str(raised.value).startswith("simulate_farm refuses: it writes Cuebot's own rows")
    assert "may not INSERT on facility, alloc, show" in str(raised.value) and "\n" not in str(raised.value)
    assert sim_show_ids() == []


def test_help_states_every_default():
    text = SimulateFarm().create_parser("manage.py", "simulate_farm").format_help()
    flat = " ".join(text.split())
    for default in (
        "(default: 4)",
        "(default: 20)",
        "(default: 40)",
        "(default: 60)",
        "(default: 2)",
        "(default: 1)",
        "(default: none)",
    ):
        assert default in flat, default
    assert "none by default" in flat and "--allow-flush-foreign-keys" in flat
    assert "{redis,notify,maestro}" in flat and all(kind in flat for kind in MAESTRO_FAULTS)
    assert "under injected faults" not in flat


@pytest.fixture
def foreign_key(db, acct_redis) -> str:
    """A key of a show the simulator did not create (another service's, sharing this Redis)."""
    key = keys.sub(show_id="another-sites-show", alloc_id="its-alloc")
    acct_redis.hset(key, mapping={"int_cores": 7, "size": 10})
    return key


def test_foreign_keys_are_those_of_shows_not_given_as_own(farm, acct_redis):
    own = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    acct_redis.hset(own, mapping={"int_cores": 0})
    acct_redis.set(keys.SEQ, 5)  # bookkeeping keys belong to no show
    assert foreign_redis_keys(own_show_ids=[]) == [own]
    assert foreign_redis_keys(own_show_ids=[farm.show.id]) == []


def test_redis_restart_fault_refuses_to_flush_keys_of_shows_it_did_not_create(foreign_key, acct_redis):
    with pytest.raises(CommandError) as raised, as_cuebot():  # a role that may book: this refusal comes first
        call_command(
            "simulate_farm", "--seconds", "1", "--faults", "redis-restart", stdout=StringIO(), stderr=StringIO()
        )
    assert raised.value.returncode == 2
    assert "--allow-flush-foreign-keys" in str(raised.value) and foreign_key in str(raised.value)
    assert acct_redis.hgetall(foreign_key) == {"int_cores": "7", "size": "10"}
    assert sim_show_ids() == []


@pytest.mark.superuser  # simulate_farm books as the scheduler (INSERT on proc)
@pytest.mark.django_db(transaction=True)
def test_all_faults_beside_keys_it_did_not_create_run_on_a_redis_of_their_own(foreign_key, acct_redis):
    """README's `simulate_farm --faults all`, run as written beside the demo farm: redis-kill
    gives the run its own Redis, so redis-restart flushes that one, never the configured one."""
    out, err = StringIO(), StringIO()
    call_command("simulate_farm", "--seconds", "1", "--faults", "all", "--json", stdout=out, stderr=err)
    assert "left out" not in err.getvalue()
    assert {"redis-restart", "redis-kill"} <= set(json.loads(out.getvalue())["faults"])
    assert acct_redis.hgetall(foreign_key) == {"int_cores": "7", "size": "10"}
    assert not acct_redis.keys("acct:sub:*sim*") and acct_redis.dbsize() == 1  # nothing of the run's here


@pytest.mark.superuser  # simulate_farm books as the scheduler (INSERT on proc)
@pytest.mark.django_db(transaction=True)
def test_redis_restart_fault_flushes_them_when_told_explicitly(foreign_key, acct_redis):
    out = StringIO()
    call_command(
        "simulate_farm",
        "--seconds",
        "1",
        "--faults",
        "redis-restart",
        "--allow-flush-foreign-keys",
        "--json",
        stdout=out,
        stderr=StringIO(),
    )
    assert json.loads(out.getvalue())["faults"]["redis-restart"] >= 1
    assert not acct_redis.exists(foreign_key)


@pytest.mark.slow
@pytest.mark.superuser  # simulate_farm books as the scheduler (INSERT on proc)
@pytest.mark.django_db(transaction=True)
def test_short_run_with_every_fault_keeps_every_invariant():
    assert settings.DATABASES["default"]["NAME"].startswith("test_")
    assert settings.ACCOUNTING_REDIS_URL.endswith(f"/{settings.TEST_REDIS_DB}")
    out = StringIO()
    call_command(
        "simulate_farm",
        "--seconds",
        "20",
        "--faults",
        "all",
        "--seed",
        "3",
        "--json",
        "--keep-farm",
        stdout=out,
        stderr=StringIO(),
    )
    report = json.loads(out.getvalue())
    assert report["invariants"] == {
        "over_cap": 0,
        "drift_after_reconcile": 0,
        "negative_counters": 0,
        "low_counters_sampled": 0,
        "low_before_final_reseed": 0,
        "high_before_final_reseed": 0,
        "releases_found_counter_low": 0,
        "negative_pg_rows": 0,
        "pg_drift_after_reconcile": 0,
        "expired_inflight_applied": 0,
        "worker_errors": 0,
    }
    assert report["ok"] is True
    assert report["bookings"] > 0 and report["releases"] > 0
    # The default farm's every cap turned bookings away: a scheduler ignoring one would book past it.
    assert all(report["refused_at_cap"][kind] > 0 for kind in CAP_KINDS), report["refused_at_cap"]
    # A stalled release was published after its in-flight entry expired, and changed nothing.
    assert report["stalled_publishes"]["sent"] > 0
    assert report["release_calls"]["single"] > 0 and report["release_calls"]["batch"] > 0
    # Through gunicorn too, single and batch, and counted released when the proc was there.
    assert report["release_calls"]["http single"] > 0 and report["release_calls"]["http batch"] > 0
    assert report["reseed"]["cycles_run"] > 0 and report["reseed"]["cycles_skipped"] == 0
    # Every kind was injected at least once.
    assert set(report["faults"]) == set(FAULT_KINDS), report["faults_not_injected"]
    # The farm was the simulator's own: the sim- shows, fresh for this run.
    assert Show.objects.filter(str_name__startswith="sim-").count() == 4


@pytest.mark.django_db
def test_a_show_closed_to_booking_by_its_switch_is_left_out_of_the_low_samples(farm, acct_redis):
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    acct_redis.hset(sub, mapping={"int_cores": 0, "int_gpus": 0, "size": 100, "burst": 200})
    assert open_to_booking(show_ids=[farm.show.id]) == [farm.show.id]
    # What accounting.reconcile.reseed.close_show leaves until the show's seeding reopens it:
    # booking.lua refuses the show's core bookings, so its stale counters can read low meanwhile.
    acct_redis.hdel(sub, "size", "burst")
    assert open_to_booking(show_ids=[farm.show.id]) == []


@pytest.mark.django_db
def test_a_farm_reseed_that_finds_redis_empty_reports_its_bootstrap(farm, acct_redis, monkeypatch):
    """A restart between the reconciler's empty check and its farm reseed is rebuilt by the
    reseed (reseed() runs the bootstrap then): the run counts that bootstrap, where it used to
    report none while the keys were rebuilt."""
    monkeypatch.setattr(reseed, "inflight_wait", lambda seconds: None)  # time, not Redis: the test's clock
    farm.add_proc(cores=200)
    assert reconcile.reseed_all() == FarmReseed(written=True, bootstrapped=True)
    assert open_to_booking(show_ids=[farm.show.id]) == [farm.show.id]
    assert reconcile.reseed_all() == FarmReseed(written=True, bootstrapped=False)


@pytest.mark.slow
@pytest.mark.superuser  # the run books as the scheduler
@pytest.mark.django_db(transaction=True)
def test_a_last_reseed_that_outlasts_the_run_is_followed_by_releases_that_are_judged(monkeypatch):
    """The last reseed waits out in-flight entries for up to a TTL (a stalled release's): when
    that wait runs past the run's end, the workers go on for a fifth of the run after it, so the
    final check still judges releases (with none after it, a lost decrement went unseen)."""
    # Every wait of the last reseed for in-flight entries runs to its deadline, one TTL and a
    # second: past the end of a run shorter than that.
    monkeypatch.setattr(reseeding, "inflight_keys_pending", lambda: True)
    report = run(era=RedisEra(reconcile_interval=0.5), options=RunOptions(seconds=3, seed=7))
    assert report.stats.releases_after_last_reseed >= RELEASES_TO_JUDGE
    assert report.ok and report.exactness_judged, report.as_text()


@pytest.mark.slow
@pytest.mark.superuser  # the run books as the scheduler
@pytest.mark.django_db(transaction=True)
def test_a_farm_with_nothing_to_release_after_the_last_reseed_runs_on_until_it_has(monkeypatch):
    """A farm that has just refilled has nothing old enough to release for a while (every frame
    runs FRAME_SECONDS at least): when that outlasts the run's last fifth, the run goes on until
    enough procs were released after the last reseed for the final check to judge them."""
    options = RunOptions(seconds=3, seed=7)
    real = releasing.release_some

    def nothing_old_enough_yet(ctx, *, proc_ids):
        if (
            ctx.last_reseed_done_at is not None
            and time.monotonic() < ctx.last_reseed_done_at + 0.2 * options.seconds + 0.5
        ):
            ctx.stop.wait(0.05)  # the releaser's own wait when it finds nothing to release
            return
        real(ctx, proc_ids=proc_ids)

    monkeypatch.setattr(releasing, "release_some", nothing_old_enough_yet)
    report = run(era=RedisEra(reconcile_interval=0.5), options=options)
    assert report.stats.releases_after_last_reseed >= RELEASES_TO_JUDGE
    assert report.ok and report.exactness_judged, report.as_text()
