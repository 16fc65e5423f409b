"""The subscription gauges at /metrics: every subscription's booked, size and burst equal to its row in
cores (as the observer, which writes nothing), a change as Cuebot makes it in the next scrape, no
series left behind by a rename or a deleted subscription, booked from the source the admin's
overview names in each era, and a read that cannot be made leaves the rest of /metrics served."""

import logging
import shutil
import subprocess
import threading

import psycopg
import pytest
from django.db import connection
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from accounting.live import keys
from accounting.models import Subscription
from accounting.operators.overview import farm_overview
from accounting.release.unbook import unbook_proc
from accounting.usage import snapshot
from shows.models import Host, Show
from tests.accounting.operators.test_observer import observing
from tests.accounting.operators.test_release_cut_off import _dsn
from tests.farms import build_farm
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db

GAUGES = ("cuebot_acct_subscription_", "cuebot_acct_allocation_", "cuebot_acct_show_")


def scrape() -> dict[tuple[str, tuple], float]:
    """The gauges of one GET /metrics, by name and labels."""
    answer = Client().get("/metrics")
    assert answer.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.content.decode())
        for sample in family.samples
        if sample.name.startswith(GAUGES)
    }


def expected() -> dict[tuple[str, tuple], float]:
    """What the rows say, in cores: one series per subscription (allocation, show) and measure."""
    found = {}
    for sub in Subscription.objects.select_related("show", "alloc__facility"):
        labels = (
            ("allocation", sub.alloc.str_name),
            ("facility", sub.alloc.facility.str_name),
            ("show", sub.show.str_name),
        )
        found[("cuebot_acct_subscription_reserved_cores", labels)] = sub.int_cores / 100
        found[("cuebot_acct_subscription_reserved_gpus", labels)] = sub.int_gpus
        found[("cuebot_acct_subscription_size_cores", labels)] = sub.int_size / 100
        found[("cuebot_acct_subscription_burst_cores", labels)] = -1 if sub.int_burst == -1 else sub.int_burst / 100
    for host in Host.objects.select_related("alloc__facility"):
        labels = (("allocation", host.alloc.str_name), ("facility", host.alloc.facility.str_name))
        for name, value in (
            ("cores", host.int_cores / 100),
            ("idle_cores", host.int_cores_idle / 100),
            ("gpus", host.int_gpus),
            ("idle_gpus", host.int_gpus_idle),
        ):
            key = (f"cuebot_acct_allocation_{name}", labels)
            found[key] = found.get(key, 0) + value
    for show in Show.objects.all():
        found[("cuebot_acct_show_scheduler_managed", (("show", show.str_name),))] = float(show.b_scheduler_managed)
    return found


def observed(settings) -> dict[tuple[str, tuple], float]:
    """A scrape as the observer (ACCOUNTING_WRITES=off, SELECT alone), which changes no row of Cuebot's;
    then writes are on again, for what the test plays as Cuebot."""
    with observing(settings):
        scraped = scrape()
    settings.ACCOUNTING_WRITES = True
    return scraped


def labels_of(farm) -> tuple:
    return (
        ("allocation", farm.alloc.str_name),
        ("facility", farm.alloc.facility.str_name),
        ("show", farm.show.str_name),
    )


def test_as_the_observer_every_subscription_is_its_row_in_cores_and_a_change_is_in_the_next_scrape(
    settings, maestro_era
):
    flagged, cuebots = build_farm(managed=True), build_farm(managed=False, size=150, burst=1000)
    held = flagged.add_proc(cores=250, gpus=1)
    cuebots.add_proc(cores=100)
    with as_cuebot(), connection.cursor() as cursor:  # a burst of -1, as a site may hold it (nothing books there)
        cursor.execute("UPDATE subscription SET int_burst = -1 WHERE pk_subscription = %s", [flagged.subscription.id])
    first = observed(settings)
    assert first == expected()
    assert first[("cuebot_acct_subscription_reserved_cores", labels_of(flagged))] == 2.5
    assert first[("cuebot_acct_subscription_burst_cores", labels_of(flagged))] == -1

    # As Cuebot changes them: a booking, a release, then cueadmin's size and burst, each in the next scrape.
    cuebots.add_proc(cores=300)
    assert observed(settings)[("cuebot_acct_subscription_reserved_cores", labels_of(cuebots))] == 4
    assert unbook_proc(proc_id=held.id) is not None
    assert observed(settings)[("cuebot_acct_subscription_reserved_cores", labels_of(flagged))] == 0
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE subscription SET int_size = 5000, int_burst = 7000 WHERE pk_subscription = %s",
            [cuebots.subscription.id],
        )
    last = observed(settings)
    assert last == expected()
    assert last[("cuebot_acct_subscription_size_cores", labels_of(cuebots))] == 50
    assert last[("cuebot_acct_subscription_burst_cores", labels_of(cuebots))] == 70


def test_a_renamed_show_and_a_deleted_subscription_leave_no_series(maestro_era):
    renamed, dropped = build_farm(managed=False), build_farm(managed=False)
    old_name = renamed.show.str_name
    assert ("cuebot_acct_subscription_size_cores", labels_of(dropped)) in scrape()
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute("UPDATE show SET str_name = 'renamed' WHERE pk_show = %s", [renamed.show.id])
        cursor.execute("DELETE FROM subscription WHERE pk_subscription = %s", [dropped.subscription.id])
    after = scrape()
    assert after == expected()
    assert old_name not in {dict(labels).get("show") for _, labels in after}
    assert not [
        labels for name, labels in after if "subscription" in name and ("show", dropped.show.str_name) in labels
    ]
    assert after[("cuebot_acct_subscription_size_cores", labels_of(renamed)[:2] + (("show", "renamed"),))] == 100


@pytest.mark.parametrize("era", ["redis", "notify", "maestro"])
def test_booked_is_what_the_overview_names_in_every_era(request, acct_redis, era):
    if era != "redis":
        request.getfixturevalue(f"{era}_era")
    flagged, cuebots = build_farm(managed=True), build_farm(managed=False)
    flagged.add_proc(cores=250, gpus=2)
    cuebots.add_proc(cores=300)
    # The scheduler's own count, in whole cores (the Redis era's truncation of 2.5 cores), and GPUs.
    acct_redis.hset(
        keys.sub(show_id=flagged.show.id, alloc_id=flagged.alloc.id), mapping={"int_cores": 2, "int_gpus": 2}
    )

    booked = {
        (dict(labels)["show"], dict(labels)["allocation"]): value
        for (name, labels), value in scrape().items()
        if name == "cuebot_acct_subscription_reserved_cores"
    }
    overview = {
        (show.show.str_name, use.alloc): use.booked / 100
        for show in farm_overview().shows
        for use in show.allocations
        if use.booked is not None
    }
    assert booked == overview
    # The scheduler's truncated count in the Redis era; none in the NOTIFY era, whose Redis does not answer here.
    assert (
        booked.get((flagged.show.str_name, flagged.alloc.str_name)) == {"redis": 2, "notify": None, "maestro": 2.5}[era]
    )


@pytest.mark.django_db(transaction=True)
def test_a_read_that_cannot_be_made_leaves_the_gauges_out_and_serves_the_rest(maestro_era, monkeypatch, caplog):
    """A migration holds host's lock: the read is cancelled at its timeout, not waited out."""
    build_farm(managed=False)
    monkeypatch.setattr(snapshot, "READ_TIMEOUT_MS", 200)
    locked, holding = threading.Event(), threading.Event()

    def migration() -> None:
        with psycopg.connect(_dsn()) as cuebot, cuebot.transaction():
            cuebot.execute("SET LOCAL lock_timeout = '10s'")
            cuebot.execute("LOCK TABLE host IN ACCESS EXCLUSIVE MODE")
            locked.set()
            holding.wait(30)

    holder = threading.Thread(target=migration)
    holder.start()
    try:
        assert locked.wait(30)
        with caplog.at_level(logging.WARNING, logger="accounting.usage.gauges"):
            answer = Client().get("/metrics")
    finally:
        holding.set()
        holder.join()
    body = answer.content.decode()
    assert answer.status_code == 200 and "cuebot_acct_releases_total" in body
    assert "cuebot_acct_subscription_reserved_cores{" not in body
    assert "statement timeout" in caplog.text
    assert scrape() == expected()  # and the next scrape has them again


def test_odd_names_are_exposed_exactly_and_promtool_finds_nothing_to_lint(maestro_era):
    """Label values escaped as Prometheus's text format has them (the gauges write it themselves:
    accounting.usage.gauges.exposition), and the whole of /metrics clean for `promtool check metrics`."""
    farm = build_farm(managed=True)
    farm.add_proc(cores=125)
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute("UPDATE show SET str_name = %s WHERE pk_show = %s", ['odd "show" \\ two\nlines', farm.show.id])
    assert scrape() == expected()
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make test` installs it (Debian's prometheus package)"
    done = subprocess.run(
        [promtool, "check", "metrics"], input=Client().get("/metrics").content, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
