"""unbook_proc / unbook_procs against real PostgreSQL and Redis."""

import re
import tempfile
import threading

import psycopg
import pytest
from django.db import connection, connections, transaction

from accounting.live import keys
from accounting.lock_order import LOCK_ORDER
from accounting.models import (
    FolderResource,
    HostLocal,
    JobResource,
    LayerResource,
    Point,
    Proc,
    Subscription,
)
from accounting.reconcile import recompute
from accounting.release.eras import publishers_wrapped
from accounting.release.types import Branch, Release
from accounting.release.unbook import unbook_proc, unbook_procs
from infra.metrics import RELEASE_WITHHELD
from shows.models import Alloc, Host, HostStat, Job
from tests.accounting.pg import accounting_mismatches, protocol_exchanges, release_refused_at_commit
from tests.farms import build_farm, unique
from tests.service_role import as_cuebot


def seed_keys(client, farm, *, cores: int, gpus: int = 0) -> dict[str, str]:
    """Write the five hashes of the farm's proc keys as a reseed would, in cores."""
    names = farm_keys(farm)
    for name in names.values():
        client.hset(name, mapping={"int_cores": cores, "int_gpus": gpus})
    return names


def farm_keys(farm, *, layer=None, job=None) -> dict[str, str]:
    return {
        "sub": keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id),
        "folder": keys.folder(folder_id=farm.folder.id),
        "job": keys.job(job_id=(job or farm.job).id),
        "layer": keys.layer(layer_id=(layer or farm.layer).id),
        "point": keys.point(dept_id=farm.dept.id, show_id=farm.show.id),
    }


def booked(farm) -> dict[str, tuple[int, int]]:
    """PG booked counters of the farm's five accounting rows, (cores, gpus) in centicores."""
    job = JobResource.objects.get(job=farm.job)
    layer = LayerResource.objects.get(layer=farm.layer)
    return {
        "sub": tuple(Subscription.objects.filter(pk=farm.subscription.pk).values_list("int_cores", "int_gpus").get()),
        "folder": tuple(FolderResource.objects.filter(folder=farm.folder).values_list("int_cores", "int_gpus").get()),
        "job": (job.int_cores, job.int_gpus),
        "job_local": (job.int_local_cores, job.int_local_gpus),
        "layer": (layer.int_cores, layer.int_gpus),
        "point": tuple(Point.objects.filter(show=farm.show, dept=farm.dept).values_list("int_cores", "int_gpus").get()),
    }


def host_idle(farm) -> tuple[int, int, int, int]:
    return tuple(
        Host.objects.filter(pk=farm.host.pk)
        .values_list("int_cores_idle", "int_mem_idle", "int_gpus_idle", "int_gpu_mem_idle")
        .get()
    )


def hashes(client, names: dict[str, str]) -> dict[str, dict[str, str]]:
    return {role: client.hgetall(name) for role, name in names.items()}


def test_scheduler_managed_release_publishes_once_after_commit_and_leaves_pg_accounting(
    farm, acct_redis, django_capture_on_commit_callbacks
):
    kept = farm.add_proc(cores=400, gpus=1, mem=1000)
    proc = farm.add_proc(cores=250, gpus=1, mem=2048)
    names = seed_keys(acct_redis, farm, cores=6, gpus=2)
    acct_redis.set(keys.SEQ, 41)
    pg_before = booked(farm)
    idle_before = host_idle(farm)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        release = unbook_proc(proc_id=proc.id)

    assert release == Release(
        proc_id=proc.id,
        host_id=farm.host.id,
        show_id=farm.show.id,
        alloc_id=farm.alloc.id,
        folder_id=farm.folder.id,
        job_id=farm.job.id,
        layer_id=farm.layer.id,
        dept_id=farm.dept.id,
        point_show_id=farm.show.id,
        job_state=farm.job.str_state,
        cores_centicores=250,
        cores=2,
        gpus=1,
        memory=2048,
        gpu_memory=0,
        branch=Branch.SCHEDULER,
    )
    assert not release.job_finished
    assert len(callbacks) == 2  # the publish and the metric
    assert not Proc.objects.filter(pk=proc.id).exists()
    assert Proc.objects.filter(pk=kept.id).exists()
    assert booked(farm) == pg_before  # the recompute owns PG accounting of this show
    assert host_idle(farm) == (idle_before[0] + 250, idle_before[1] + 2048, idle_before[2] + 1, idle_before[3])
    # 250 centicores leave Redis as 2 cores: 6 - 2 = 4.
    assert hashes(acct_redis, names) == {role: {"int_cores": "4", "int_gpus": "1"} for role in names}
    assert acct_redis.get(keys.SEQ) == "43"  # prepare + release
    assert acct_redis.hgetall(keys.INFLIGHT) == {}


def test_cuebot_managed_release_decrements_pg_accounting_and_touches_no_redis(
    cuebot_farm, acct_redis, django_capture_on_commit_callbacks
):
    farm = cuebot_farm
    farm.add_proc(cores=400, gpus=1)
    proc = farm.add_proc(cores=250, gpus=2, mem=3000)
    assert booked(farm)["sub"] == (650, 3)
    names = seed_keys(acct_redis, farm, cores=6, gpus=3)
    idle_before = host_idle(farm)

    with django_capture_on_commit_callbacks(execute=True):
        release = unbook_proc(proc_id=proc.id)

    assert release.branch is Branch.CUEBOT
    assert booked(farm) == {
        "sub": (400, 1),
        "folder": (400, 1),
        "job": (400, 1),
        "job_local": (0, 0),
        "layer": (400, 1),
        "point": (400, 1),
    }
    assert host_idle(farm) == (idle_before[0] + 250, idle_before[1] + 3000, idle_before[2] + 2, idle_before[3])
    assert hashes(acct_redis, names) == {role: {"int_cores": "6", "int_gpus": "3"} for role in names}
    assert acct_redis.get(keys.SEQ) is None


@pytest.mark.parametrize("managed", [True, False])
def test_local_release_touches_only_layer_and_job_local_counters_whatever_the_flag(
    managed, db, acct_redis, django_capture_on_commit_callbacks
):
    farm = build_farm(managed=managed)
    farm.add_proc(cores=400, gpus=1)
    proc = farm.add_proc(cores=250, gpus=1, local=True)
    before = booked(farm)
    assert before["job_local"] == (250, 1) and before["layer"] == (650, 2) and before["sub"] == (400, 1)
    names = seed_keys(acct_redis, farm, cores=4, gpus=1)

    with django_capture_on_commit_callbacks(execute=True):
        release = unbook_proc(proc_id=proc.id)

    assert release.branch is Branch.LOCAL
    assert booked(farm) == {**before, "job_local": (0, 0), "layer": (400, 1)}
    assert hashes(acct_redis, names) == {role: {"int_cores": "4", "int_gpus": "1"} for role in names}
    assert acct_redis.get(keys.SEQ) is None


def test_second_release_returns_none_and_changes_nothing(farm, acct_redis, django_capture_on_commit_callbacks):
    proc = farm.add_proc(cores=300)
    names = seed_keys(acct_redis, farm, cores=3)
    with django_capture_on_commit_callbacks(execute=True):
        assert unbook_proc(proc_id=proc.id) is not None
    idle = host_idle(farm)
    seq = acct_redis.get(keys.SEQ)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert unbook_proc(proc_id=proc.id) is None

    assert callbacks == []
    assert host_idle(farm) == idle
    assert acct_redis.get(keys.SEQ) == seq
    assert hashes(acct_redis, names) == {role: {"int_cores": "0", "int_gpus": "0"} for role in names}


def test_delete_time_amounts_are_used_not_the_loaded_ones(farm, acct_redis, django_capture_on_commit_callbacks):
    proc = farm.add_proc(cores=200, gpus=0)
    names = seed_keys(acct_redis, farm, cores=10, gpus=5)
    loaded = Proc.objects.get(pk=proc.id)  # a caller holding a stale copy
    with as_cuebot():  # the row as Cuebot changed it since
        Proc.objects.filter(pk=proc.id).update(int_cores_reserved=500, int_gpus_reserved=2)

    with django_capture_on_commit_callbacks(execute=True):
        release = unbook_proc(proc_id=loaded.id)

    assert (release.cores_centicores, release.cores, release.gpus) == (500, 5, 2)
    assert hashes(acct_redis, names) == {role: {"int_cores": "5", "int_gpus": "3"} for role in names}


def test_batch_sums_deltas_per_key_converting_per_proc(farm, acct_redis, django_capture_on_commit_callbacks):
    job2, layer2 = farm.add_job()
    a = farm.add_proc(cores=250, gpus=1)
    b = farm.add_proc(cores=250)
    c = farm.add_proc(cores=150, layer=layer2)
    names = seed_keys(acct_redis, farm, cores=20, gpus=4)
    other = farm_keys(farm, layer=layer2, job=job2)
    acct_redis.hset(other["job"], mapping={"int_cores": 7, "int_gpus": 0})
    acct_redis.hset(other["layer"], mapping={"int_cores": 7, "int_gpus": 0})
    acct_redis.set(keys.SEQ, 9)

    with django_capture_on_commit_callbacks(execute=True):
        results = unbook_procs(proc_ids=[a.id, "no-such-proc", b.id, c.id])

    assert [r and r.proc_id for r in results] == [a.id, None, b.id, c.id]
    # Per proc 2 + 2 + 1 = 5 cores on the shared keys, not (250+250+150)//100 = 6.
    shared = {"int_cores": "15", "int_gpus": "3"}
    assert hashes(acct_redis, names) == {
        "sub": shared,
        "folder": shared,
        "job": {"int_cores": "16", "int_gpus": "3"},
        "layer": {"int_cores": "16", "int_gpus": "3"},
        "point": shared,
    }
    assert acct_redis.hgetall(other["job"]) == {"int_cores": "6", "int_gpus": "0"}
    assert acct_redis.hgetall(other["layer"]) == {"int_cores": "6", "int_gpus": "0"}
    assert acct_redis.get(keys.SEQ) == "11"  # one prepare and one release for the whole batch


def test_mixed_batch_across_branches_is_one_transaction_with_exact_values(
    db, acct_redis, django_capture_on_commit_callbacks
):
    sched, cue = build_farm(managed=True), build_farm(managed=False)
    s1 = sched.add_proc(cores=250, gpus=1)
    s_local = sched.add_proc(cores=100, local=True)
    c1, c2 = cue.add_proc(cores=250, gpus=1), cue.add_proc(cores=350)
    cue.add_proc(cores=100)
    sched_keys = seed_keys(acct_redis, sched, cores=3, gpus=1)
    sched_before = booked(sched)

    with django_capture_on_commit_callbacks(execute=True):
        results = unbook_procs(proc_ids=[c1.id, s1.id, s_local.id, c2.id])

    assert [r.branch for r in results] == [Branch.CUEBOT, Branch.SCHEDULER, Branch.LOCAL, Branch.CUEBOT]
    assert booked(cue) == {
        "sub": (100, 0),
        "folder": (100, 0),
        "job": (100, 0),
        "job_local": (0, 0),
        "layer": (100, 0),
        "point": (100, 0),
    }
    assert booked(sched) == {
        **sched_before,
        "job_local": (0, 0),
        "layer": (sched_before["layer"][0] - 100, sched_before["layer"][1]),
    }
    assert hashes(acct_redis, sched_keys) == {role: {"int_cores": "1", "int_gpus": "0"} for role in sched_keys}


@pytest.mark.parametrize("managed", [True, False], ids=["scheduler-managed", "cuebot-managed"])
def test_a_batch_over_two_allocations_returns_each_proc_as_stored_with_its_own_hosts_allocation(
    db, acct_redis, managed, django_capture_on_commit_callbacks
):
    """A batch reads each proc's allocation from its host row as it locks it: procs on hosts of two
    allocations come back each with its own, and every other field as Cuebot stored it."""
    farm = build_farm(managed=managed)
    with as_cuebot():
        alloc2 = Alloc.objects.create(str_name=unique("alloc"), facility=farm.alloc.facility, str_tag="other")
        Subscription.objects.create(show=farm.show, alloc=alloc2, int_size=10000, int_burst=20000)
        host2 = Host.objects.create(
            alloc=alloc2,
            str_name=unique("host"),
            str_lock_state="OPEN",
            int_cores=800,
            int_cores_idle=800,
            int_mem=10**7,
            int_mem_idle=10**7,
            int_gpus=2,
            int_gpus_idle=2,
        )
        HostStat.objects.create(host=host2)
    on_first = farm.add_proc(cores=250, gpus=1, mem=2048)
    on_second = farm.add_proc(cores=150, gpus=2, mem=1024, host=host2)
    branch = Branch.SCHEDULER if managed else Branch.CUEBOT
    common = dict(
        show_id=farm.show.id,
        folder_id=farm.folder.id,
        job_id=farm.job.id,
        layer_id=farm.layer.id,
        dept_id=farm.dept.id,
        point_show_id=farm.show.id,
        job_state=farm.job.str_state,
        gpu_memory=0,
        branch=branch,
    )

    with django_capture_on_commit_callbacks(execute=True):
        released = unbook_procs(proc_ids=[on_first.id, on_second.id])

    assert released == [
        Release(
            proc_id=on_first.id,
            host_id=farm.host.id,
            alloc_id=farm.alloc.id,
            cores_centicores=250,
            cores=2,
            gpus=1,
            memory=2048,
            **common,
        ),
        Release(
            proc_id=on_second.id,
            host_id=host2.id,
            alloc_id=alloc2.id,
            cores_centicores=150,
            cores=1,
            gpus=2,
            memory=1024,
            **common,
        ),
    ]


def test_a_batch_sends_its_ids_to_postgresql_in_key_order_and_answers_in_the_callers(farm):
    """PostgreSQL sorts an = ANY array before it probes the primary key with it: sent sorted, the
    sort is a check. The answer keeps the caller's order."""
    asked = sorted((farm.add_proc().id for _ in range(6)), reverse=True)
    sent = []

    def capture(execute, sql, params, many, context):
        if isinstance(params, dict) and "ids" in params:
            sent.append(list(params["ids"]))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        released = unbook_procs(proc_ids=asked)

    assert [r.proc_id for r in released] == asked
    assert len(sent) == 2 and all(ids == sorted(asked) for ids in sent)  # the read before any lock, the release


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_proc_resized_between_its_registration_and_its_delete_is_released_but_left_out_of_the_publish(
    farm, acct_redis, batch, django_capture_on_commit_callbacks
):
    """What reaches Redis is what was registered in flight: a proc Cuebot resized after the read
    before any lock is released at its delete-time amounts in PostgreSQL and in the answer, but its
    decrement is withheld (a reseed in between counted neither amount), which leaves Redis high."""
    resized, unchanged = farm.add_proc(cores=200), farm.add_proc(cores=100)
    names = seed_keys(acct_redis, farm, cores=10)

    class ResizedByCuebotOnceRegistered:
        """The era's publisher, with Cuebot resizing the proc right after the registration."""

        def __init__(self, inner) -> None:
            self.inner = inner

        def prepare(self, *, releases):
            prepared = self.inner.prepare(releases=releases)
            with as_cuebot():
                Proc.objects.filter(pk=resized.id).update(int_cores_reserved=500)
            return prepared

        def publish(self, *, prepared):
            return self.inner.publish(prepared=prepared)

    withheld = RELEASE_WITHHELD.labels(reason="changed_since_registered")
    before = withheld._value.get()

    with publishers_wrapped(ResizedByCuebotOnceRegistered), django_capture_on_commit_callbacks(execute=True):
        released = unbook_procs(proc_ids=[resized.id, unchanged.id]) if batch else [unbook_proc(proc_id=resized.id)]

    assert released[0].cores_centicores == 500
    left = 10 - (1 if batch else 0)  # only the unchanged proc's 1 core came off
    assert hashes(acct_redis, names) == {role: {"int_cores": str(left), "int_gpus": "0"} for role in names}
    assert acct_redis.hgetall(keys.INFLIGHT) == {}  # the registration was settled all the same
    assert withheld._value.get() - before == 1


def test_duplicate_ids_are_refused_before_anything_changes(farm):
    proc = farm.add_proc()
    with pytest.raises(ValueError):
        unbook_procs(proc_ids=[proc.id, proc.id])
    assert Proc.objects.filter(pk=proc.id).exists()


def test_rolled_back_transaction_publishes_nothing(farm, acct_redis, django_capture_on_commit_callbacks):
    proc = farm.add_proc(cores=200)
    names = seed_keys(acct_redis, farm, cores=2)

    class Abort(Exception):
        pass

    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(Abort):
        with transaction.atomic():
            unbook_proc(proc_id=proc.id)
            raise Abort

    assert callbacks == []
    assert Proc.objects.filter(pk=proc.id).exists()
    assert hashes(acct_redis, names) == {role: {"int_cores": "2", "int_gpus": "0"} for role in names}
    # The prepare ran inside the block: its entry stays until it expires (Redis high, safe).
    assert len(acct_redis.hgetall(keys.INFLIGHT)) == 1


def test_rolled_back_savepoint_publishes_nothing_but_the_outer_commit_does(
    farm, acct_redis, django_capture_on_commit_callbacks
):
    rolled_back, kept = farm.add_proc(cores=200), farm.add_proc(cores=300)
    names = seed_keys(acct_redis, farm, cores=10)

    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            try:
                with transaction.atomic():
                    unbook_proc(proc_id=rolled_back.id)
                    raise RuntimeError("abandon the savepoint")
            except RuntimeError:
                pass
            unbook_proc(proc_id=kept.id)

    assert Proc.objects.filter(pk=rolled_back.id).exists()
    assert hashes(acct_redis, names) == {role: {"int_cores": "7", "int_gpus": "0"} for role in names}


def test_in_flight_entry_exists_between_prepare_and_publish(
    farm, acct_redis, django_capture_on_commit_callbacks, settings
):
    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = 60
    proc = farm.add_proc(cores=250, gpus=1)
    names = seed_keys(acct_redis, farm, cores=5, gpus=1)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        unbook_proc(proc_id=proc.id)

    entries = acct_redis.hgetall(keys.INFLIGHT)
    assert len(entries) == 1
    [(op_id, value)] = entries.items()
    expiry_ms, *fields = value.split("|")
    seconds, micros = acct_redis.time()
    now_ms = seconds * 1000 + micros // 1000
    assert now_ms < int(expiry_ms) <= now_ms + 60_000
    assert fields == [part for name in names.values() for part in (name, "2", "1")]
    assert acct_redis.get(keys.SEQ) == "1"
    assert hashes(acct_redis, names) == {role: {"int_cores": "5", "int_gpus": "1"} for role in names}

    for callback in callbacks:
        callback()

    assert acct_redis.hgetall(keys.INFLIGHT) == {}
    assert acct_redis.get(keys.SEQ) == "2"
    assert hashes(acct_redis, names) == {role: {"int_cores": "3", "int_gpus": "0"} for role in names}


def test_missing_keys_are_not_created_and_counters_clamp_at_zero(farm, acct_redis, django_capture_on_commit_callbacks):
    proc = farm.add_proc(cores=500, gpus=2)
    names = farm_keys(farm)
    acct_redis.hset(names["sub"], mapping={"int_cores": 3, "int_gpus": 5, "size": 100})  # Redis already low on cores
    acct_redis.hset(names["job"], mapping={"int_max_cores": 100})  # limits only, no counters yet

    with django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=proc.id)

    assert acct_redis.hgetall(names["sub"]) == {"int_cores": "0", "int_gpus": "3", "size": "100"}
    assert acct_redis.hgetall(names["job"]) == {"int_max_cores": "100", "int_cores": "0", "int_gpus": "0"}
    for role in ("folder", "layer", "point"):
        assert not acct_redis.exists(names[role])
    assert acct_redis.get(keys.SEQ) == "2"


def test_redis_disabled_is_the_maestro_era_which_credits_the_tables_and_publishes_nothing(
    farm, acct_redis, django_capture_on_commit_callbacks, settings
):
    settings.ACCOUNTING_SCHEDULER = "maestro"
    proc = farm.add_proc(cores=200)
    names = seed_keys(acct_redis, farm, cores=2)

    with django_capture_on_commit_callbacks(execute=True):
        assert unbook_proc(proc_id=proc.id).branch is Branch.CUEBOT

    assert booked(farm)["sub"] == (0, 0)
    assert hashes(acct_redis, names) == {role: {"int_cores": "2", "int_gpus": "0"} for role in names}
    assert acct_redis.get(keys.SEQ) is None and acct_redis.hgetall(keys.INFLIGHT) == {}


@pytest.mark.django_db(transaction=True)
def test_threads_releasing_one_proc_release_it_once(acct_redis):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=300, gpus=1)
    names = seed_keys(acct_redis, farm, cores=9, gpus=3)
    idle_before = host_idle(farm)
    workers = 6
    barrier = threading.Barrier(workers)
    results: list = []
    errors: list = []

    def release() -> None:
        try:
            barrier.wait()
            results.append(unbook_proc(proc_id=proc.id))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=release) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sum(r is not None for r in results) == 1
    assert host_idle(farm)[0] == idle_before[0] + 300
    assert hashes(acct_redis, names) == {role: {"int_cores": "6", "int_gpus": "2"} for role in names}
    # A thread whose read before any lock found the proc registered its release in flight (a
    # bump of acct:seq) and settled it after its statement (another), whether it deleted the
    # proc or found it gone; a thread that read after the winner's commit registered nothing.
    # How many read in time depends on the scheduling; every registration was settled.
    seq = int(acct_redis.get(keys.SEQ))
    assert seq % 2 == 0 and 2 <= seq <= 2 * workers
    assert acct_redis.hgetall(keys.INFLIGHT) == {}


def statements(queries) -> list[str]:
    """The verb of each statement: its first unindented one, so a locking CTE counts as the statement it leads."""
    # The test's own transaction turns the release's atomic block into a savepoint.
    verbs = [
        re.search(r"^(?:DELETE|UPDATE|INSERT|SELECT|SAVEPOINT|RELEASE)\b", q["sql"].strip(), re.M).group(0)
        for q in queries.captured_queries
    ]
    return [verb for verb in verbs if verb not in ("SAVEPOINT", "RELEASE")]


def pg_answers(run) -> int:
    """PostgreSQL round trips `run` waits for that end in ReadyForQuery (a Sync or a simple Query)."""
    return sum(
        1 for _, answered in protocol_exchanges(run) for message in answered if message.startswith("ReadyForQuery")
    )


def test_round_trips_of_a_scheduler_managed_release_with_a_warm_flag(
    farm, monkeypatch, django_capture_on_commit_callbacks
):
    from django.test.utils import CaptureQueriesContext
    from django_redis import get_redis_connection

    from infra.redis_factory import accounting_redis

    procs = [farm.add_proc(cores=100) for _ in range(5)]
    with django_capture_on_commit_callbacks(execute=True):  # warm: the flag is kept, the statements prepared
        unbook_proc(proc_id=procs[0].id)
        unbook_procs(proc_ids=[p.id for p in procs[1:3]])
    # Counted where every command is written, whether through a client or on a held connection.
    sent: dict[str, list[str]] = {"accounting": [], "cache": []}
    pools = {"accounting": accounting_redis().connection_pool, "cache": get_redis_connection("default").connection_pool}
    names = {pool.connection_kwargs["db"]: name for name, pool in pools.items()}
    for connection_class in {pool.connection_class for pool in pools.values()}:
        monkeypatch.setattr(
            connection_class,
            "send_command",
            lambda self, *args, _original=connection_class.send_command, **kw: (
                sent[names[self.db]].append(args[0]) or _original(self, *args, **kw)
            ),
        )

    with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks(execute=True):
        # The read before any lock (what is registered in flight), then the savepoint (the
        # test's transaction holds the outer one), the one statement, its release.
        assert pg_answers(lambda: unbook_proc(proc_id=procs[3].id)) == 4
    assert [q["sql"].strip().split()[0] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]] == [
        "SELECT",
        "WITH",
    ]
    assert sent == {"accounting": ["EVALSHA", "EVALSHA"], "cache": []}  # in-flight registration, then the release

    sent["accounting"].clear()
    batch = [procs[4].id, farm.add_proc(cores=100).id]
    with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks(execute=True):
        assert pg_answers(lambda: unbook_procs(proc_ids=batch)) == 4
    assert [q["sql"].strip().split()[0] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]] == [
        "SELECT",
        "WITH",
    ]
    assert sent == {"accounting": ["EVALSHA", "EVALSHA"], "cache": []}

    # Prepared on the service's own connection, and planned once (generic plans) after the first runs.
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    heads = {" ".join(statement.split()[:3]) for statement in prepared}
    assert {"WITH gone AS", "WITH doomed AS"} <= heads  # the single release and the batch


def test_the_single_release_gets_a_generic_plan(farm, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(8):
            unbook_proc(proc_id=farm.add_proc(cores=100).id)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE %s", ["%WITH gone AS%"]
        )
        generic, custom = cursor.fetchone()
    # PostgreSQL tries five custom plans, then keeps the generic one: no planning per release.
    assert (generic, custom) == (3, 5)


# Cuebot's order of a release's writes (its ProcDaoJdbc.unbookProc and procDestroyed, as
# docs/architecture.md, "Lock order, deadlocks and the rerun", names it), written out here apart
# from the code: every writer of these tables keeps it.
CUEBOTS_ORDER = ("subscription", "layer_resource", "job_resource", "host_local", "folder_resource", "point")


def test_the_repair_locks_the_accounting_tables_in_cuebots_order(cuebot_farm):
    """LOCK_ORDER is Cuebot's, and the repair takes its rows' locks in it, table after table
    (a release's: test_a_cuebot_managed_release_sends_its_ordered_writes_in_one_round_trip)."""
    from django.test.utils import CaptureQueriesContext

    from tests.accounting.pg import drift_all_tables

    assert LOCK_ORDER == CUEBOTS_ORDER
    cuebot_farm.add_proc(cores=100)
    drift_all_tables(show_id=cuebot_farm.show.id)
    with CaptureQueriesContext(connection) as queries:
        repair = recompute.repair_pg_accounting(show_ids=[cuebot_farm.show.id])
    assert repair.failures == [] and accounting_mismatches(show_id=cuebot_farm.show.id) == []
    locked = [
        m.group(1) for q in queries.captured_queries if (m := re.search(r" FROM (\w+) .*FOR NO KEY UPDATE", q["sql"]))
    ]
    assert locked == [table for table in CUEBOTS_ORDER if table != "host_local"]


def test_a_cuebot_managed_release_sends_its_ordered_writes_in_one_round_trip(cuebot_farm):
    from django.test.utils import CaptureQueriesContext

    procs = [cuebot_farm.add_proc(cores=100), cuebot_farm.add_proc(cores=200, local=True)]
    # Warm: the flag lookup and each statement's one-off Parse are not what this counts.
    unbook_procs(proc_ids=[cuebot_farm.add_proc(cores=100).id, cuebot_farm.add_proc(cores=200, local=True).id])
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile() as trace, CaptureQueriesContext(connection) as queries:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            unbook_procs(proc_ids=[p.id for p in procs])
        finally:
            pgconn.untrace()
        trace.seek(0)
        answers = [line for line in trace if line.startswith(b"B\t") and b"\tReadyForQuery" in line]

    # Each statement still goes through the cursor wrapper, in Cuebot's lock order: the read
    # before any lock (the Redis era's, whoever owns the show: it is what tells), the procs
    # and their hosts (one statement), then the accounting tables.
    assert statements(queries) == ["SELECT", "SELECT", "UPDATE", "UPDATE", "UPDATE", "UPDATE", "UPDATE", "UPDATE"]
    first = queries.captured_queries[2]["sql"]
    assert first.index("DELETE FROM proc") < first.index("UPDATE host")
    tables = [m.group(1) for q in queries.captured_queries if (m := re.search(r"^UPDATE (\w+)", q["sql"], re.M))]
    assert tables == ["subscription", "layer_resource", "job_resource", "host_local", "folder_resource", "point"]
    # The read, the savepoint (the test's transaction holds the outer one), the procs and
    # hosts, the six UPDATEs together, the savepoint's release: five answers awaited, not eleven.
    assert len(answers) == 5
    assert accounting_mismatches(show_id=cuebot_farm.show.id) == []


@pytest.mark.django_db
@pytest.mark.parametrize("managed", [False, True], ids=["cuebot-managed", "scheduler-managed"])
def test_a_batch_sends_its_arrays_in_binary(managed):
    # As text, psycopg quotes every element and PostgreSQL parses the literal back: ~100 µs
    # per array of 100 ids. Two jobs, so each accounting table has rows to change as arrays,
    # and a FINISHED job's local procs, so its host_local reservation is removed by array too.
    farm = build_farm(managed=managed)
    running_job, running_layer = farm.add_job()
    procs = [
        farm.add_proc(cores=100, local=True),
        farm.add_proc(cores=200, local=True),
        farm.add_proc(cores=100, local=True, layer=running_layer),
        farm.add_proc(cores=300, layer=running_layer),
    ]
    with as_cuebot():
        Job.objects.filter(pk=farm.job.pk).update(str_state="FINISHED")

    released: list = []
    exchanges = protocol_exchanges(lambda: released.extend(unbook_procs(proc_ids=[p.id for p in procs])))

    assert all(r is not None for r in released)
    binds = [message for sent, _ in exchanges for message in sent if message.startswith("Bind")]
    assert not [bind for bind in binds if " '{" in bind]  # no array literal in text
    # One-dimensional arrays of text (element type oid 25) in binary: the ids, the keys.
    assert sum(bind.count(r"'\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x19") for bind in binds) >= 3
    assert not HostLocal.objects.filter(host=farm.host, job=farm.job).exists()


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_release_reports_the_job_state_a_killed_job_has_when_its_procs_go(farm, batch):
    # OpenCue marks a killed job FINISHED before it releases the job's procs.
    job, layer = farm.add_job()
    procs = [farm.add_proc(layer=layer), farm.add_proc(layer=layer)]
    with as_cuebot():
        Job.objects.filter(pk=job.pk).update(str_state="FINISHED", str_visible_name=None)
    running = farm.add_proc()

    if batch:
        released = unbook_procs(proc_ids=[procs[0].id, procs[1].id, running.id])
    else:
        released = [unbook_proc(proc_id=procs[0].id), unbook_proc(proc_id=running.id)]

    assert [r.job_finished for r in released] == ([True, True, False] if batch else [True, False])
    assert released[0].job_state == "FINISHED"


@pytest.mark.django_db(transaction=True)
def test_a_lone_scheduler_managed_release_outside_a_transaction_is_one_statement(acct_redis):
    """No BEGIN, no COMMIT: the DELETE and the host UPDATE are one statement, its own
    transaction; the read before it, the registration and the publish around it."""
    farm = build_farm(managed=True)
    procs = [farm.add_proc(cores=200) for _ in range(3)]
    names = seed_keys(acct_redis, farm, cores=6)
    unbook_proc(proc_id=procs[0].id)  # warm: the flag is kept, the statements prepared
    assert pg_answers(lambda: unbook_proc(proc_id=procs[1].id)) == 2
    assert not Proc.objects.filter(pk=procs[1].id).exists()
    assert hashes(acct_redis, names) == {role: {"int_cores": "2", "int_gpus": "0"} for role in names}
    assert acct_redis.hgetall(keys.INFLIGHT) == {}


@pytest.mark.django_db(transaction=True)
def test_a_batch_of_scheduler_managed_procs_outside_a_transaction_is_one_statement(acct_redis):
    farm = build_farm(managed=True)
    procs = [farm.add_proc(cores=200) for _ in range(5)]
    names = seed_keys(acct_redis, farm, cores=20)
    unbook_procs(proc_ids=[procs[0].id, procs[1].id])  # warm: the flag is kept, the statements prepared
    assert pg_answers(lambda: unbook_procs(proc_ids=[p.id for p in procs[2:]])) == 2  # the read, the statement
    assert not Proc.objects.filter(pk__in=[p.id for p in procs]).exists()
    assert hashes(acct_redis, names) == {role: {"int_cores": "10", "int_gpus": "0"} for role in names}
    assert acct_redis.hgetall(keys.INFLIGHT) == {}


@pytest.mark.django_db(transaction=True)
def test_a_batch_with_a_proc_to_write_in_postgresql_keeps_its_transaction(acct_redis):
    """A local proc among scheduler-managed ones has rows to decrement in the same transaction:
    the read, BEGIN, the statement, then the decrements with the COMMIT."""
    farm = build_farm(managed=True)
    procs = [farm.add_proc(cores=200), farm.add_proc(cores=100, local=True)]
    unbook_procs(proc_ids=[farm.add_proc(cores=200).id, farm.add_proc(cores=100, local=True).id])  # warm
    before = booked(farm)
    assert pg_answers(lambda: unbook_procs(proc_ids=[p.id for p in procs])) == 4
    after = booked(farm)
    assert after["layer"] == (before["layer"][0] - 100, before["layer"][1])  # the local proc, in its layer
    assert after["job_local"] == (before["job_local"][0] - 100, before["job_local"][1])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("managed", [True, False], ids=["scheduler-managed", "cuebot-managed"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_release_whose_commit_fails_changes_nothing_anywhere(acct_redis, managed, batch):
    """The outermost release sends its COMMIT with its last statements: a COMMIT refused at the
    very end leaves PostgreSQL as it was, publishes nothing and settles its in-flight entry."""
    farm = build_farm(managed=managed)
    procs = [farm.add_proc(cores=200, gpus=1), farm.add_proc(cores=300)]
    names = seed_keys(acct_redis, farm, cores=10, gpus=2)
    pg_before, idle_before = booked(farm), host_idle(farm)

    release_refused_at_commit(procs=procs, batch=batch)

    assert (booked(farm), host_idle(farm)) == (pg_before, idle_before)
    assert hashes(acct_redis, names) == {role: {"int_cores": "10", "int_gpus": "2"} for role in names}
    assert acct_redis.hlen(keys.INFLIGHT) == 0
