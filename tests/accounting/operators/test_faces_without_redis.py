"""Every operator face answers in the eras that have no accounting Redis (Maestro, notify),
with that Redis pointed at a closed port: a page or an endpoint that reached for it would fail."""

import pytest
from django.db import connection
from django.urls import reverse

from accounting.models import Point
from accounting.reconcile.recalculate_subs import RECALCULATE_SUBS_LOCK
from infra.permissions import CHANGE_LIMITS, CHANGE_OWNERSHIP, VIEW_ACCOUNTING
from tests.farms import build_farm

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["maestro", "notify"])
def era_without_redis(request):
    return request.getfixturevalue(f"{request.param}_era")


@pytest.fixture
def farms():
    flagged, unflagged = build_farm(managed=True), build_farm(managed=False)
    for farm in (flagged, unflagged):
        farm.add_proc(cores=250, gpus=1)
    return flagged, unflagged


def test_every_admin_page_answers(era_without_redis, farms, admin_client):
    flagged, unflagged = farms
    pages = [reverse("admin:index"), reverse("acct-drift")]
    for farm in farms:
        proc = farm.procs[0]
        pages += [
            reverse("acct-drift-show", args=[farm.show.pk]),
            reverse("acct-drift-repair", args=[farm.show.pk]) if not farm.show.b_scheduler_managed else None,
            reverse("admin:shows_show_change", args=[farm.show.pk]),
            reverse("admin:accounting_subscription_change", args=[farm.subscription.pk]),
            reverse("admin:accounting_proc_change", args=[proc.pk]),
            reverse("admin:accounting_folderresource_change", args=[farm.folder.pk]),
            reverse("admin:accounting_jobresource_change", args=[farm.job.pk]),
            reverse("admin:accounting_layerresource_change", args=[farm.layer.pk]),
        ]
    for model in ("subscription", "proc", "folderresource", "jobresource", "layerresource", "point"):
        pages.append(reverse(f"admin:accounting_{model}_changelist"))
    answers = {page: admin_client.get(page).status_code for page in pages if page}
    assert {url: code for url, code in answers.items() if code != 200} == {}


def test_every_api_read_and_write_answers(era_without_redis, farms, token_with):
    from django.test import Client

    flagged, unflagged = farms
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token_with(VIEW_ACCOUNTING, CHANGE_LIMITS, CHANGE_OWNERSHIP)}")
    reads = [
        "/api/v1/shows",
        f"/api/v1/shows/{flagged.show.str_name}",
        "/api/v1/accounting/drift",
        f"/api/v1/accounting/drift?show={unflagged.show.str_name}",
        f"/api/v1/accounting/drift?show={flagged.show.str_name}",
        "/api/v1/locks",
    ]
    answers = {url: client.get(url).status_code for url in reads}
    point = Point.objects.get(show=unflagged.show)
    writes = {
        f"/api/v1/accounting/subscriptions/{flagged.subscription.pk}/limits": {"size": 20, "burst": 40},
        f"/api/v1/accounting/folders/{flagged.folder.pk}/limits": {"max_cores": 30},
        f"/api/v1/accounting/jobs/{unflagged.job.pk}/limits": {"max_cores": 30},
        f"/api/v1/accounting/points/{point.pk}/limits": {"min_cores": 3},
        f"/api/v1/shows/{unflagged.show.str_name}/scheduler-managed": {"managed": True},
    }
    for url, body in writes.items():
        send = client.put if url.endswith("scheduler-managed") else client.patch
        answers[url] = send(url, body, content_type="application/json").status_code
    assert {url: code for url, code in answers.items() if code != 200} == {}


def test_the_locks_endpoint_names_recalculate_subs_postgresql_lock(era_without_redis, reader_client):
    assert reader_client.get("/api/v1/locks").json() == []
    with connection.cursor() as cursor:  # a run elsewhere holds it, as its transaction does
        cursor.execute("SELECT pg_advisory_lock(hashtext(%s)), pg_backend_pid()", [RECALCULATE_SUBS_LOCK])
        (_, pid) = cursor.fetchone()
        try:
            held = reader_client.get("/api/v1/locks").json()
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [RECALCULATE_SUBS_LOCK])
    assert held == [{"name": "recalculate_subs", "owner": f"PostgreSQL backend {pid}", "ttl_ms": None}]


def test_the_subscription_pages_and_the_drift_api_speak_of_the_maestro_era(
    maestro_era, farms, admin_client, reader_client
):
    """On current OpenCue Cuebot counts every show, flagged or not, in its row, and no Redis counts
    any: the subscription admin names no Redis count and no recompute lag, and the drift API's
    farm-wide answer carries no part for the Redis check (no `"checked_at": null` of a check that
    never runs in this era)."""
    from tests.accounting.operators.test_admin_overview import visible_text

    flagged, _ = farms
    listing = visible_text(admin_client.get(reverse("admin:accounting_subscription_changelist")).content.decode())
    form = admin_client.get(reverse("admin:accounting_subscription_change", args=[flagged.subscription.pk]))
    for text in (listing, visible_text(form.content.decode())):
        assert "Redis" not in text and "last recompute" not in text and "Cuebot's count" in text
    body = reader_client.get("/api/v1/accounting/drift").json()
    assert list(body) == ["source", "cuebot_tables", "drifted_rows"]


def test_in_the_notify_era_a_flagged_shows_row_is_said_to_be_kept_by_nobody(notify_era, farms, admin_client):
    """The scheduler counts a flagged show from what it hears and nothing recomputes the row until
    the show moves back: neither "last recompute" nor its schedule is named."""
    from tests.accounting.operators.test_admin_overview import visible_text

    listing = visible_text(admin_client.get(reverse("admin:accounting_subscription_changelist")).content.decode())
    assert "(not kept)" in listing and "(Cuebot's count)" in listing
    assert "last recompute" not in listing and "acct-reconcile-booked" not in listing
    assert "recounted from the procs when the show moves back to Cuebot" in listing
