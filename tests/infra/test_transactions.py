"""Deadlocks and serialization failures: the lock order of a release, and the rerun of an
outermost release or recompute that PostgreSQL aborted (infra.transactions).

The deadlocks are real and forced step by step: a second PostgreSQL session (its own
thread and connection) locks a row, the release or recompute runs up to a chosen
statement and stops there holding its earlier locks, the second session asks for one of
those and waits (observed in pg_blocking_pids), then the release goes on and asks for the
first session's row. The cycle is closed by the release, whose deadlock_timeout is 50 ms
against the other session's 60 s, so its backend finds the cycle and is the one aborted.
"""

import logging
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext

import pytest
from django.db import OperationalError, connection, connections, transaction
from prometheus_client import REGISTRY

from accounting.live import keys
from accounting.models import Proc
from accounting.ownership import switching
from accounting.ownership.toggle import set_scheduler_managed
from accounting.release.types import Branch
from accounting.release.unbook import unbook_proc, unbook_procs
from infra.transactions import ATTEMPTS, retry_transient, sqlstate
from shows.models import Show
from tests.accounting.pg import accounting_mismatches, drift_all_tables
from tests.accounting.release.test_unbook import booked, hashes, host_idle, seed_keys
from tests.farms import build_farm
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db(transaction=True)


def retries(operation: str, state: str = "40P01") -> float:
    return (
        REGISTRY.get_sample_value("cuebot_acct_transaction_retries_total", {"operation": operation, "sqlstate": state})
        or 0.0
    )


def recompute_failures() -> float:
    return REGISTRY.get_sample_value("cuebot_acct_switch_recompute_failures_total") or 0.0


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def await_blocked(*, pid: int, by: int) -> None:
    """Until backend `pid` waits for a lock held by backend `by` (PostgreSQL offers no event to await)."""
    deadline = time.monotonic() + 30
    with connection.cursor() as cursor:
        while True:
            cursor.execute("SELECT %s = ANY(pg_blocking_pids(%s))", [by, pid])
            if cursor.fetchone()[0]:
                return
            assert time.monotonic() < deadline, f"backend {pid} never waited for {by}"
            time.sleep(0.002)


def behind_cuebot(
    *,
    holds: Callable[[object], None],
    waiter: Callable[[], object],
    then: Callable[[object], None] = lambda cursor: None,
):
    """`waiter` run while Cuebot's transaction (its own role) has run `holds` and keeps those rows
    locked: let go once PostgreSQL has the waiter waiting on it, then `then` and commit. The
    waiter's result; an error on either side fails the test."""
    holding, go = threading.Event(), threading.Event()
    pids: dict[str, int] = {}
    errors: list[BaseException] = []
    results: dict[str, object] = {}

    def cuebot() -> None:
        try:
            with as_cuebot(), transaction.atomic(), connection.cursor() as cursor:
                pids["cuebot"] = backend_pid()
                holds(cursor)
                holding.set()
                assert go.wait(30)
                then(cursor)
        except BaseException as error:  # noqa: BLE001 - asserted below
            errors.append(error)
        finally:
            holding.set()
            connections.close_all()

    def waiting() -> None:
        try:
            pids["waiter"] = backend_pid()
            results["waiter"] = waiter()
        except BaseException as error:  # noqa: BLE001 - asserted below
            errors.append(error)
        finally:
            connections.close_all()

    writer = threading.Thread(target=cuebot)
    writer.start()
    assert holding.wait(30)
    waiting_thread = threading.Thread(target=waiting)
    waiting_thread.start()
    while "waiter" not in pids and waiting_thread.is_alive():
        waiting_thread.join(0.01)
    await_blocked(pid=pids["waiter"], by=pids["cuebot"])
    go.set()
    writer.join(30)
    waiting_thread.join(30)
    assert errors == []
    return results["waiter"]


class Outcome:
    def __init__(self) -> None:
        self.value = None
        self.error: BaseException | None = None


def deadlock(
    *,
    run: Callable[[], object],
    pause_before: str | None,
    hold: tuple[str, list],
    then_request: tuple[str, list],
    on_pause: Callable[[], None] | None = None,
) -> Outcome:
    """Run `run` in a thread on its own connection and make it a deadlock victim once.

    The other session locks `hold`; `run` stops just before its first statement containing
    `pause_before` (first time only) and `on_pause` runs; the other session requests
    `then_request` (a row `run` holds by then) and waits; `run` goes on and requests the held row.
    With `pause_before=None` (the row `run` needs is locked inside the same statement as the
    one it holds), `run` goes on until it waits for the held row, and only then does the
    other session request its row; the victim's deadlock check then runs 2 s after it began
    to wait, once the cycle is closed. PostgreSQL checks once per wait, so the other session's
    request must come within that time: under load 500 ms was once not enough, the victim's
    check found no cycle, and the other session became the victim.
    """
    holder_ready, paused, holder_waiting = threading.Event(), threading.Event(), threading.Event()
    victim_started = threading.Event()
    pids: dict[str, int] = {}
    outcome = Outcome()
    holder_errors: list[BaseException] = []

    def holder() -> None:
        try:
            # The other session is Cuebot's, and only a superuser may set deadlock_timeout.
            with as_cuebot(), transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL deadlock_timeout = '60s'")
                pids["holder"] = backend_pid()
                cursor.execute(*hold)
                holder_ready.set()
                paused.wait()
                cursor.execute(*then_request)  # waits until the victim is aborted
        except BaseException as error:  # noqa: BLE001 - reported by the test
            holder_errors.append(error)
        finally:
            holder_ready.set()
            connections.close_all()

    def victim() -> None:
        def pause_once(execute, sql, params, many, context):
            if pause_before in sql and not paused.is_set():
                # In a pipeline, a statement is sent when executed but may not have run
                # yet: a sync makes the server run everything sent, so the pause holds
                # the earlier statements' locks (outside a pipeline it is a no-op round trip).
                with connection.connection.pipeline() as pipeline:
                    pipeline.sync()
                paused.set()
                holder_waiting.wait()
            return execute(sql, params, many, context)

        try:
            # Only a superuser may set it; the session keeps it once the role is back.
            with as_cuebot(), connection.cursor() as cursor:
                cursor.execute("SET deadlock_timeout = %s", ["50ms" if pause_before else "2s"])
            pids["victim"] = backend_pid()
            victim_started.set()
            with connection.execute_wrapper(pause_once) if pause_before else nullcontext():
                outcome.value = run()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            outcome.error = error
        finally:
            victim_started.set()
            paused.set()
            connections.close_all()

    holder_thread = threading.Thread(target=holder)
    holder_thread.start()
    holder_ready.wait()
    victim_thread = threading.Thread(target=victim)
    victim_thread.start()
    if pause_before is None:
        victim_started.wait()
        if "victim" in pids:
            await_blocked(pid=pids["victim"], by=pids["holder"])
        paused.set()
    paused.wait()
    try:
        assert "victim" in pids, f"the victim failed before pausing: {outcome.error!r}"
        if on_pause:
            on_pause()
        await_blocked(pid=pids["holder"], by=pids["victim"])
    finally:
        holder_waiting.set()
        victim_thread.join()
        holder_thread.join()
    assert holder_errors == []
    return outcome


def lock_row(table: str, pk_column: str, pk: str) -> tuple[str, list]:
    return f"SELECT 1 FROM {table} WHERE {pk_column} = %s FOR NO KEY UPDATE", [pk]


def test_a_released_proc_chosen_as_deadlock_victim_is_rerun_and_published_once(acct_redis):
    farm = build_farm(managed=True)
    kept = farm.add_proc(cores=400, gpus=1)
    proc = farm.add_proc(cores=250, gpus=1, mem=2048)
    names = seed_keys(acct_redis, farm, cores=6, gpus=2)
    idle_before = host_idle(farm)
    before = retries("release")

    # The release holds the proc (DELETE) and asks for the host (one statement does both);
    # the other session holds the host, asks for the proc.
    outcome = deadlock(
        run=lambda: unbook_proc(proc_id=proc.id),
        pause_before=None,
        hold=lock_row("host", "pk_host", farm.host.id),
        then_request=lock_row("proc", "pk_proc", proc.id),
    )

    assert outcome.error is None
    assert outcome.value.branch is Branch.SCHEDULER and outcome.value.cores == 2
    assert retries("release") == before + 1
    assert not Proc.objects.filter(pk=proc.id).exists() and Proc.objects.filter(pk=kept.id).exists()
    assert host_idle(farm) == (idle_before[0] + 250, idle_before[1] + 2048, idle_before[2] + 1, idle_before[3])
    # Published once: 6 - 2 cores, 2 - 1 gpus; the committed attempt's in-flight entry is settled.
    assert hashes(acct_redis, names) == {role: {"int_cores": "4", "int_gpus": "1"} for role in names}
    # Each attempt registered before locking; the aborted one settled its entry when it rolled
    # back, the rerun published: four bumps, one decrement, no entry left.
    assert acct_redis.get(keys.SEQ) == "4"
    assert acct_redis.hlen(keys.INFLIGHT) == 0


def test_a_cuebot_batch_chosen_as_deadlock_victim_is_rerun_with_exact_pg_values(acct_redis):
    farm = build_farm(managed=False)
    job2, layer2 = farm.add_job()
    kept = farm.add_proc(cores=400, gpus=1)
    procs = [
        farm.add_proc(cores=250, gpus=1),
        farm.add_proc(cores=150, layer=layer2),
        farm.add_proc(cores=300, local=True),
    ]
    before = retries("release")

    # As in the soak: the other session holds the point row and asks for the folder row the release holds.
    outcome = deadlock(
        run=lambda: unbook_procs(proc_ids=[p.id for p in procs]),
        pause_before="UPDATE point",
        hold=("SELECT 1 FROM point WHERE pk_show = %s FOR NO KEY UPDATE", [farm.show.id]),
        then_request=lock_row("folder_resource", "pk_folder", farm.folder.id),
    )

    assert outcome.error is None
    assert [r.branch for r in outcome.value] == [Branch.CUEBOT, Branch.CUEBOT, Branch.LOCAL]
    assert retries("release") == before + 1
    assert accounting_mismatches(show_id=farm.show.id) == []
    assert booked(farm) == {
        "sub": (400, 1),
        "folder": (400, 1),
        "job": (400, 1),
        "job_local": (0, 0),
        "layer": (400, 1),
        "point": (400, 1),
    }
    assert list(Proc.objects.values_list("pk", flat=True)) == [kept.id]
    assert acct_redis.keys("acct:*") == []  # a Cuebot-managed release never reaches Redis


def test_inside_a_callers_transaction_the_deadlock_propagates_and_nothing_is_published(acct_redis):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=250, gpus=1)
    names = seed_keys(acct_redis, farm, cores=6, gpus=2)
    idle_before = host_idle(farm)
    before = retries("release")

    def in_callers_transaction():
        with transaction.atomic():
            return unbook_proc(proc_id=proc.id)

    outcome = deadlock(
        run=in_callers_transaction,
        pause_before=None,
        hold=lock_row("host", "pk_host", farm.host.id),
        then_request=lock_row("proc", "pk_proc", proc.id),
    )

    assert isinstance(outcome.error, OperationalError) and sqlstate(outcome.error) == "40P01"
    assert retries("release") == before
    assert Proc.objects.filter(pk=proc.id).exists()
    assert host_idle(farm) == idle_before
    assert hashes(acct_redis, names) == {role: {"int_cores": "6", "int_gpus": "2"} for role in names}
    # Registered before locking, settled when the block rolled back: nothing taken off.
    assert acct_redis.get(keys.SEQ) == "2" and acct_redis.hlen(keys.INFLIGHT) == 0


def test_the_recompute_after_a_switch_back_is_rerun_after_a_deadlock(acct_redis):
    farm = build_farm(managed=True)
    farm.add_proc(cores=250, gpus=1)
    farm.add_proc(cores=300, local=True)
    drift_all_tables(show_id=farm.show.id)  # what a show's PG tables look like after a spell with the scheduler
    before, failures_before = retries("recompute"), recompute_failures()
    show = Show.objects.get(pk=farm.show.pk)

    outcome = deadlock(
        run=lambda: set_scheduler_managed(show=show, managed=False),
        pause_before="FROM point WHERE",
        hold=("SELECT 1 FROM point WHERE pk_show = %s FOR NO KEY UPDATE", [farm.show.id]),
        then_request=lock_row("folder_resource", "pk_folder", farm.folder.id),
    )

    assert outcome.error is None and outcome.value == (True, False)
    assert retries("recompute") == before + 1
    assert recompute_failures() == failures_before
    assert accounting_mismatches(show_id=farm.show.id) == []


def test_a_release_locks_the_accounting_tables_after_its_procs_and_hosts_in_one_order(acct_redis):
    """While the release waits for the point row, it already holds every row it locks
    before it: its procs, the host, then subscription, folder, job and layer rows."""
    farm = build_farm(managed=False)
    procs = sorted([farm.add_proc(cores=100), farm.add_proc(cores=200)], key=lambda p: p.id)
    held_by_release: dict[str, bool] = {}

    def probe() -> None:
        probes = {
            "proc": lock_row("proc", "pk_proc", procs[0].id),
            "host": lock_row("host", "pk_host", farm.host.id),
            "subscription": lock_row("subscription", "pk_subscription", farm.subscription.id),
            "folder_resource": lock_row("folder_resource", "pk_folder", farm.folder.id),
            "job_resource": lock_row("job_resource", "pk_job", farm.job.id),
            "layer_resource": lock_row("layer_resource", "pk_layer", farm.layer.id),
        }
        with connection.cursor() as cursor:
            for name, (sql, params) in probes.items():
                try:
                    with transaction.atomic():
                        cursor.execute(sql.replace("FOR NO KEY UPDATE", "FOR NO KEY UPDATE NOWAIT"), params)
                    held_by_release[name] = False
                except OperationalError as error:
                    assert sqlstate(error) == "55P03"  # lock_not_available
                    held_by_release[name] = True

    deadlock(
        run=lambda: unbook_procs(proc_ids=[p.id for p in reversed(procs)]),
        pause_before="UPDATE point",
        hold=("SELECT 1 FROM point WHERE pk_show = %s FOR NO KEY UPDATE", [farm.show.id]),
        then_request=lock_row("proc", "pk_proc", procs[1].id),
        on_pause=probe,
    )

    assert held_by_release == dict.fromkeys(held_by_release, True) and len(held_by_release) == 6
    assert accounting_mismatches(show_id=farm.show.id) == []


# --- the rerun itself, on errors raised by PostgreSQL with the SQLSTATE given ---


def failing(states: list[str], calls: list[int]) -> Callable[[], str]:
    """A transaction whose n-th run fails in PostgreSQL with states[n] ('' runs clean)."""

    def run() -> str:
        with transaction.atomic(), connection.cursor() as cursor:
            calls.append(1)
            state = states[len(calls) - 1] if len(calls) <= len(states) else ""
            if state:
                cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '{state}'; END $$")
            return "committed"

    return run


@pytest.mark.parametrize("state", ["40P01", "40001"])
def test_a_transient_failure_is_rerun_and_counted(state):
    calls: list[int] = []
    before = retries("release", state)
    assert retry_transient(failing([state, state], calls), operation="release") == "committed"
    assert len(calls) == 3
    assert retries("release", state) == before + 2


def test_reruns_are_bounded_and_the_last_error_propagates():
    calls: list[int] = []
    before = retries("recompute")
    with pytest.raises(OperationalError) as raised:
        retry_transient(failing(["40P01"] * 10, calls), operation="recompute")
    assert sqlstate(raised.value) == "40P01"
    assert len(calls) == ATTEMPTS == 3
    assert retries("recompute") == before + ATTEMPTS - 1


def test_other_errors_and_inner_transactions_are_not_rerun():
    calls: list[int] = []
    with pytest.raises(Exception) as raised:
        retry_transient(failing(["23505"], calls), operation="release")  # unique_violation
    assert sqlstate(raised.value) == "23505" and len(calls) == 1

    calls.clear()
    with pytest.raises(OperationalError), transaction.atomic():
        retry_transient(failing(["40P01"], calls), operation="release")
    assert len(calls) == 1


def test_a_switch_back_whose_recompute_still_fails_stands_logged_and_counted(monkeypatch, caplog):
    farm = build_farm(managed=True)

    def deadlocked(*, show_ids):
        raise OperationalError("deadlock detected")

    monkeypatch.setattr(switching, "recompute_pg_accounting", deadlocked)
    before = recompute_failures()
    with caplog.at_level(logging.WARNING, logger="accounting.ownership.switching"):
        assert set_scheduler_managed(show=farm.show, managed=False) == (True, False)
    assert Show.objects.get(pk=farm.show.pk).b_scheduler_managed is False
    assert recompute_failures() == before + 1
    assert any(
        r.levelno == logging.WARNING and "switch back to Cuebot failed" in r.getMessage() for r in caplog.records
    )
