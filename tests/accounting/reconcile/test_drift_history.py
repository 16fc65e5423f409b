"""Drift over time: the periodic check records when each drifted row was first seen, every face
says since when and for how long, the age is exported for an alert, and a row back at its sum
leaves every list (its record deleted) at the next check."""

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from prometheus_client import REGISTRY

from accounting.live import keys
from accounting.models import DriftRecord
from accounting.operators import pages
from accounting.operators.drift_views import recorded_drift
from accounting.reconcile.drift_check import run_check
from accounting.reconcile.drift_history import DriftAge, age_text, cores_words, gpus_words
from accounting.reconcile.redis_against_pg import DriftRow, drifted_field
from accounting.reconcile.reseed import seed_show
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES
from accounting.tasks import drift_check_task
from tests.accounting.operators.test_admin_overview import visible_text
from tests.accounting.reconcile.test_tables_against_procs import acct_drift, drifted_farms, set_as_cuebot  # noqa: F401

pytestmark = pytest.mark.django_db

EARLIER = timedelta(hours=2, minutes=5)


def age_gauge(show: str, source: str) -> float | None:
    return REGISTRY.get_sample_value("cuebot_acct_drift_age_seconds", {"show": show, "source": source})


def records() -> dict[str, DriftRecord]:
    return {r.subject: r for r in DriftRecord.objects.all()}


def since(first_seen: datetime) -> str:
    """How the faces write a first sighting, worked out here apart from the code (a test run just
    after midnight UTC sees one from the day before, with its date)."""
    first = first_seen.astimezone(UTC)
    today = datetime.now(UTC).date()
    return f"{first:%H:%M} UTC" if first.date() == today else f"{first:%Y-%m-%d %H:%M} UTC"


def seen_earlier() -> None:
    """Every record as if the check had first seen its row 2 h 5 min before it did."""
    DriftRecord.objects.update(first_seen=F("first_seen") - EARLIER)


def test_the_check_keeps_the_first_sighting_and_the_faces_say_since_when_and_for_how_long(
    maestro_era,
    drifted_farms,  # noqa: F811
    reader_client,
    admin_client,
    capsys,
):
    """A flagged show's subscription and a Cuebot-run show's layer drifted by hand (the Maestro
    era: Cuebot writes both), seen by one check, then by another two hours later."""
    flagged, unflagged = drifted_farms
    sub, layer = (
        f"{flagged.show.str_name} / {flagged.alloc.str_name}",
        f"{unflagged.job.str_name} / {unflagged.layer.str_name}",
    )
    first = run_check(CUEBOT_TABLES)
    found = records()
    assert set(found) == {sub, layer, f"{flagged.show.str_name} / {flagged.folder.str_name}"}
    assert found[sub].first_seen.timestamp() == pytest.approx(first.checked_at, abs=1e-3)
    assert (found[sub].difference, found[sub].cores_difference, found[sub].gpus_difference) == (
        "2.50 cores low, 2 GPUs high",
        -250,
        2,
    )
    assert (found[layer].difference, found[layer].show_name, found[layer].detail) == (
        "2.99 cores low",
        unflagged.show.str_name,
        "layer_resource (int_cores, int_gpus)",
    )
    assert age_gauge(flagged.show.str_name, "cuebot_tables") == 0

    seen_earlier()
    first_seen = DriftRecord.objects.get(subject=layer).first_seen
    later = run_check(CUEBOT_TABLES)
    assert DriftRecord.objects.get(subject=layer).first_seen == first_seen  # kept, not reset
    assert age_gauge(unflagged.show.str_name, "cuebot_tables") == pytest.approx(
        later.checked_at - first_seen.timestamp(), abs=1e-3
    )
    assert age_gauge(unflagged.show.str_name, "cuebot_tables") >= EARLIER.total_seconds()
    layer_says = f"2.99 cores low since {since(first_seen)} (2 h 5 min)"

    # The API: one show live, each row with its first sighting; every show as of the last check.
    body = reader_client.get("/api/v1/accounting/drift", {"show": unflagged.show.str_name}).json()
    (row,) = body["cuebot_tables"]["rows"]
    assert row["first_seen"] == first_seen.isoformat() and row["since"] == layer_says
    assert row["age_seconds"] >= EARLIER.total_seconds()
    every = reader_client.get("/api/v1/accounting/drift").json()["drifted_rows"]
    assert [(r["show"], r["name"], r["what"], r["since"]) for r in every if r["name"] == layer] == [
        (unflagged.show.str_name, layer, "layer_resource (int_cores, int_gpus)", layer_says)
    ]
    assert {r["source"] for r in every} == {"cuebot_tables"} and len(every) == 3

    # The admin: the show's page reads live, the index lists the check's records.
    page = admin_client.get(reverse("acct-drift-show", args=[unflagged.show.pk])).content.decode()
    assert f'<td class="drift-since">since <time datetime="{first_seen.isoformat()}">' in page
    assert f"2.99 cores low since {since(first_seen)} 2 h 5 min" in visible_text(page)
    index = visible_text(admin_client.get(reverse("acct-drift")).content.decode())
    assert "Drifted rows at the last check: 3" in index
    assert (
        f"{flagged.show.str_name} {sub} subscription (int_cores, int_gpus) 2.50 cores low, 2 GPUs high since" in index
    )

    # acct_drift, in words and in JSON.
    capsys.readouterr()
    assert acct_drift() == 1
    assert f"\t{layer_says}\t" in capsys.readouterr().out
    assert acct_drift("--show", unflagged.show.str_name, "--json") == 1
    (row,) = json.loads(capsys.readouterr().out)["cuebot_tables"]["rows"]
    assert (row["first_seen"], row["since"]) == (first_seen.isoformat(), layer_says)


def test_a_row_repaired_leaves_every_list_at_the_next_check(maestro_era, drifted_farms, reader_client, admin_client):  # noqa: F811
    flagged, unflagged = drifted_farms
    run_check(CUEBOT_TABLES)
    call_command("acct_reseed", "--show", unflagged.show.str_name, stdout=StringIO())
    # Live faces read it repaired at once; the check's list keeps it until the next check.
    assert (
        reader_client.get("/api/v1/accounting/drift", {"show": unflagged.show.str_name}).json()["cuebot_tables"]["rows"]
        == []
    )
    run_check(CUEBOT_TABLES)
    assert {r.show_name for r in DriftRecord.objects.all()} == {flagged.show.str_name}
    assert age_gauge(unflagged.show.str_name, "cuebot_tables") == 0
    every = reader_client.get("/api/v1/accounting/drift").json()["drifted_rows"]
    assert {r["show"] for r in every} == {flagged.show.str_name}

    call_command("acct_reseed")  # the Maestro era: every show's tables
    run_check(CUEBOT_TABLES)
    assert not DriftRecord.objects.exists()
    assert reader_client.get("/api/v1/accounting/drift").json()["drifted_rows"] == []
    index = admin_client.get(reverse("acct-drift")).content.decode()
    assert "drift-since" not in index and "The last checks found no row drifted." in index


def test_the_drift_index_lists_the_oldest_drifted_rows_first_and_the_rest_a_page_away(
    maestro_era,
    drifted_farms,  # noqa: F811
    admin_client,
    monkeypatch,
):
    monkeypatch.setattr(pages, "DRIFTED_PER_PAGE", 2)
    run_check(CUEBOT_TABLES)
    first = visible_text(admin_client.get(reverse("acct-drift")).content.decode())
    second = admin_client.get(reverse("acct-drift"), {"page": 2}).content.decode()
    assert "Drifted rows at the last check: 3 (here 1–2)" in first and "Pages of drifted rows: 1 2 next ›" in first
    rows = [r.entry.name for r in recorded_drift()]
    assert [subject in first for subject in rows] == [True, True, False]
    assert rows[2] in visible_text(second) and "(here 3–3)" in visible_text(second)


def test_a_row_that_drifts_further_keeps_its_first_sighting_and_says_its_difference_now(maestro_era, drifted_farms):  # noqa: F811
    _, unflagged = drifted_farms
    run_check(CUEBOT_TABLES)
    seen_earlier()
    before = DriftRecord.objects.get(show_name=unflagged.show.str_name)
    set_as_cuebot("UPDATE layer_resource SET int_cores = 700 WHERE pk_layer = %s", unflagged.layer.id)
    run_check(CUEBOT_TABLES)
    after = DriftRecord.objects.get(show_name=unflagged.show.str_name)
    assert (after.first_seen, after.difference, after.cores_difference) == (before.first_seen, "4.00 cores high", 400)


def test_redis_era_a_flagged_shows_redis_subscription_and_a_cuebot_shows_layer(
    farm, cuebot_farm, seeded_redis, reader_client, admin_client, capsys, settings
):
    """The redis era: the flagged show's drift is in Redis, the Cuebot-managed show's in its tables."""
    farm.add_proc(cores=200)
    cuebot_farm.add_proc(cores=300)
    seed_show(show_id=farm.show.id)
    seeded_redis.hset(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "int_cores", 6)
    set_as_cuebot("UPDATE layer_resource SET int_cores = 700 WHERE pk_layer = %s", cuebot_farm.layer.id)

    assert drift_check_task() == 2
    seen_earlier()
    drift_check_task()
    redis_row = DriftRecord.objects.get(source="redis")
    assert (redis_row.show_name, redis_row.detail, redis_row.difference) == (
        farm.show.str_name,
        "int_cores",
        "4.00 cores high",
    )
    assert age_gauge(farm.show.str_name, "redis") >= EARLIER.total_seconds()
    assert age_gauge(cuebot_farm.show.str_name, "cuebot_tables") >= EARLIER.total_seconds()
    says = f"4.00 cores high since {since(redis_row.first_seen)} (2 h 5 min)"

    (row,) = reader_client.get("/api/v1/accounting/drift", {"show": farm.show.str_name}).json()["rows"]
    assert (row["field"], row["first_seen"], row["since"]) == ("int_cores", redis_row.first_seen.isoformat(), says)
    every = reader_client.get("/api/v1/accounting/drift").json()["drifted_rows"]
    assert sorted((r["source"], r["show"], r["what"]) for r in every) == [
        ("cuebot_tables", cuebot_farm.show.str_name, "layer_resource (int_cores, int_gpus)"),
        ("redis", farm.show.str_name, "cores booked (int_cores)"),
    ]
    page = visible_text(admin_client.get(reverse("acct-drift-show", args=[farm.show.pk])).content.decode())
    assert f"cores booked int_cores 6 2 4 {says.replace('(', '').replace(')', '')}" in page
    capsys.readouterr()
    assert acct_drift() == 1
    out = capsys.readouterr().out
    assert f"\tdiff=+4\t{says}\t{keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)}\n" in out

    call_command("acct_reseed", "--show", farm.show.str_name, stdout=StringIO())
    call_command("acct_reseed", "--cuebot-tables", stdout=StringIO())
    assert drift_check_task() == 0
    assert not DriftRecord.objects.exists()
    assert age_gauge(farm.show.str_name, "redis") == 0 and age_gauge(cuebot_farm.show.str_name, "cuebot_tables") == 0

    # Out of the redis era no check reads Redis: what it recorded there is not left listed for good.
    seeded_redis.hset(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "int_cores", 6)
    drift_check_task()
    assert DriftRecord.objects.filter(source="redis").exists()
    settings.ACCOUNTING_SCHEDULER = "maestro"
    drift_check_task()
    assert not DriftRecord.objects.filter(source="redis").exists()


def writes(queries: CaptureQueriesContext) -> list[str]:
    statements = (q["sql"].strip() for q in queries)
    return [sql for sql in statements if sql.upper().startswith(("INSERT", "UPDATE", "DELETE"))]


def test_the_check_writes_its_own_table_only_and_only_what_changed(maestro_era, drifted_farms):  # noqa: F811
    """Read-only on Cuebot's schema (a role that may only SELECT Cuebot's tables runs it), and
    drift that stays put costs no write."""
    _, unflagged = drifted_farms
    with CaptureQueriesContext(connection) as first:
        run_check(CUEBOT_TABLES)
    assert len(writes(first)) == 1 and writes(first)[0].startswith('INSERT INTO "acct_drift_record"')
    with CaptureQueriesContext(connection) as again:
        run_check(CUEBOT_TABLES)
    assert writes(again) == []
    set_as_cuebot("UPDATE layer_resource SET int_cores = 700 WHERE pk_layer = %s", unflagged.layer.id)
    with CaptureQueriesContext(connection) as moved:
        run_check(CUEBOT_TABLES)
    assert [sql.split(" SET ")[0] for sql in writes(moved)] == ['UPDATE "acct_drift_record"']
    call_command("acct_reseed", "--show", unflagged.show.str_name, stdout=StringIO())
    with CaptureQueriesContext(connection) as healed:
        run_check(CUEBOT_TABLES)
    assert [sql.split(" WHERE ")[0] for sql in writes(healed)] == ['DELETE FROM "acct_drift_record"']


def test_a_check_that_cannot_read_redis_leaves_the_records_as_they_were(farm, seeded_redis, settings):
    from accounting.reconcile.drift_check import run_check
    from accounting.reconcile.redis_against_pg import REDIS_FIELDS
    from infra.redis_factory import accounting_redis
    from tests.processes import closed_port

    seed_show(show_id=farm.show.id)
    seeded_redis.hset(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "int_cores", 6)
    run_check(REDIS_FIELDS)
    before = list(DriftRecord.objects.values_list("identity", "first_seen"))
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    accounting_redis.cache_clear()
    try:
        assert run_check(REDIS_FIELDS).error
    finally:
        accounting_redis.cache_clear()
    assert list(DriftRecord.objects.values_list("identity", "first_seen")) == before and before


def test_words_and_durations():
    assert [cores_words(c) for c in (400, -250, 1, -100001)] == [
        "4.00 cores high",
        "2.50 cores low",
        "0.01 cores high",
        "1000.01 cores low",
    ]
    assert [gpus_words(g) for g in (1, -2)] == ["1 GPU high", "2 GPUs low"]
    key = "acct:job:x"
    assert [
        drifted_field(
            DriftRow(key=key, field=field, redis=redis, pg=pg, difference=(redis or 0) - pg), show_id=""
        ).difference
        for field, redis, pg in (
            ("int_max_cores", None, 300),
            ("int_max_cores", -1, 300),
            ("int_max_gpus", 1, 3),
            ("int_priority", 5, 1),
        )
    ] == ["missing from Redis (PostgreSQL 300)", "Redis unlimited, PostgreSQL 300", "2 GPUs low", "4 high"]
    assert [age_text(s) for s in (0, 59, 60, 3599, 3600, 7500, 86400 + 7200 + 59)] == [
        "0 s",
        "59 s",
        "1 min",
        "59 min",
        "1 h 0 min",
        "2 h 5 min",
        "1 d 2 h",
    ]
    at = datetime(2026, 11, 28, 3, 12, 40, tzinfo=UTC)
    assert DriftAge(first_seen=at, seen=at + timedelta(hours=2)).since == "03:12 UTC"
    assert DriftAge(first_seen=at, seen=at + timedelta(days=1)).since == "2026-11-28 03:12 UTC"
    assert DriftAge(first_seen=at, seen=at - timedelta(seconds=5)).seconds == 0
