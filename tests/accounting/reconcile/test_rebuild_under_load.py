"""Rebuilds and reseeds that finish while procs keep being released (issue 19, item 2).

A release lands inside the reseed's window here on purpose, every attempt: the snapshot is
read, then a proc is released (its registration and publish run as in service), then the
write. Under the compare-and-swap alone each such release made the write miss, so at a
steady release rate a rebuild never finished and the keys stayed closed.
"""

import pytest

from accounting.live import keys
from accounting.reconcile import reseed as reseed_module
from accounting.reconcile.redis_against_pg import drift_report
from accounting.reconcile.reseed import bootstrap_if_empty, reseed_booked, seed_show
from accounting.release.unbook import unbook_proc
from tests.farms import build_farm

pytestmark = pytest.mark.django_db(transaction=True)


def release_inside_every_window(monkeypatch, procs: list) -> list:
    """After the snapshot's first row is read (the SQL snapshot is taken), release a proc."""
    real_rows = reseed_module.booked_rows
    released = []

    def rows(*, show_ids):
        snapshot = real_rows(show_ids=show_ids)
        first = next(snapshot, None)
        if procs:
            released.append(unbook_proc(proc_id=procs.pop().id))
        if first is not None:
            yield first
        yield from snapshot

    monkeypatch.setattr(reseed_module, "booked_rows", rows)
    monkeypatch.setattr(reseed_module, "backoff_seconds", lambda *, attempt: 0)
    return released


def sub_cores(acct_redis, farm) -> int:
    return int(acct_redis.hget(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "int_cores"))


def test_the_rebuild_of_an_empty_redis_finishes_first_time_with_releases_in_its_window(acct_redis, monkeypatch):
    farm = build_farm(managed=True)
    procs = [farm.add_proc(cores=300) for _ in range(5)]
    released = release_inside_every_window(monkeypatch, procs)

    assert bootstrap_if_empty(wait=lambda seconds: None)

    assert len(released) == 1  # one attempt: its window saw a release and it still wrote
    assert acct_redis.exists(keys.SEEDED)
    # The snapshot counted the proc released after it: high by its 3 cores, never low.
    assert sub_cores(acct_redis, farm) == 5 * 3
    assert all(row.difference >= 0 for row in drift_report(show_ids=[farm.show.id]).rows)


def test_a_key_opened_by_someone_else_during_the_rebuild_is_left_to_them(acct_redis, monkeypatch):
    """A show switched meanwhile is seeded by its own reseed (journal mode); the rebuild, which
    writes closed keys only, must not overwrite a key that may already be booked."""
    farm = build_farm(managed=True)
    farm.add_proc(cores=300)
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    real_rows = reseed_module.booked_rows

    def rows(*, show_ids):
        acct_redis.hset(sub, mapping={"burst": 200, "size": 100, "int_cores": 9})  # opened and booked meanwhile
        yield from real_rows(show_ids=show_ids)

    monkeypatch.setattr(reseed_module, "booked_rows", rows)
    assert bootstrap_if_empty(wait=lambda seconds: None)
    assert acct_redis.hget(sub, "int_cores") == "9"
    assert acct_redis.hget(keys.job(job_id=farm.job.id), "int_cores") == "3"


def test_without_a_reseeder_blind_to_inflight_releases_do_not_make_a_reseed_retry(acct_redis, monkeypatch, settings):
    settings.ACCOUNTING_SCHEDULER_RESEEDS = False  # only this project's reseeds run
    farm = build_farm(managed=True)
    procs = [farm.add_proc(cores=200) for _ in range(4)]
    seed_show(show_id=farm.show.id)
    released = release_inside_every_window(monkeypatch, procs)

    outcome = reseed_booked(show_ids=[farm.show.id])

    assert (outcome.written, outcome.attempts) == (True, 1) and len(released) == 1
    assert sub_cores(acct_redis, farm) >= 3 * 2  # three procs run; the fourth was released in the window


def test_where_the_scheduler_reseeds_too_releases_bump_the_sequence_for_its_cas_and_ours_writes_at_once(
    acct_redis, monkeypatch, settings
):
    settings.ACCOUNTING_SCHEDULER_RESEEDS = True
    farm = build_farm(managed=True)
    procs = [farm.add_proc(cores=200) for _ in range(4)]
    seed_show(show_id=farm.show.id)
    seq = int(acct_redis.get(keys.SEQ) or 0)
    released = release_inside_every_window(monkeypatch, procs)

    outcome = reseed_booked(show_ids=[farm.show.id], max_attempts=8)

    # The release in the window bumped acct:seq (a compare-and-swap on it would retry); this
    # project's reseed does not compare it and writes on its first attempt, never low.
    assert (outcome.written, outcome.attempts) == (True, 1) and len(released) == 1
    assert int(acct_redis.get(keys.SEQ)) == seq + 2  # its registration and its publish
    assert sub_cores(acct_redis, farm) >= 3 * 2
