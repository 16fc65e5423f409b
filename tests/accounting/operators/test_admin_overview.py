"""The farm overview (the admin's front page), the drift pages by name, and "reseed this show"."""

import html
import logging
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from accounting.live import keys
from accounting.live.leases import named_lock
from accounting.models import FolderResource, Instance, Subscription
from accounting.operators import pages
from accounting.reconcile.drift_check import run_check
from accounting.reconcile.redis_against_pg import REDIS_FIELDS, drift_report
from accounting.reconcile.reseed import FARM_LOCK, seed_show
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES
from infra.redis_factory import accounting_redis
from tests.farms import build_farm
from tests.processes import closed_port
from tests.service_role import as_cuebot

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_redis")]


def visible_text(page: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]*>", " ", page)))


def staff(django_user_model, *codenames: str, username: str = "operator"):
    user = django_user_model.objects.create_user(username=username, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def test_the_admin_index_is_the_overview(admin_client, acct_redis):
    managed = build_farm(managed=True, size=16000, burst=32000, host_cores=8000)
    cuebot = build_farm(managed=False, size=1000, burst=2050)
    managed.add_proc(cores=7000)
    cuebot.add_proc(cores=250)
    seed_show(show_id=managed.show.id)
    acct_redis.hset(keys.sub(show_id=managed.show.id, alloc_id=managed.alloc.id), "int_cores", 75)  # live, and drifted
    run_check(REDIS_FIELDS)
    Instance.objects.create(
        host="render-web-1",
        pid=42,
        role="web",
        publishes_to_redis=True,
        version="1.0",
        started_at=timezone.now(),
        last_seen=timezone.now(),
    )

    page = admin_client.get(reverse("admin:index"))
    text = visible_text(page.content.decode())

    assert page.status_code == 200 and "Farm overview" in text
    # The row (70, from the proc) differs from the tampered Redis (75): shown beside it, with why.
    assert (
        f"{managed.show.str_name} Scheduler Redis live {managed.alloc.str_name}: 75 / 160 (320) cores "
        f"· PostgreSQL row 70 drift: Redis is 5 cores above SUM(proc) now counted per proc"
    ) in text
    assert (
        f"{cuebot.show.str_name} Cuebot PostgreSQL row (Cuebot's count) {cuebot.alloc.str_name}: 2.5 / 10 (20.5) cores"
        in text
    )
    assert "1 field differs" in text and "Drift last checked" in text
    assert "OK: every live instance tells the scheduler of its releases on Redis" in text
    assert "render-web-1" in text and "Subscriptions" in text  # the fleet, and the usual table list below
    assert managed.show.pk not in text and managed.alloc.pk not in text


def test_the_overview_names_a_fleet_member_that_does_not_publish(admin_client):
    build_farm(managed=True)
    Instance.objects.create(
        host="old-tasks",
        pid=7,
        role="tasks",
        publishes_to_redis=False,
        version="0.9",
        started_at=timezone.now(),
        last_seen=timezone.now(),
    )
    text = visible_text(admin_client.get(reverse("admin:index")).content.decode())
    assert "MISCONFIGURED" in text and "old-tasks pid 7" in text


def test_maestro_era_the_overview_names_a_stranded_show_with_its_fix_and_asks_for_no_publishing(admin_client, settings):
    settings.ACCOUNTING_SCHEDULER = "maestro"
    stranded, booking = build_farm(managed=True), build_farm(managed=True)
    for farm in (stranded, booking):
        farm.add_frame()
    booking.add_proc(cores=100)
    Instance.objects.create(
        host="maestro-web",
        pid=7,
        role="web",
        publishes_to_redis=False,
        version="1.0",
        started_at=timezone.now(),
        last_seen=timezone.now(),
    )

    text = visible_text(admin_client.get(reverse("admin:index")).content.decode())

    name = stranded.show.str_name
    assert (
        "STRANDED: 1 scheduler-managed show with waiting frames and no proc booked for 10 minutes; Cuebot's "
        f"dispatcher skips flagged shows, so nothing books it: nothing books show {name}: turn Maestro on for it "
        f"(maestro.enabled=managed, or facility for every show) or clear its flag: set_scheduler_managed {name} off"
    ) in text
    assert f"nothing books show {booking.show.str_name}" not in text
    assert "Publishing: none needed. Maestro era" in text
    assert "MISCONFIGURED" not in text and "ACCOUNTING_REDIS_ENABLED" not in text


def test_maestro_era_every_show_is_counted_in_cuebots_tables_and_a_flagged_one_is_maestros(admin_client, settings):
    settings.ACCOUNTING_SCHEDULER = "maestro"
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"  # no Redis is read
    flagged = build_farm(managed=True)
    flagged.add_proc(cores=250)
    run_check(CUEBOT_TABLES)
    with as_cuebot():
        Subscription.objects.filter(pk=flagged.subscription.pk).update(int_cores=900)
        FolderResource.objects.filter(folder=flagged.folder).update(int_cores=900)
    run_check(CUEBOT_TABLES)

    page = admin_client.get(reverse("admin:index")).content.decode()
    row = visible_text(page.split(flagged.show.str_name, 1)[1].split("</tr>", 1)[0])

    assert "Maestro PostgreSQL row (Cuebot's count)" in row
    assert "9 / 100 (200) cores" in row  # the row as stored: 900 centicores
    assert "missing in Redis" not in page and "Redis live" not in row
    assert "2 rows of Cuebot's tables off SUM(proc)" in row
    text = visible_text(page)
    assert "Cuebot's tables last checked against SUM(proc)" in text and "Drift not checked yet" not in text


def test_a_staff_user_without_rights_reads_the_overview(client, django_user_model):
    build_farm(managed=True)
    client.force_login(staff(django_user_model))
    assert client.get(reverse("admin:index")).status_code == 200


def test_the_drift_page_names_keys_and_the_index_says_which_show_drifts(admin_client, acct_redis):
    clean, farm = build_farm(managed=True), build_farm(managed=True)
    farm.add_proc(cores=200)
    for f in (clean, farm):
        seed_show(show_id=f.show.id)
    acct_redis.hset(keys.folder(folder_id=farm.folder.id), "int_cores", 5)
    acct_redis.hset(keys.job(job_id=farm.job.id), "int_max_cores", 3)
    acct_redis.hset(keys.layer(layer_id=farm.layer.id), "int_cores", 9)
    acct_redis.hset(keys.point(dept_id=farm.dept.id, show_id=farm.show.id), "int_min_cores", 4)
    run_check(REDIS_FIELDS)

    text = visible_text(admin_client.get(reverse("acct-drift-show", args=[farm.show.pk])).content.decode())
    show, job = farm.show.str_name, farm.job.str_name
    assert f"folder {show} / root cores booked int_cores 5 2" in text
    assert f"job {show} / {job} max cores int_max_cores 3 100" in text
    assert f"layer {show} / {job} / render cores booked int_cores 9 2" in text
    assert f"{show} / {farm.dept.str_name} min cores int_min_cores 4 0" in text
    assert "acct:" not in text and farm.folder.pk not in text
    assert f"manage.py acct_reseed --show {show}" in text

    index = visible_text(admin_client.get(reverse("acct-drift")).content.decode())
    assert f"{show} 4 of" in index and f"{clean.show.str_name} none" in index


def test_reseed_this_show_asks_then_reseeds_and_logs(admin_client, acct_redis, caplog):
    farm = build_farm(managed=True)
    farm.add_proc(cores=300)
    seed_show(show_id=farm.show.id)
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    acct_redis.hset(sub, "int_cores", 40)
    url = reverse("acct-drift-reseed", args=[farm.show.pk])

    confirm = admin_client.get(url)
    assert confirm.status_code == 200 and f"Reseed {farm.show.str_name}?" in confirm.content.decode()
    assert acct_redis.hget(sub, "int_cores") == "40"  # nothing before the POST

    with caplog.at_level(logging.WARNING, logger="accounting.operators.pages"):
        done = admin_client.post(url, follow=True)
    assert acct_redis.hget(sub, "int_cores") == "3"
    assert drift_report(show_ids=[farm.show.id]).rows == []
    assert any(f"Reseeded {farm.show.str_name}" in str(m) for m in done.context["messages"])
    entry = LogEntry.objects.get(object_id=farm.show.pk)
    assert entry.user.username == "admin" and entry.change_message.startswith("Reseeded Redis")
    assert [r.getMessage() for r in caplog.records] == [
        f"admin reseed of show {farm.show.str_name} by admin: booked: 5 keys, limits: 12 fields written"
    ]


def test_reseed_needs_the_permission(client, django_user_model, acct_redis):
    farm = build_farm(managed=True)
    seed_show(show_id=farm.show.id)
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    acct_redis.hset(sub, "int_cores", 40)
    client.force_login(staff(django_user_model))
    page = client.get(reverse("acct-drift-show", args=[farm.show.pk])).content.decode()
    assert reverse("acct-drift-reseed", args=[farm.show.pk]) not in page and "You need the permission" in page
    assert client.post(reverse("acct-drift-reseed", args=[farm.show.pk])).status_code == 403
    assert acct_redis.hget(sub, "int_cores") == "40"


def test_reseed_refuses_a_cuebot_managed_show(admin_client, acct_redis):
    farm = build_farm(managed=False)
    response = admin_client.post(reverse("acct-drift-reseed", args=[farm.show.pk]), follow=True)
    assert any("Cuebot-managed" in str(m) for m in response.context["messages"])
    assert acct_redis.keys("acct:*") == [keys.SEEDED]


@pytest.mark.parametrize("era", ["maestro", "notify"])
def test_reseed_refuses_an_era_without_a_redis_live_view(era, request, admin_client):
    request.getfixturevalue(f"{era}_era")
    farm = build_farm(managed=True)
    response = admin_client.post(reverse("acct-drift-reseed", args=[farm.show.pk]), follow=True)
    assert response.status_code == 200
    assert [str(m) for m in response.context["messages"]] == [
        {
            "maestro": f"Maestro era: no Redis to reseed; manage.py acct_reseed --show {farm.show.str_name} "
            "repairs Cuebot's tables.",
            "notify": "Notify era: no Redis to reseed; the scheduler recomputes its own counters from SUM(proc).",
        }[era]
    ]
    assert not LogEntry.objects.exists()


def test_the_drift_page_of_a_cuebot_managed_show_compares_nothing(admin_client):
    farm = build_farm(managed=False)
    text = visible_text(admin_client.get(reverse("acct-drift-show", args=[farm.show.pk])).content.decode())
    assert "is Cuebot-managed: Redis holds nothing for it" in text
    assert "fields differ" not in text and "Reseed this show" not in text


def test_reseed_refuses_an_empty_redis_and_a_held_lock(admin_client, acct_redis):
    farm = build_farm(managed=True)
    url = reverse("acct-drift-reseed", args=[farm.show.pk])
    acct_redis.flushdb()  # a restarted Redis: no acct:seeded marker
    response = admin_client.post(url, follow=True)
    assert any("needs the whole-farm bootstrap" in str(m) for m in response.context["messages"])
    assert acct_redis.keys("acct:*") == []

    acct_redis.set(keys.SEEDED, keys.SEEDED_VALUE)
    with named_lock(name=FARM_LOCK, ttl_seconds=60):
        response = admin_client.post(url, follow=True)
    assert any("Another reseed holds the lock" in str(m) for m in response.context["messages"])
    assert acct_redis.keys("acct:sub:*") == []


def test_a_redis_that_cannot_be_read_is_named_on_the_overview(admin_client, settings):
    build_farm(managed=True)
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    accounting_redis.cache_clear()
    try:
        page = admin_client.get(reverse("admin:index"))
    finally:
        accounting_redis.cache_clear()
    text = visible_text(page.content.decode())
    assert page.status_code == 200
    assert "The accounting Redis could not be read: ConnectionError" in text and "missing in Redis" in text


def test_an_allocation_beyond_its_size_or_burst_is_marked(admin_client):
    beyond_size, beyond_burst = (
        build_farm(managed=False, size=100, burst=200),
        build_farm(managed=False, size=100, burst=200),
    )
    beyond_size.add_proc(cores=150)
    beyond_burst.add_proc(cores=250)
    page = admin_client.get(reverse("admin:index")).content.decode()
    text = visible_text(page)
    assert f"{beyond_size.alloc.str_name}: 1.5 / 1 (2) cores beyond size" in text
    assert f"{beyond_burst.alloc.str_name}: 2.5 / 1 (2) cores beyond burst" in text
    assert "acct-over-size" in page and "acct-over-burst" in page


def test_the_shows_that_need_attention_come_first_and_the_rest_a_page_away(admin_client, monkeypatch):
    monkeypatch.setattr(pages, "SHOWS_PER_PAGE", 2)
    quiet, full, beyond_size, beyond_burst = (build_farm(managed=False, size=1000, burst=2000) for _ in range(4))
    full.add_proc(cores=900)
    beyond_size.add_proc(cores=1500)
    beyond_burst.add_proc(cores=2500)

    def shows_listed(page: str) -> list[str]:
        return re.findall(r'<a href="/admin/shows/show/[^/]+/change/"><strong>([^<]+)</strong>', page)

    first = admin_client.get(reverse("admin:index")).content.decode()
    second = admin_client.get(reverse("admin:index"), {"page": 2}).content.decode()
    assert shows_listed(first) + shows_listed(second) == [
        s.show.str_name for s in (beyond_burst, beyond_size, full, quiet)
    ]
    text = visible_text(first)
    assert "2 of 4 shows need attention (drifted, missing in Redis, beyond burst or beyond size)" in text
    assert "Shows 1–2 of 4 here." in text and "Pages of shows: 1 2 next ›" in text
    assert 'href="?page=2"' in first


def test_the_sidebar_offers_the_operator_pages_on_every_admin_page(admin_client):
    build_farm(managed=True)
    for url in (reverse("admin:accounting_subscription_changelist"), reverse("acct-drift")):
        page = admin_client.get(url).content.decode()
        assert f'<a href="{reverse("admin:index")}">Farm overview</a>' in page
        assert f'href="{reverse("acct-drift")}"' in page and ">Accounting drift</a>" in page


def test_breadcrumbs_start_at_home_on_every_operator_page(admin_client):
    farm = build_farm(managed=True)
    home = f'<a href="{reverse("admin:index")}">Home</a>'
    for url, last in (
        (reverse("acct-drift"), "Accounting drift"),
        (reverse("acct-drift-show", args=[farm.show.id]), farm.show.str_name),
        (reverse("acct-drift-reseed", args=[farm.show.id]), "Reseed"),
    ):
        crumbs = admin_client.get(url).content.decode().split('<div class="breadcrumbs">')[1].split("</div>")[0]
        assert crumbs.startswith(home) and crumbs.rstrip().endswith(last), (url, crumbs)


def test_a_shows_page_links_to_its_subscriptions_folders_jobs_and_drift(admin_client):
    farm = build_farm(managed=True)
    page = admin_client.get(reverse("admin:shows_show_change", args=[farm.show.id])).content.decode()
    subscriptions = reverse("admin:accounting_subscription_changelist") + f"?show__id__exact={farm.show.id}"
    assert f'href="{subscriptions}"' in page and f'href="{reverse("acct-drift-show", args=[farm.show.id])}"' in page
    listed = admin_client.get(subscriptions)  # a filter the changelist takes: 200, not a redirect to ?e=1
    assert listed.status_code == 200 and farm.alloc.str_name in listed.content.decode()
