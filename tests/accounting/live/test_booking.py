"""The booking script, through accounting.live.booking, against the real Redis."""

import uuid

import pytest

from accounting.live import keys
from accounting.live.booking import book, rollback, settle
from accounting.reconcile.reseed import seed_show

pytestmark = pytest.mark.django_db


def ids(farm) -> dict:
    return dict(
        show_id=farm.show.id,
        alloc_id=farm.alloc.id,
        folder_id=farm.folder.id,
        job_id=farm.job.id,
        layer_id=farm.layer.id,
        dept_id=farm.dept.id,
    )


def five_keys(farm) -> list[str]:
    return [
        keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id),
        keys.folder(folder_id=farm.folder.id),
        keys.job(job_id=farm.job.id),
        keys.layer(layer_id=farm.layer.id),
        keys.point(dept_id=farm.dept.id, show_id=farm.show.id),
    ]


def booked(acct_redis, key: str) -> tuple[int, int]:
    cores, gpus = acct_redis.hmget(key, "int_cores", "int_gpus")
    return int(cores or 0), int(gpus or 0)


def test_missing_burst_rejects_everything(farm, acct_redis):
    result = book(**ids(farm), cores=100, gpus=0)
    assert (result.ok, result.table, result.current, result.limit) == (False, "subscription", 0, 0)
    assert acct_redis.keys("acct:*") == []


def test_over_burst_rejects_with_structured_answer_and_changes_nothing(farm, acct_redis):
    seed_show(show_id=farm.show.id)  # burst 200 cores, job cap 100 cores
    sub = five_keys(farm)[0]
    acct_redis.hset(sub, "int_cores", 150)
    seq = acct_redis.get(keys.SEQ)
    before = {key: acct_redis.hgetall(key) for key in five_keys(farm)}
    result = book(**ids(farm), cores=5100, gpus=0)
    assert (result.ok, result.table, result.current, result.limit) == (False, "subscription", 150, 200)
    assert {key: acct_redis.hgetall(key) for key in five_keys(farm)} == before
    assert acct_redis.get(keys.SEQ) == seq


def test_job_and_folder_core_caps(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    result = book(**ids(farm), cores=10100, gpus=0)  # 101 cores > the job's 100
    assert (result.ok, result.table, result.current, result.limit, result.unit) == (False, "job", 0, 100, "cores")
    acct_redis.hset(five_keys(farm)[1], "int_max_cores", 50)
    result = book(**ids(farm), cores=5100, gpus=1)
    assert (result.ok, result.table, result.limit, result.unit) == (False, "folder", 50, "cores")


def test_force_bypasses_every_check(farm, acct_redis):
    result = book(**ids(farm), cores=100, gpus=1, force=True)
    assert result.ok and result.seq == 1
    assert all(booked(acct_redis, key) == (1, 1) for key in five_keys(farm))


def test_gpu_caps_of_folder_and_job(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    folder, job = five_keys(farm)[1], five_keys(farm)[2]
    acct_redis.hset(job, "int_max_gpus", 2)
    result = book(**ids(farm), cores=100, gpus=3)
    assert (result.ok, result.table, result.current, result.limit, result.unit) == (False, "job", 0, 2, "gpus")
    acct_redis.hset(folder, "int_max_gpus", 1)
    result = book(**ids(farm), cores=100, gpus=2)
    assert (result.ok, result.table, result.limit, result.unit) == (False, "folder", 1, "gpus")


def test_minus_one_is_unlimited(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    folder, job = five_keys(farm)[1], five_keys(farm)[2]
    acct_redis.hset(folder, mapping={"int_max_cores": -1, "int_max_gpus": -1})
    acct_redis.hset(job, mapping={"int_max_cores": -1, "int_max_gpus": -1})
    assert book(**ids(farm), cores=15000, gpus=50).ok


def test_gpu_cap_not_checked_when_gpu_delta_is_zero(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    job = five_keys(farm)[2]
    acct_redis.hset(job, mapping={"int_max_gpus": 1, "int_gpus": 5})  # already over its GPU cap
    assert book(**ids(farm), cores=100, gpus=0).ok


def test_booking_then_forced_negation_nets_to_zero(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    assert book(**ids(farm), cores=250, gpus=1).ok
    assert book(**ids(farm), cores=-250, gpus=-1, force=True).ok
    assert all(booked(acct_redis, key) == (0, 0) for key in five_keys(farm))


def test_in_flight_booking_settles_and_bumps_seq(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    op = uuid.uuid4().hex
    result = book(**ids(farm), cores=250, gpus=1, op_id=op)
    entry = acct_redis.hget(keys.INFLIGHT, op).split("|")
    assert entry[1:] == [part for key in five_keys(farm) for part in (key, "2", "1")]
    settle(op_id=op)
    assert acct_redis.hget(keys.INFLIGHT, op) is None
    assert int(acct_redis.get(keys.SEQ)) == result.seq + 1
    # Journalled for a reseed under way (reseed_write.lua), without its expiry.
    assert acct_redis.lrange(keys.SETTLED, 0, -1) == ["|".join(entry[1:])]
    assert acct_redis.get(keys.SETTLED_SEQ) == "1"


def test_the_settle_journal_keeps_the_newest_20000_entries(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    acct_redis.rpush(keys.SETTLED, *[f"old-{n}" for n in range(20000)])
    acct_redis.set(keys.SETTLED_SEQ, 20000)
    op = uuid.uuid4().hex
    book(**ids(farm), cores=100, gpus=0, op_id=op)
    settle(op_id=op)
    assert acct_redis.llen(keys.SETTLED) == 20000
    assert acct_redis.lindex(keys.SETTLED, 0) == "old-1" and acct_redis.lindex(keys.SETTLED, -1).startswith("acct:sub:")
    assert acct_redis.get(keys.SETTLED_SEQ) == "20001"  # counts every entry, kept or trimmed


def test_settling_an_entry_that_is_gone_journals_nothing(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    settle(op_id=uuid.uuid4().hex)  # expired and purged, or rolled back: not booked
    assert acct_redis.llen(keys.SETTLED) == 0 and acct_redis.get(keys.SETTLED_SEQ) is None


def test_rollback_undoes_a_live_booking_and_removes_its_entry(farm, acct_redis):
    seed_show(show_id=farm.show.id)
    op = uuid.uuid4().hex
    book(**ids(farm), cores=250, gpus=1, op_id=op)
    assert rollback(**ids(farm), cores=250, gpus=1, op_id=op).ok
    assert acct_redis.hlen(keys.INFLIGHT) == 0
    assert all(booked(acct_redis, key) == (0, 0) for key in five_keys(farm))


def test_rollback_of_an_unregistered_booking_changes_nothing(farm, acct_redis):
    """Lessons item 5: undo only what was done. No live entry, no decrement (Redis stays
    high at worst, which the reseed heals)."""
    seed_show(show_id=farm.show.id)
    result = rollback(**ids(farm), cores=250, gpus=1, op_id=uuid.uuid4().hex)
    assert (result.ok, result.table) == (False, "acct:inflight")
    assert all(booked(acct_redis, key) == (0, 0) for key in five_keys(farm))
