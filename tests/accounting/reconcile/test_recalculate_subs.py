import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from accounting.live.leases import LEASE_SECONDS, held_locks
from accounting.models import Subscription
from accounting.reconcile import recalculate_subs as recalculate_subs_module
from accounting.reconcile.recalculate_subs import (
    RECALCULATE_SUBS_LOCK,
    recalculate_subs,
)
from shows.models import Alloc, Host
from tests.farms import build_farm, unique
from tests.service_role import as_cuebot

# Committed statements, so a row's xmin tells whether anything wrote it.
pytestmark = pytest.mark.django_db(transaction=True)


def row_version(subscription: Subscription) -> tuple:
    """The physical tuple: any UPDATE, even to identical values, gives a new xmin and ctid."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xmin::text, ctid::text, int_cores, int_gpus FROM subscription WHERE pk_subscription = %s",
            [subscription.pk],
        )
        return cursor.fetchone()


def drift(subscription: Subscription, *, cores: int, gpus: int = 0) -> None:
    Subscription.objects.filter(pk=subscription.pk).update(int_cores=cores, int_gpus=gpus)


@pytest.fixture
def two_farms():
    cuebot, managed = build_farm(managed=False), build_farm(managed=True)
    cuebot.add_proc(cores=250, gpus=1)
    cuebot.add_proc(cores=100)
    cuebot.add_proc(cores=400, local=True)  # local procs never count against a subscription
    managed.add_proc(cores=300)
    return cuebot, managed


def test_fixes_drifted_cuebot_rows_and_never_writes_scheduler_managed_ones(two_farms):
    cuebot, managed = two_farms
    drift(cuebot.subscription, cores=9900, gpus=5)
    drift(managed.subscription, cores=-200, gpus=3)  # drifted too, but the scheduler owns it
    managed_before = row_version(managed.subscription)

    result = recalculate_subs()

    assert result.ran
    assert [(c.show, c.old_cores, c.new_cores, c.old_gpus, c.new_gpus) for c in result.changes] == [
        (cuebot.show.str_name, 9900, 350, 5, 1)
    ]
    assert row_version(cuebot.subscription)[2:] == (350, 1)
    assert row_version(managed.subscription) == managed_before  # byte-for-byte, same tuple


def test_allocation_comes_from_the_procs_host(two_farms):
    cuebot, _ = two_farms
    with as_cuebot():
        other_alloc = Alloc.objects.create(str_name=unique("alloc"), facility=cuebot.alloc.facility, str_tag="gpu")
        other_sub = Subscription.objects.create(show=cuebot.show, alloc=other_alloc, int_size=100, int_burst=100)
        host = Host.objects.create(
            alloc=other_alloc,
            str_name=unique("host"),
            str_lock_state="OPEN",
            int_cores=800,
            int_cores_idle=800,
            int_mem=1 << 26,
            int_mem_idle=1 << 26,
        )
        cuebot.add_proc(cores=200, host=host)
    drift(other_sub, cores=0)
    drift(cuebot.subscription, cores=0)
    recalculate_subs()
    assert row_version(other_sub)[2:] == (200, 0)
    assert row_version(cuebot.subscription)[2:] == (350, 1)


def test_rows_already_right_are_not_rewritten(two_farms):
    cuebot, _ = two_farms
    before = row_version(cuebot.subscription)
    assert recalculate_subs().changes == []
    assert row_version(cuebot.subscription) == before


def test_dry_run_prints_old_and_new_in_cores_and_writes_nothing(two_farms, capsys):
    cuebot, managed = two_farms
    drift(cuebot.subscription, cores=1000)
    drift(managed.subscription, cores=0)
    before = row_version(cuebot.subscription)
    call_command("recalculate_subs", "--dry-run")
    out = capsys.readouterr().out
    assert f"{cuebot.show.str_name} / {cuebot.alloc.str_name}: 10 cores → 3.5 cores, gpus 0 → 1" in out
    assert managed.show.str_name not in out
    assert "1 subscription row(s) would change" in out
    assert row_version(cuebot.subscription) == before


def test_command_applies_the_changes(two_farms, capsys):
    cuebot, _ = two_farms
    drift(cuebot.subscription, cores=0)
    call_command("recalculate_subs")
    assert "1 subscription row(s) changed" in capsys.readouterr().out
    assert row_version(cuebot.subscription)[2:] == (350, 1)


def test_two_concurrent_runs_do_not_both_run(two_farms, monkeypatch):
    cuebot, _ = two_farms
    drift(cuebot.subscription, cores=0)
    inside, proceed = threading.Event(), threading.Event()
    real_drift = recalculate_subs_module._drift

    def held_inside(*, dry_run: bool, every_show: bool, pg_lock: bool):
        inside.set()
        assert proceed.wait(10)
        return real_drift(dry_run=dry_run, every_show=every_show, pg_lock=pg_lock)

    monkeypatch.setattr(recalculate_subs_module, "_drift", held_inside)
    results = {}

    def first_run():
        try:
            results["first"] = recalculate_subs()
        finally:
            connection.close()

    thread = threading.Thread(target=first_run)
    thread.start()
    assert inside.wait(10)
    # While the first run holds it, the lease is visible and expires on its own if the holder dies.
    (lock,) = [held for held in held_locks() if held.name == RECALCULATE_SUBS_LOCK]
    assert 0 < lock.ttl_ms <= LEASE_SECONDS * 1000
    second = recalculate_subs()
    proceed.set()
    thread.join(10)

    assert second.ran is False and second.changes == []
    assert results["first"].ran is True and len(results["first"].changes) == 1
    assert row_version(cuebot.subscription)[2:] == (350, 1)
    assert held_locks() == []


def test_a_show_switched_to_the_scheduler_during_a_run_is_not_written(two_farms, monkeypatch):
    """The toggle holds the show row; the run waits for it, then sees the show as scheduler-managed."""
    from django.db import transaction

    from accounting.ownership import switching
    from accounting.ownership.toggle import set_scheduler_managed

    monkeypatch.setattr(switching, "seed_show", lambda *, show_id: None)
    cuebot, _ = two_farms
    drift(cuebot.subscription, cores=0)
    before = row_version(cuebot.subscription)
    toggled, commit = threading.Event(), threading.Event()
    results = {}

    def toggle():
        try:
            with transaction.atomic():
                set_scheduler_managed(show=cuebot.show, managed=True)
                toggled.set()
                assert commit.wait(10)
        finally:
            connection.close()

    def run():
        try:
            results["run"] = recalculate_subs()
        finally:
            connection.close()

    toggler, runner = threading.Thread(target=toggle), threading.Thread(target=run)
    toggler.start()
    assert toggled.wait(10)
    runner.start()
    # Wait (bounded) until the run is blocked on the toggle's row lock, then let the toggle commit.
    # Other sessions' queries show in pg_stat_activity to the superuser only.
    with as_cuebot(), connection.cursor() as cursor:
        for _ in range(1000):
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                ["%cuebot_shows%"],
            )
            if cursor.fetchone()[0]:
                break
            threading.Event().wait(0.01)
        else:
            pytest.fail("recalculate_subs never waited for the toggle's lock")
    commit.set()
    toggler.join(10)
    runner.join(10)
    assert results["run"].ran and results["run"].changes == []
    assert row_version(cuebot.subscription) == before


# Cuebot's own show-aware recalculate_subs(), written here from its documented behaviour to
# compare against: every Cuebot-managed subscription zeroed, then each (show, alloc) with
# non-local procs set to their sum, the burst moved to that sum in the same UPDATE (past the
# burst check) and put back afterwards.
CUEBOT_RECALCULATE_SUBS = """
CREATE FUNCTION pg_temp.cuebot_recalculate_subs() RETURNS void AS $$
DECLARE
    r RECORD;
    kept_burst bigint;
BEGIN
    UPDATE subscription SET int_cores = 0, int_gpus = 0
     WHERE pk_show IN (SELECT pk_show FROM show WHERE NOT b_scheduler_managed);
    FOR r IN SELECT p.pk_show, h.pk_alloc, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
               FROM proc p JOIN host h ON h.pk_host = p.pk_host JOIN show s ON s.pk_show = p.pk_show
              WHERE NOT p.b_local AND NOT s.b_scheduler_managed
              GROUP BY p.pk_show, h.pk_alloc LOOP
        SELECT int_burst INTO kept_burst FROM subscription WHERE pk_show = r.pk_show AND pk_alloc = r.pk_alloc;
        UPDATE subscription SET int_cores = r.cores, int_gpus = r.gpus, int_burst = r.cores
         WHERE pk_show = r.pk_show AND pk_alloc = r.pk_alloc;
        UPDATE subscription SET int_burst = kept_burst WHERE pk_show = r.pk_show AND pk_alloc = r.pk_alloc;
    END LOOP;
END;
$$ LANGUAGE plpgsql
"""


class Undo(Exception):
    pass


def subscription_rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pk_subscription, int_cores, int_gpus, int_burst, float_tier FROM subscription ORDER BY 1"
        )
        return cursor.fetchall()


def after(run) -> list[tuple]:
    """The subscription rows after `run`, which is then undone."""
    from django.db import transaction

    try:
        with transaction.atomic():
            run()
            rows = subscription_rows()
            raise Undo
    except Undo:
        return rows


def test_equals_cuebots_own_recalculate_subs_on_the_same_data(two_farms):
    cuebot, managed = two_farms
    lowered = build_farm(managed=False, size=100, burst=400)
    lowered.add_proc(cores=300)
    Subscription.objects.filter(pk=lowered.subscription.pk).update(int_burst=200)  # an operator lowered it below use
    fresh = build_farm(managed=False)  # never updated since its INSERT: no tier yet
    drift(cuebot.subscription, cores=9900, gpus=5)
    drift(lowered.subscription, cores=0)
    with connection.cursor() as cursor:
        cursor.execute(CUEBOT_RECALCULATE_SUBS)

    ours = after(recalculate_subs)
    cuebots = after(lambda: connection.cursor().execute("SELECT pg_temp.cuebot_recalculate_subs()"))

    assert ours == cuebots
    assert (lowered.subscription.pk, 300, 0, 200) in [row[:4] for row in ours]
    assert fresh.subscription.pk in [row[0] for row in ours]


@pytest.mark.django_db(transaction=True)
def test_one_row_that_cannot_be_fixed_does_not_block_the_others(two_farms, capsys):
    """A sum beyond int_cores' integer range is refused by PostgreSQL for that row alone."""
    cuebot, _ = two_farms
    huge = build_farm(managed=False, size=10**12, burst=10**12, host_cores=10**12)
    with as_cuebot(), connection.cursor() as cursor:  # as a scheduler booking would insert it: no recompute
        cursor.execute(
            "INSERT INTO frame (pk_frame, pk_layer, pk_job, str_name, str_state, int_number, int_layer_order) "
            "VALUES ('f-huge', %s, %s, 'huge', 'RUNNING', 1, 0)",
            [huge.layer.id, huge.job.id],
        )
        cursor.execute(
            "INSERT INTO proc (pk_proc, pk_host, pk_job, pk_show, pk_layer, pk_frame, int_cores_reserved, "
            "int_mem_reserved) VALUES ('p-huge', %s, %s, %s, %s, 'f-huge', %s, 1)",
            [huge.host.id, huge.job.id, huge.show.id, huge.layer.id, 3 * 10**9],
        )
    drift(cuebot.subscription, cores=0)

    with pytest.raises(CommandError):
        call_command("recalculate_subs")

    assert row_version(cuebot.subscription)[2:] == (350, 1)
    assert row_version(huge.subscription)[2:] == (0, 0)
    assert f"subscription {huge.subscription.pk} left as it was: integer out of range" in capsys.readouterr().err


def test_maestro_era_fixes_scheduler_managed_shows_too_without_redis(maestro_era, two_farms, capsys):
    cuebot, managed = two_farms
    drift(cuebot.subscription, cores=9900, gpus=5)
    drift(managed.subscription, cores=-200, gpus=3)

    call_command("recalculate_subs", "--dry-run")
    assert (
        f"{managed.show.str_name} / {managed.alloc.str_name}: -2 cores → 3 cores, gpus 3 → 0" in capsys.readouterr().out
    )
    result = recalculate_subs()

    assert result.ran
    assert sorted((c.show, c.old_cores, c.new_cores) for c in result.changes) == sorted(
        [(cuebot.show.str_name, 9900, 350), (managed.show.str_name, -200, 300)]
    )
    assert row_version(managed.subscription)[2:] == (300, 0)
    assert row_version(cuebot.subscription)[2:] == (350, 1)


def test_notify_era_fixes_cuebot_managed_shows_only_without_redis(notify_era, two_farms):
    cuebot, managed = two_farms
    drift(cuebot.subscription, cores=9900, gpus=5)
    drift(managed.subscription, cores=-200, gpus=3)  # its scheduler's record, as in the redis era
    managed_before = row_version(managed.subscription)
    result = recalculate_subs()
    assert result.ran and [(c.show, c.old_cores, c.new_cores) for c in result.changes] == [
        (cuebot.show.str_name, 9900, 350)
    ]
    assert row_version(managed.subscription) == managed_before


@pytest.mark.parametrize("era", ["maestro", "notify"])
def test_without_an_accounting_redis_a_run_skips_while_another_holds_the_lock(era, request, two_farms):
    """The lock is PostgreSQL's where there is no Redis lease to take."""
    request.getfixturevalue(f"{era}_era")
    cuebot, managed = two_farms
    drifted = managed if era == "maestro" else cuebot  # a row this era's run writes
    drift(drifted.subscription, cores=0)
    outcome = []

    def run_elsewhere():
        try:
            outcome.append(recalculate_subs())
        finally:
            connection.close()

    with connection.cursor() as cursor:  # another instance's run holds the lock
        cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [RECALCULATE_SUBS_LOCK])
        thread = threading.Thread(target=run_elsewhere)
        thread.start()
        thread.join()
        cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [RECALCULATE_SUBS_LOCK])
    assert not outcome[0].ran
    assert row_version(drifted.subscription)[2:] == (0, 0)
    assert (
        recalculate_subs().ran
        and row_version(drifted.subscription)[2:] == {"maestro": (300, 0), "notify": (350, 1)}[era]
    )
