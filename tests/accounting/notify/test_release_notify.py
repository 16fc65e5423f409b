"""acct_release as the NOTIFY-era scheduler hears it, on a real LISTEN connection: what Cuebot's
ProcDaoJdbc.procDestroyed sends for the same proc, inside the release transaction, and nothing
from work that rolls back or that the scheduler must not hear."""

import pytest
from django.db import transaction

from accounting.live import keys
from accounting.notify.listen import decode
from accounting.notify.payloads import RELEASE
from accounting.release.unbook import unbook_proc, unbook_procs
from infra import metrics
from tests.accounting.pg import protocol_exchanges, release_refused_at_commit
from tests.accounting.release.test_unbook import hashes, seed_keys
from tests.farms import build_farm
from tests.service_role import as_cuebot

pytestmark = pytest.mark.usefixtures("notify_on")


def cuebot_payload(farm, *, cores: int, gpus: int, layer=None) -> str:
    """Cuebot's String.format of the release payload, for this farm's proc."""
    return '{"show":"%s","alloc":"%s","folder":"%s","job":"%s","layer":"%s","dept":"%s","cores":%d,"gpus":%d}' % (
        farm.show.id,
        farm.alloc.id,
        farm.folder.id,
        farm.job.id,
        (layer or farm.layer).id,
        farm.dept.id,
        cores,
        gpus,
    )


def test_a_scheduler_managed_release_is_heard_once_as_cuebot_sends_it(ear):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=400, gpus=1)
    unbook_proc(proc_id=proc.id)
    assert ear.collect() == [(RELEASE, cuebot_payload(farm, cores=-4, gpus=-1))]


def test_a_fractional_reservation_is_truncated_toward_zero_per_proc(ear):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=150)
    unbook_proc(proc_id=proc.id)
    assert ear.collect() == [(RELEASE, cuebot_payload(farm, cores=-1, gpus=0))]


def test_a_batch_of_identical_procs_delivers_every_decrement(ear):
    """PostgreSQL would fold two identical payloads of one transaction into one delivery."""
    farm = build_farm(managed=True)
    procs = [farm.add_proc(cores=250, gpus=1) for _ in range(3)]
    other_job, other_layer = farm.add_job()
    other = farm.add_proc(cores=100, layer=other_layer)
    unbook_procs(proc_ids=[p.id for p in procs] + [other.id])

    got = ear.collect()
    assert sorted(got) == sorted(
        [
            (RELEASE, cuebot_payload(farm, cores=-6, gpus=-3)),  # 3 x (2.5 cores -> 2), summed
            (RELEASE, cuebot_payload(farm, cores=-1, gpus=0, layer=other_layer).replace(farm.job.id, other_job.id)),
        ]
    )
    assert all(decode(channel=c, payload=p).problem is None for c, p in got)


@pytest.mark.parametrize("kind", ["cuebot-managed", "local"])
def test_nothing_is_heard_for_what_the_scheduler_does_not_count(ear, kind):
    farm = build_farm(managed=kind == "local")
    proc = farm.add_proc(cores=200, local=kind == "local")
    assert unbook_proc(proc_id=proc.id) is not None
    assert ear.collect() == []


def test_nothing_is_heard_from_a_release_that_rolls_back(ear):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=200)
    with pytest.raises(RuntimeError), transaction.atomic():
        unbook_proc(proc_id=proc.id)
        raise RuntimeError("the caller's transaction fails after the release")
    assert ear.collect() == []


def test_nothing_is_heard_from_a_savepoint_that_rolls_back(ear):
    farm = build_farm(managed=True)
    rolled_back, kept = farm.add_proc(cores=200), farm.add_proc(cores=300)
    with transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            unbook_proc(proc_id=rolled_back.id)
            raise RuntimeError("the savepoint is rolled back")
        unbook_proc(proc_id=kept.id)
    assert ear.collect() == [(RELEASE, cuebot_payload(farm, cores=-3, gpus=0))]


def finished_jobs_proc():
    """A proc of a flagged show whose job is FINISHED (killed: Cuebot marks the job before its procs go)."""
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=200)
    with as_cuebot():
        farm.job.__class__.objects.filter(pk=farm.job.pk).update(str_state="FINISHED")
    return proc


def test_a_finished_jobs_release_is_withheld_so_the_store_stays_high(ear):
    """The scheduler's recompute leaves FINISHED jobs' procs out: once it has run, a decrement
    would take its store below SUM(proc). Withheld, the store stays high until the next one."""
    proc = finished_jobs_proc()
    before = metrics.NOTIFY_WITHHELD.labels(reason="job_finished")._value.get()
    unbook_proc(proc_id=proc.id)
    assert ear.collect() == []
    assert metrics.NOTIFY_WITHHELD.labels(reason="job_finished")._value.get() == before + 1


def test_the_redis_eras_rule_for_a_finished_job_has_no_part_in_this_era(ear, settings):
    """Withholding a FINISHED job's decrement from Redis (where the scheduler's own reseed runs)
    is the Redis era's rule: in the NOTIFY era, with no Redis, nothing is counted as left high there."""
    settings.ACCOUNTING_SCHEDULER_RESEEDS, settings.ACCOUNTING_SCHEDULER = True, "notify"
    proc = finished_jobs_proc()
    redis_left_high = metrics.RELEASE_WITHHELD.labels(reason="job_finished")._value.get()
    unbook_proc(proc_id=proc.id)
    assert ear.collect() == []
    assert metrics.RELEASE_WITHHELD.labels(reason="job_finished")._value.get() == redis_left_high


def test_a_release_whose_job_row_is_gone_is_withheld(ear):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=200)
    farm.delete_job_as_cuebot_does(job=farm.job)
    assert unbook_proc(proc_id=proc.id) is not None
    assert ear.collect() == []


def test_with_both_eras_on_redis_and_notify_both_carry_the_release(ear, acct_redis):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=200, gpus=1)
    names = seed_keys(acct_redis, farm, cores=5, gpus=2)
    unbook_proc(proc_id=proc.id)
    assert ear.collect() == [(RELEASE, cuebot_payload(farm, cores=-2, gpus=-1))]
    assert hashes(acct_redis, names) == {role: {"int_cores": "3", "int_gpus": "1"} for role in names}


def test_notify_alone_touches_no_redis(ear, acct_redis, settings):
    settings.ACCOUNTING_SCHEDULER = "notify"
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=200)
    unbook_proc(proc_id=proc.id)
    assert ear.collect() == [(RELEASE, cuebot_payload(farm, cores=-2, gpus=0))]
    assert acct_redis.get(keys.SEQ) is None and acct_redis.hgetall(keys.INFLIGHT) == {}


def test_notify_off_sends_nothing(ear, settings):
    settings.ACCOUNTING_SCHEDULER = "redis"
    farm = build_farm(managed=True)
    unbook_proc(proc_id=farm.add_proc(cores=200).id)
    assert ear.collect() == []


def test_the_notifications_metric_counts_at_commit(ear):
    farm = build_farm(managed=True)
    before = metrics.NOTIFICATIONS.labels(channel=RELEASE)._value.get()
    _, other_layer = farm.add_job()
    unbook_procs(proc_ids=[farm.add_proc(cores=100).id, farm.add_proc(cores=200, layer=other_layer).id])
    assert len(ear.collect()) == 2
    assert metrics.NOTIFICATIONS.labels(channel=RELEASE)._value.get() == before + 2


def test_a_release_that_is_its_own_transaction_sends_its_notification_with_its_commit(ear, settings):
    """BEGIN, the releasing statement (its answer read), then the notification and the COMMIT
    together: three waits on PostgreSQL, where one per statement would be four."""
    settings.ACCOUNTING_SCHEDULER = "notify"
    farm = build_farm(managed=True)
    unbook_proc(proc_id=farm.add_proc(cores=100).id)  # warm: the flag, the prepared statements
    assert len(ear.collect()) == 1
    proc = farm.add_proc(cores=400, gpus=1)

    exchanges = protocol_exchanges(lambda: unbook_proc(proc_id=proc.id))

    assert len(exchanges) == 3
    last_sent = " ".join(exchanges[-1][0])
    assert "acct_release" in last_sent and last_sent.index("acct_release") < last_sent.index("COMMIT")
    assert exchanges[-1][1][-1].startswith("ReadyForQuery I")  # the transaction is over
    assert ear.collect() == [(RELEASE, cuebot_payload(farm, cores=-4, gpus=-1))]


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_nothing_is_heard_or_counted_from_a_release_whose_commit_fails(ear, batch):
    farm = build_farm(managed=True)
    procs = [farm.add_proc(cores=200), farm.add_proc(cores=300)]
    heard = metrics.NOTIFICATIONS.labels(channel=RELEASE)._value.get()
    released = metrics.RELEASES.labels(branch="scheduler")._value.get()

    release_refused_at_commit(procs=procs, batch=batch)

    assert ear.collect() == []
    assert metrics.NOTIFICATIONS.labels(channel=RELEASE)._value.get() == heard
    assert metrics.RELEASES.labels(branch="scheduler")._value.get() == released
