"""Reseeds against the real PostgreSQL and Redis: values, refused writes, the in-flight registry and the settle journal."""

import uuid

import pytest
from django.db import connection

from accounting.live import keys
from accounting.live.booking import book, settle
from accounting.reconcile import reseed as reseed_module
from accounting.reconcile.reseed import (
    ReseedSkipped,
    bootstrap_if_empty,
    redis_is_empty,
    reseed,
    reseed_booked,
    seed_show,
)
from accounting.release.unbook import unbook_proc
from infra.metrics import RESEED_SKIPPED, RESEED_WRITES_REFUSED
from infra.redis_factory import accounting_redis
from tests.farms import build_farm
from tests.redis_topology import redis_server


def ids(farm) -> dict:
    return dict(
        show_id=farm.show.id,
        alloc_id=farm.alloc.id,
        folder_id=farm.folder.id,
        job_id=farm.job.id,
        layer_id=farm.layer.id,
        dept_id=farm.dept.id,
    )


def sub_key(farm) -> str:
    return keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)


def cores(acct_redis, key: str) -> int:
    return int(acct_redis.hget(key, "int_cores") or 0)


@pytest.mark.django_db
def test_seed_show_writes_limits_and_booked_counters_converted_per_proc(farm, acct_redis):
    farm.add_proc(cores=250, gpus=1)
    farm.add_proc(cores=250)
    farm.add_proc(cores=400, local=True)
    finished_job, finished_layer = farm.add_job(state="FINISHED")
    farm.add_proc(cores=800, layer=finished_layer)
    seed_show(show_id=farm.show.id)

    # 2 + 2 cores (per proc), not 5; the local proc left out. The finished job's proc still
    # runs, so it counts (8 cores) until it is released, on its own job and layer too.
    for key in (keys.job(job_id=farm.job.id), keys.layer(layer_id=farm.layer.id)):
        assert acct_redis.hmget(key, "int_cores", "int_gpus") == ["4", "1"], key
    for key in (
        sub_key(farm),
        keys.folder(folder_id=farm.folder.id),
        keys.point(dept_id=farm.dept.id, show_id=farm.show.id),
    ):
        assert acct_redis.hmget(key, "int_cores", "int_gpus") == ["12", "1"], key
    assert acct_redis.hmget(keys.layer(layer_id=finished_layer.id), "int_cores", "int_gpus") == ["8", "0"]
    assert acct_redis.hmget(sub_key(farm), "size", "burst") == ["100", "200"]
    assert acct_redis.hmget(
        keys.folder(folder_id=farm.folder.id), "int_min_cores", "int_max_cores", "int_max_gpus"
    ) == ["0", "-1", "-1"]
    assert acct_redis.hmget(keys.job(job_id=farm.job.id), "int_max_cores", "int_max_gpus", "int_priority") == [
        "100",
        "100",
        "1",
    ]
    assert acct_redis.hmget(
        keys.point(dept_id=farm.dept.id, show_id=farm.show.id), "int_min_cores", "int_min_gpus"
    ) == ["0", "0"]
    # A finished job gets no limits (the scheduler books nothing for it), only its count.
    assert acct_redis.hgetall(keys.job(job_id=finished_job.id)) == {"int_cores": "8", "int_gpus": "0"}


@pytest.mark.django_db
def test_release_and_reseed_agree_on_a_250_centicore_proc(farm, acct_redis):
    assert bootstrap_if_empty(wait=no_wait)
    assert book(**ids(farm), cores=250, gpus=0).ok
    farm.add_proc(cores=250)
    reseed(show_ids=[farm.show.id])
    assert cores(acct_redis, sub_key(farm)) == 2
    # The release publishes the same per-proc conversion: back to exactly zero.
    book(**ids(farm), cores=-250, gpus=0, force=True)
    assert cores(acct_redis, sub_key(farm)) == 0


@pytest.mark.django_db
def test_drained_stale_high_key_is_reset_to_zero(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    acct_redis.hset(sub_key(farm), "int_cores", 37)  # a lost decrement, and no procs left
    acct_redis.hset(keys.job(job_id=farm.job.id), "int_gpus", 3)
    assert reseed_booked(show_ids=[farm.show.id]).written
    assert cores(acct_redis, sub_key(farm)) == 0
    assert acct_redis.hget(keys.job(job_id=farm.job.id), "int_gpus") == "0"


@pytest.mark.django_db
def test_only_the_given_shows_are_touched(farm, acct_redis):
    other = build_farm(managed=True)
    acct_redis.hset(sub_key(other), "int_cores", 9)
    seed_show(show_id=farm.show.id)
    assert cores(acct_redis, sub_key(other)) == 9


@pytest.mark.django_db
def test_cycle_skipped_when_every_write_is_refused(farm, acct_redis, monkeypatch):
    """The journal no longer reaches back to the reseed's beginning (trimmed, as after 20,000
    settles), on every attempt: nothing is written, the cycle is skipped and counted."""
    seed_show(show_id=farm.show.id)
    acct_redis.hset(sub_key(farm), "int_cores", 37)
    real_rows = reseed_module.booked_rows

    def rows_after_the_journal_was_trimmed(*, show_ids):
        settled = int(acct_redis.get(keys.SETTLED_SEQ) or 0)
        acct_redis.set(keys.SETTLED_SEQ, settled + 30000)  # 30,000 settles since the reseed began...
        acct_redis.delete(keys.SETTLED)  # ...and the journal keeps none of those it needs
        yield from real_rows(show_ids=show_ids)

    monkeypatch.setattr(reseed_module, "booked_rows", rows_after_the_journal_was_trimmed)
    monkeypatch.setattr(reseed_module, "backoff_seconds", lambda *, attempt: 0)
    before = RESEED_SKIPPED.labels(scope="farm")._value.get()
    refused = RESEED_WRITES_REFUSED._value.get()
    outcome = reseed_booked(show_ids=[farm.show.id], max_attempts=3)
    assert (outcome.written, outcome.attempts) == (False, 3)
    assert RESEED_SKIPPED.labels(scope="farm")._value.get() == before + 1
    assert RESEED_WRITES_REFUSED._value.get() == refused + 3
    assert cores(acct_redis, sub_key(farm)) == 37  # nothing overwritten


@pytest.mark.django_db
def test_a_redis_restarted_since_the_reseed_began_refuses_its_write(settings, fresh_accounting_client, monkeypatch):
    """kill -9 and an empty server on the same port between the reseed's beginning and its
    write: the write is refused (another replication id), the next attempt writes."""
    farm = build_farm(managed=True)
    farm.add_proc(cores=500)
    with redis_server() as server:
        settings.ACCOUNTING_REDIS_URL = server.url()
        accounting_redis.cache_clear()
        real_rows = reseed_module.booked_rows
        restarts = []

        def rows_across_a_restart(*, show_ids):
            if not restarts:
                server.restart()
                accounting_redis.cache_clear()
                restarts.append(1)
            yield from real_rows(show_ids=show_ids)

        monkeypatch.setattr(reseed_module, "booked_rows", rows_across_a_restart)
        monkeypatch.setattr(reseed_module, "backoff_seconds", lambda *, attempt: 0)
        refused = RESEED_WRITES_REFUSED._value.get()
        outcome = reseed_booked(show_ids=[farm.show.id])
        assert (outcome.written, outcome.attempts) == (True, 2)
        assert RESEED_WRITES_REFUSED._value.get() == refused + 1
        with server.client(decode_responses=True) as client:
            assert client.hget(sub_key(farm), "int_cores") == "5"


def new_pg_connection():
    """A second PostgreSQL session, for a transaction left open across the reseed."""
    return connection.get_new_connection(connection.get_connection_params())


def insert_proc_sql(farm, *, centicores: int) -> tuple[str, dict]:
    return (
        "INSERT INTO proc (pk_proc, pk_host, pk_job, pk_show, pk_layer, int_cores_reserved, int_mem_reserved) "
        "VALUES (%(id)s, %(host)s, %(job)s, %(show)s, %(layer)s, %(cores)s, 1024)",
        dict(
            id=str(uuid.uuid4()),
            host=farm.host.id,
            job=farm.job.id,
            show=farm.show.id,
            layer=farm.layer.id,
            cores=centicores,
        ),
    )


def test_a_booking_settled_during_the_reseed_is_added_from_the_journal(farm, acct_redis, monkeypatch):
    """The reference trace: a booking runs its script, commits its proc and settles after the
    reseed's snapshot was read and before its write. Neither the snapshot nor the in-flight
    registry holds it any more; the settle journal does, and the first attempt writes it.
    (Without the journal the key would read 5: low by the running 3-core proc.)"""
    farm.add_proc(cores=500)
    seed_show(show_id=farm.show.id)
    real_rows = reseed_module.booked_rows

    def snapshot_then_a_booking(*, show_ids):
        rows = list(real_rows(show_ids=show_ids))  # the snapshot is read: the proc below is not in it
        op = uuid.uuid4().hex
        assert book(**ids(farm), cores=300, gpus=0, op_id=op).ok
        farm.add_proc(cores=300)
        settle(op_id=op)
        yield from rows

    monkeypatch.setattr(reseed_module, "booked_rows", snapshot_then_a_booking)
    outcome = reseed_booked(show_ids=[farm.show.id])
    assert (outcome.written, outcome.attempts) == (True, 1)
    assert cores(acct_redis, sub_key(farm)) == 8  # 5 from the snapshot, 3 from the journal
    assert acct_redis.llen(keys.SETTLED) == 1


def test_a_booking_settled_before_the_reseed_began_is_not_added_again(farm, acct_redis):
    op = uuid.uuid4().hex
    seed_show(show_id=farm.show.id)
    assert book(**ids(farm), cores=300, gpus=0, op_id=op).ok
    farm.add_proc(cores=300)
    settle(op_id=op)
    assert reseed_booked(show_ids=[farm.show.id]).written
    assert cores(acct_redis, sub_key(farm)) == 3  # the snapshot's; the journal adds only what settled since


@pytest.mark.django_db(transaction=True)
def test_straddle_race_is_closed_by_the_in_flight_registry(acct_redis):
    """Lessons item 4: the booking's Lua has run (seq bumped) but its proc INSERT is still in
    an open transaction when the reseed reads seq, runs SUM(proc) and CASes. The snapshot
    misses the proc; the in-flight entry adds it back, so the counter stays right."""
    farm = build_farm(managed=True)
    seed_show(show_id=farm.show.id)
    op = uuid.uuid4().hex
    assert book(**ids(farm), cores=400, gpus=0, op_id=op).ok
    inserting = new_pg_connection()
    try:
        sql, params = insert_proc_sql(farm, centicores=400)
        inserting.execute(sql, params)  # not committed yet
        assert reseed_booked(show_ids=[farm.show.id]).written
        assert cores(acct_redis, sub_key(farm)) == 4
        inserting.commit()
    finally:
        inserting.close()
    settle(op_id=op)
    assert cores(acct_redis, sub_key(farm)) == 4
    assert reseed_booked(show_ids=[farm.show.id]).written
    assert cores(acct_redis, sub_key(farm)) == 4


@pytest.mark.django_db(transaction=True)
def test_straddle_race_without_registration_reads_low(acct_redis):
    """The same schedule with a booking that registers no operation id: the reseed's CAS
    passes (seq was bumped before it was read) and erases the booking. This is why every
    booking of the hot path must carry an op id."""
    farm = build_farm(managed=True)
    seed_show(show_id=farm.show.id)
    assert book(**ids(farm), cores=400, gpus=0).ok
    inserting = new_pg_connection()
    try:
        sql, params = insert_proc_sql(farm, centicores=400)
        inserting.execute(sql, params)
        assert reseed_booked(show_ids=[farm.show.id]).written
        inserting.commit()
    finally:
        inserting.close()
    assert cores(acct_redis, sub_key(farm)) == 0  # LOW: one 4-core proc runs, Redis says none


@pytest.mark.django_db
def test_expired_in_flight_entry_is_purged_and_not_counted(farm, acct_redis, settings):
    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = 0  # expired as soon as written: control time, no sleep
    seed_show(show_id=farm.show.id)
    assert book(**ids(farm), cores=400, gpus=0, op_id=uuid.uuid4().hex).ok
    assert reseed_booked(show_ids=[farm.show.id]).written
    assert cores(acct_redis, sub_key(farm)) == 0
    assert acct_redis.hlen(keys.INFLIGHT) == 0


def no_wait(seconds: float) -> None:
    """The bootstrap's in-flight wait, with time controlled by the test."""


@pytest.mark.django_db
def test_empty_redis_is_detected_and_rebuilt(farm, acct_redis):
    farm.add_proc(cores=250)
    cuebot = build_farm(managed=False)
    cuebot.add_proc(cores=100)
    assert redis_is_empty()
    assert bootstrap_if_empty(wait=no_wait)
    assert not redis_is_empty()
    assert cores(acct_redis, sub_key(farm)) == 2
    assert acct_redis.hget(sub_key(farm), "burst") == "200"
    assert not acct_redis.exists(sub_key(cuebot), keys.job(job_id=cuebot.job.id))
    assert not bootstrap_if_empty(wait=no_wait)


@pytest.mark.django_db(transaction=True)
def test_booking_straddling_a_restart_is_counted_by_the_bootstrap(acct_redis, settings):
    """The booking's script runs, Redis restarts (its in-flight entry goes), then its proc
    INSERT commits and it settles. The bootstrap keeps every key closed for one in-flight
    TTL, so the INSERT commits before the rebuild's SUM(proc), which counts it."""
    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = 7
    farm = build_farm(managed=True)
    farm.add_proc(cores=500)
    assert bootstrap_if_empty(wait=no_wait)
    op = uuid.uuid4().hex
    assert book(**ids(farm), cores=400, gpus=0, op_id=op).ok
    inserting = new_pg_connection()
    waited = []

    def the_insert_commits_during_the_wait(seconds: float) -> None:
        waited.append(seconds)
        closed = book(**ids(farm), cores=100, gpus=0, op_id=uuid.uuid4().hex)
        assert (closed.ok, closed.table) == (False, "subscription")  # no burst: nothing books meanwhile
        inserting.commit()
        settle(op_id=op)

    try:
        sql, params = insert_proc_sql(farm, centicores=400)
        inserting.execute(sql, params)  # not committed yet
        acct_redis.flushdb()  # Redis restarts
        assert bootstrap_if_empty(wait=the_insert_commits_during_the_wait)
    finally:
        inserting.close()
    assert waited == [7]
    assert cores(acct_redis, sub_key(farm)) == 9  # 5 + 4: the straddling booking is counted
    assert acct_redis.hget(sub_key(farm), "burst") == "200"


@pytest.mark.django_db
def test_settles_and_releases_on_an_empty_redis_do_not_hide_the_restart(
    farm, acct_redis, django_capture_on_commit_callbacks
):
    """Hot-path scripts recreate acct:seq on an empty Redis at once; the marker is what
    tells a rebuilt Redis from a restarted one."""
    released = farm.add_proc(cores=300)
    farm.add_proc(cores=200)
    assert bootstrap_if_empty(wait=no_wait)
    acct_redis.flushdb()
    settle(op_id=uuid.uuid4().hex)
    with django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=released.id)
    assert acct_redis.get(keys.SEQ) == "3"  # settle, prepare, release
    assert redis_is_empty()
    assert bootstrap_if_empty(wait=no_wait)
    assert cores(acct_redis, sub_key(farm)) == 2
    assert acct_redis.hget(sub_key(farm), "burst") == "200"


@pytest.mark.django_db
def test_a_restart_during_the_bootstrap_leaves_keys_closed_and_unmarked(farm, acct_redis):
    farm.add_proc(cores=200)
    with pytest.raises(ReseedSkipped):
        bootstrap_if_empty(wait=lambda seconds: acct_redis.flushdb())
    assert not acct_redis.hexists(sub_key(farm), "burst")  # counters written, limits refused
    assert redis_is_empty()
    assert bootstrap_if_empty(wait=no_wait)
    assert acct_redis.hmget(sub_key(farm), "int_cores", "burst") == ["2", "200"]


@pytest.mark.django_db
def test_a_restart_during_the_wait_starts_the_bootstrap_over_at_once(farm, acct_redis, settings):
    """Redis restarts again while the bootstrap keeps the keys closed, dropping its token. The
    bootstrap starts over within the same call, keeps the keys closed for a whole new TTL (that
    restart may have lost in-flight entries too), then opens them; it used to retry a write the
    dropped token refuses every time and give up, leaving the keys closed until the next check."""
    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = 4
    farm.add_proc(cores=300)
    waited = []

    def restarts_during_the_first_wait(seconds: float) -> None:
        waited.append(seconds)
        if len(waited) == 1:
            acct_redis.flushdb()
            return
        closed = book(**ids(farm), cores=100, gpus=0, op_id=uuid.uuid4().hex)
        assert (closed.ok, closed.table) == (False, "subscription")  # still closed after the restart

    assert bootstrap_if_empty(wait=restarts_during_the_first_wait)
    assert waited == [4, 4]
    assert acct_redis.hmget(sub_key(farm), "int_cores", "burst") == ["3", "200"]
    assert not redis_is_empty()


@pytest.mark.django_db
def test_a_bootstrap_whose_token_another_rebuild_took_leaves_it_to_that_one(farm, acct_redis):
    farm.add_proc(cores=300)
    waited = []

    def another_rebuild_begins(seconds: float) -> None:
        waited.append(seconds)
        acct_redis.set(keys.BOOTSTRAPPING, "another")

    with pytest.raises(ReseedSkipped):
        bootstrap_if_empty(wait=another_rebuild_begins)
    assert len(waited) == 1  # no second round: the other rebuild waits and finishes
    assert acct_redis.get(keys.BOOTSTRAPPING) == "another"
    assert not acct_redis.hexists(sub_key(farm), "burst") and redis_is_empty()


@pytest.mark.django_db
def test_a_reseed_with_limits_on_an_empty_redis_is_the_bootstrap(farm, acct_redis, monkeypatch, settings):
    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = 5
    waited = []
    monkeypatch.setattr(reseed_module, "inflight_wait", waited.append)
    farm.add_proc(cores=300)
    assert not reseed(limits=False, booked=True).bootstrapped  # counters only: keys stay closed
    assert not acct_redis.hexists(sub_key(farm), "burst") and redis_is_empty()
    report = reseed(show_ids=[farm.show.id])
    assert report.bootstrapped and waited == [5]
    assert acct_redis.hmget(sub_key(farm), "int_cores", "burst") == ["3", "200"]
    assert not redis_is_empty()
    assert not reseed().bootstrapped and waited == [5]


@pytest.mark.django_db
def test_limits_are_written_even_when_the_booked_cycle_is_skipped(farm, acct_redis, monkeypatch):
    assert bootstrap_if_empty(wait=no_wait)
    acct_redis.hdel(sub_key(farm), "burst")
    monkeypatch.setattr(reseed_module, "backoff_seconds", lambda *, attempt: 0)
    real_rows = reseed_module.booked_rows

    def rows_after_the_journal_was_trimmed(*, show_ids):  # on every attempt
        acct_redis.incrby(keys.SETTLED_SEQ, 30000)
        acct_redis.delete(keys.SETTLED)
        yield from real_rows(show_ids=show_ids)

    monkeypatch.setattr(reseed_module, "booked_rows", rows_after_the_journal_was_trimmed)
    report = reseed(show_ids=[farm.show.id])
    assert not report.booked.written and report.limit_fields > 0
    assert acct_redis.hget(sub_key(farm), "burst") == "200"
