"""The drift API and the admin's drift pages name the same rows of Cuebot's tables as acct_drift,
in the Maestro era with no accounting Redis to read."""

import pytest
from django.urls import reverse

from accounting.reconcile.drift_check import run_table_drift_check
from tests.accounting.operators.test_admin_overview import visible_text
from tests.accounting.reconcile.test_cuebot_drift import drifted_farms  # noqa: F401 - the fixture

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

    run_table_drift_check()
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
    run_table_drift_check()
    index = visible_text(admin_client.get(reverse("acct-drift")).content.decode())
    assert f"{flagged.show.str_name} 2 rows drifted" in index and f"{unflagged.show.str_name} 1 row drifted" in index
