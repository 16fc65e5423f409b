"""The drift API and the admin's drift pages name the same rows of Cuebot's tables as acct_drift,
in the Maestro era with no accounting Redis to read."""

import logging

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from accounting.reconcile.drift_check import run_check
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES
from tests.accounting.operators.test_admin_overview import staff, visible_text
from tests.accounting.reconcile.test_tables_against_procs import drifted_farms, pg_mismatches  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


def test_api_names_the_rows_of_one_show_and_the_last_check_counts_every_show(maestro_era, drifted_farms, reader_client):  # noqa: F811
    flagged, unflagged = drifted_farms
    body = reader_client.get("/api/v1/accounting/drift", {"show": flagged.show.str_name}).json()
    assert list(body) == ["cuebot_tables"]
    tables = body["cuebot_tables"]
    assert tables["repair"] == f"manage.py acct_reseed --show {flagged.show.str_name}"
    assert [(r["table"], r["name"], r["cores"], r["gpus"]) for r in tables["rows"]] == [
        (
            "subscription",
            f"{flagged.show.str_name} / {flagged.alloc.str_name}",
            {"stored": 0, "true": 2.5, "difference": -2.5},
            {"stored": 3, "true": 1, "difference": 2},
        ),
        (
            "folder_resource",
            f"{flagged.show.str_name} / {flagged.folder.str_name}",
            {"stored": 4, "true": 2.5, "difference": 1.5},
            {"stored": 1, "true": 1, "difference": 0},
        ),
    ]
    layer = reader_client.get("/api/v1/accounting/drift", {"show": unflagged.show.str_name}).json()["cuebot_tables"]
    assert [r["name"] for r in layer["rows"]] == [f"{unflagged.job.str_name} / {unflagged.layer.str_name}"]

    run_check(CUEBOT_TABLES)
    every = reader_client.get("/api/v1/accounting/drift").json()["cuebot_tables"]
    assert every["checked_at"] is not None
    assert sorted((s["show"], s["rows_drifted"]) for s in every["shows"]) == sorted(
        [(flagged.show.str_name, 2), (unflagged.show.str_name, 1)]
    )


def test_admin_pages_list_the_same_rows(maestro_era, drifted_farms, admin_client):  # noqa: F811
    flagged, unflagged = drifted_farms
    text = visible_text(admin_client.get(reverse("acct-drift-show", args=[flagged.show.pk])).content.decode())
    assert "Cuebot's tables against SUM(proc): 2 rows drifted" in text
    assert (
        f"{flagged.show.str_name} / {flagged.alloc.str_name} subscription int_cores, int_gpus 0 2.5 -2.5 3 1 2" in text
    )
    assert (
        f"{flagged.show.str_name} / {flagged.folder.str_name} folder_resource int_cores, int_gpus 4 2.5 1.5 1 1 0"
        in text
    )
    assert f"manage.py acct_reseed --show {flagged.show.str_name}" in text
    assert "Redis" not in text
    run_check(CUEBOT_TABLES)
    index = visible_text(admin_client.get(reverse("acct-drift")).content.decode())
    assert f"{flagged.show.str_name} 2 rows drifted" in index and f"{unflagged.show.str_name} 1 row drifted" in index


@pytest.mark.parametrize("era", ["maestro", "redis"])
def test_admin_recomputes_a_shows_tables_after_asking_and_logs_it(era, request, drifted_farms, admin_client, caplog):  # noqa: F811
    """The show whose tables Cuebot writes in each era: the flagged one in the Maestro era (with
    no Redis to reach), the unflagged one in the redis era."""
    if era == "maestro":
        request.getfixturevalue("maestro_era")
    flagged, unflagged = drifted_farms
    farm = flagged if era == "maestro" else unflagged
    url = reverse("acct-drift-repair", args=[farm.show.pk])
    page = admin_client.get(reverse("acct-drift-show", args=[farm.show.pk])).content.decode()
    assert url in page
    confirm = admin_client.get(url)
    assert confirm.status_code == 200
    assert f"Recompute {farm.show.str_name}'s tables?" in visible_text(confirm.content.decode())
    assert pg_mismatches(farm) != []  # nothing before the POST

    with caplog.at_level(logging.WARNING, logger="accounting.operators.pages"):
        done = admin_client.post(url, follow=True)
    drifted = 2 if era == "maestro" else 1
    assert pg_mismatches(farm) == []
    assert [str(m) for m in done.context["messages"]] == [
        f"Recomputed {farm.show.str_name}'s tables: {drifted} row(s) had drifted, 0 could not be set."
    ]
    assert [r.getMessage() for r in caplog.records] == [
        f"admin recompute of show {farm.show.str_name}'s tables by admin: {drifted} row(s) had drifted, "
        "0 could not be set"
    ]
    entry = LogEntry.objects.get(object_id=farm.show.pk)
    assert entry.user.username == "admin" and entry.change_message.startswith("Recomputed Cuebot's tables")
    other = unflagged if era == "maestro" else flagged
    assert pg_mismatches(other) != []  # another show's rows are not this one's repair


def test_admin_recompute_needs_its_permission(maestro_era, drifted_farms, client, django_user_model):  # noqa: F811
    flagged, _ = drifted_farms
    url = reverse("acct-drift-repair", args=[flagged.show.pk])
    client.force_login(staff(django_user_model, "reseed_redis"))
    page = client.get(reverse("acct-drift-show", args=[flagged.show.pk])).content.decode()
    assert url not in page and "You need the permission “Can recompute Cuebot's accounting tables" in visible_text(page)
    assert client.get(url).status_code == 403 and client.post(url).status_code == 403
    assert len(pg_mismatches(flagged)) == 2

    client.force_login(staff(django_user_model, "repair_tables", username="repairer"))
    assert url in client.get(reverse("acct-drift-show", args=[flagged.show.pk])).content.decode()
    client.post(url)
    assert pg_mismatches(flagged) == []


def test_admin_recompute_refuses_a_scheduler_managed_show_outside_the_maestro_era(drifted_farms, admin_client):  # noqa: F811
    flagged, _ = drifted_farms
    before = pg_mismatches(flagged)
    response = admin_client.post(reverse("acct-drift-repair", args=[flagged.show.pk]), follow=True)
    assert [str(m) for m in response.context["messages"]] == [
        f"{flagged.show.str_name} is scheduler-managed: its tables are its scheduler's record, not Cuebot's, in this era."
    ]
    assert pg_mismatches(flagged) == before
    assert not LogEntry.objects.exists()
