"""A release whose PostgreSQL backend is terminated mid-way (as a restart, a failover or an
operator's pg_terminate_backend ends it) is answered 503 with Retry-After and a body saying the
outcome is unknown and a retry is safe, logged at WARNING in one line, on the lane and on
Django's path, single and batch; the retry then releases each proc once.

The cut is forced at a known point: Cuebot (a session of its own) holds the row lock of a proc the
release is about to delete, the release's backend is seen waiting on it (pg_blocking_pids), and
that backend is terminated."""

import json
import logging
import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from django.db import connection, connections

from accounting.live import keys
from accounting.models import Proc
from accounting.operators.release_api import CUT_OFF
from infra.api_types import OutcomeUnknown, OutcomeUnknownOut
from infra.permissions import RELEASE_PROCS
from tests.accounting.operators.test_release_lane import environ, with_proc
from tests.accounting.pg import accounting_mismatches
from tests.accounting.release.test_unbook import hashes, host_idle, seed_keys
from tests.farms import build_farm
from tests.wsgi_client import LaneClient, wsgi_call

pytestmark = pytest.mark.django_db(transaction=True)


def _dsn() -> str:
    """The superuser's own session, beside the service's role: Cuebot's, and the one that
    terminates a backend."""
    params = connection.get_connection_params()
    return psycopg.conninfo.make_conninfo(
        **{k: v for k, v in params.items() if k in ("dbname", "user", "host", "port", "password")}
    )


def waiting_on(watcher: psycopg.Connection, holder_pid: int) -> int:
    """The backend that waits for a lock `holder_pid` holds, once PostgreSQL has it waiting
    (no event to await: polled, as tests/infra/test_transactions.py does)."""
    deadline = time.monotonic() + 30
    while True:
        row = watcher.execute(
            "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [holder_pid]
        ).fetchone()
        if row is not None:
            return row[0]
        assert time.monotonic() < deadline, "the release never waited on Cuebot's row lock"
        time.sleep(0.002)


def cut_off(send: Callable[[], object], *, locked_proc: str):
    """`send()`'s answer, sent from a thread of its own (its own connection) while Cuebot holds
    `locked_proc`'s row; its backend terminated once it waits on that row."""
    answers: list = []
    errors: list[BaseException] = []

    def release() -> None:
        try:
            answers.append(send())
        except BaseException as error:  # noqa: BLE001 - asserted below
            errors.append(error)
        finally:
            connections.close_all()

    with psycopg.connect(_dsn()) as holder, psycopg.connect(_dsn(), autocommit=True) as watcher:
        holder.execute("SELECT 1 FROM proc WHERE pk_proc = %s FOR UPDATE", [locked_proc])
        releasing = threading.Thread(target=release)
        releasing.start()
        victim = waiting_on(watcher, holder.info.backend_pid)
        assert watcher.execute("SELECT pg_terminate_backend(%s)", [victim]).fetchone() == (True,)
        releasing.join(30)
        holder.rollback()
    assert errors == [] and not releasing.is_alive()
    return answers[0]


@pytest.fixture
def token(token_with) -> str:
    return token_with(RELEASE_PROCS)


def post(client, token: str, path: str, body: dict | None = None):
    return client.post(
        path, data=json.dumps(body or {}), content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )


@pytest.mark.parametrize("owner", ["scheduler", "cuebot"])
@pytest.mark.parametrize("kind", ["single", "batch"])
def test_a_release_cut_off_from_postgresql_is_503_retry_safe_and_its_retry_releases_once(
    api_client, token, acct_redis, caplog, owner, kind
):
    farm = build_farm(managed=owner == "scheduler")
    procs = [farm.add_proc(cores=250, gpus=1, mem=512)] + ([farm.add_proc(cores=100)] if kind == "batch" else [])
    names = seed_keys(acct_redis, farm, cores=6, gpus=1) if owner == "scheduler" else {}
    idle_before = host_idle(farm)
    ids = [p.id for p in procs]

    def release():
        if kind == "single":
            return post(api_client, token, f"/api/v1/procs/{ids[0]}/unbook")
        return post(api_client, token, "/api/v1/procs/unbook", {"proc_ids": ids})

    with caplog.at_level(logging.INFO):
        answer = cut_off(release, locked_proc=ids[-1])

    assert answer.status_code == 503
    assert answer["Retry-After"] == str(OutcomeUnknown.retry_after)
    assert answer.json() == {"detail": CUT_OFF, "outcome": "unknown", "retry": "safe"}
    assert OutcomeUnknownOut.model_validate(answer.json(), strict=True).model_dump(mode="json") == answer.json()
    (logged,) = [r for r in caplog.records if "cut off from PostgreSQL" in r.getMessage()]
    assert logged.levelname == "WARNING" and logged.exc_info is None
    assert "AdminShutdown" in logged.getMessage() or "terminating connection" in logged.getMessage()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    # Cut off before its commit: nothing changed anywhere, and nothing is left in flight.
    assert Proc.objects.filter(pk__in=ids).count() == len(ids)
    assert host_idle(farm) == idle_before
    assert acct_redis.hgetall(keys.INFLIGHT) == {}
    if owner == "scheduler":
        assert hashes(acct_redis, names) == {role: {"int_cores": "6", "int_gpus": "1"} for role in names}

    retried, again = release(), release()

    assert retried.status_code == 200
    assert (again.status_code, again.json()) == (
        (404, {"detail": f"no proc {ids[0]}"})
        if kind == "single"
        else (200, {"results": [{"proc_id": i, "status": "not_found", "release": None} for i in ids]})
    )
    assert not Proc.objects.filter(pk__in=ids).exists()
    assert host_idle(farm)[:3] == (
        idle_before[0] + sum(p.int_cores_reserved for p in procs),
        idle_before[1] + sum(p.int_mem_reserved for p in procs),
        idle_before[2] + sum(p.int_gpus_reserved for p in procs),
    )
    if owner == "scheduler":  # 250 and 100 centicores leave Redis as 2 and 1 cores, once
        cores = "4" if kind == "single" else "3"
        assert hashes(acct_redis, names) == {role: {"int_cores": cores, "int_gpus": "0"} for role in names}
    else:
        assert accounting_mismatches(show_id=farm.show.id) == []
    assert acct_redis.hgetall(keys.INFLIGHT) == {}


@pytest.mark.parametrize("kind", ["single", "batch"])
def test_the_lanes_503_is_djangos_byte_for_byte(token, kind):
    farm = build_farm(managed=True)
    mine, twin = farm.add_proc(), farm.add_proc()

    def request(proc_id: str) -> dict:
        if kind == "batch":
            return environ("/api/v1/procs/unbook", token=token, body=json.dumps({"proc_ids": [proc_id]}).encode())
        return environ(f"/api/v1/procs/{proc_id}/unbook", token=token)

    lane = cut_off(lambda: wsgi_call(LaneClient().app, request(mine.id)), locked_proc=mine.id)
    django = cut_off(lambda: wsgi_call(LaneClient().app.django_app, request(twin.id)), locked_proc=twin.id)

    assert lane.status_code == 503
    assert with_proc(lane, mine.id, "P") == with_proc(django, twin.id, "P")


def test_the_openapi_schema_states_the_503_of_both_release_endpoints(client):
    schema = client.get("/api/v1/openapi.json").json()
    for path in ("/api/v1/procs/unbook", "/api/v1/procs/{proc_id}/unbook"):
        answer = schema["paths"][path]["post"]["responses"]["503"]
        assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/OutcomeUnknownOut"}
    assert set(schema["components"]["schemas"]["OutcomeUnknownOut"]["required"]) == {"detail", "outcome", "retry"}
