"""The admin as an operator meets it, in a real headless Chromium through a live server.

Django's test client reads the HTML; only a browser lays it out. The first look at the admin
found a farm table running past the page (the drift column cut off) and a subscription list
scrolling sideways, which every test-client test passed. This test logs in through the login
form, as a person does, and checks what must be seen: the overview with its sources legend,
tables that fit the page, and the sidebar's links to the overview and the drift pages, followed
by a click. It drives Chromium with scripts/screenshots.py's DevTools client (the standard
library only). Chromium is a prerequisite like promtool: `make test` installs it
(scripts/services.py up --tests), and its absence fails here, never skips.
"""

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from accounting.models import Subscription
from accounting.reconcile.reseed import seed_show
from tests.farms import build_farm
from tests.processes import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from screenshots import DevTools, find_browser, start_browser, stop_browser  # noqa: E402

PASSWORD = "a-browser-test-password"
WIDTH = 1280  # the width of docs/screenshots/, a laptop's admin


MISSING = (
    "Chromium is missing, and the admin's browser test needs it: `make test` installs it "
    "(scripts/services.py up --tests, Debian's chromium package), or: apt-get install -y chromium"
)


@contextmanager
def chromium_page(profile: Path) -> Iterator[DevTools]:
    """A page of a fresh headless Chromium, its DevTools client; the browser is stopped after.
    Asserted, not a fixture, so that a missing Chromium is this test's failure, not a setup error."""
    binary = find_browser()
    assert binary, MISSING
    browser, ws_url = start_browser(binary, str(profile))
    tools = DevTools(ws_url, timeout=15)
    try:
        tools.call("Page.enable")
        tools.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=900, deviceScaleFactor=1, mobile=False)
        yield tools
    finally:
        tools.close()
        stop_browser(browser)


def fits_the_page(tools: DevTools, selector: str) -> dict:
    """Where the element's right edge is against its module's (the box it is drawn in) and the
    page's, and whether the element scrolls sideways."""
    return tools.evaluate(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
        if (!e) return {{found: false}};
        const box = e.parentElement.closest('.module') || document.documentElement;
        return {{found: true, right: Math.round(e.getBoundingClientRect().right),
                 module: Math.round(box.getBoundingClientRect().right), page: document.documentElement.clientWidth,
                 scrolls: e.scrollWidth > e.clientWidth + 1}}; }})()""")


@pytest.mark.django_db(transaction=True)
def test_an_operator_logs_in_and_sees_the_overview_the_sources_and_the_way_to_the_drift_pages(
    live_server, django_user_model, seeded_redis, tmp_path
):
    farm = build_farm(managed=True)
    for cores in (250, 250, 100):  # 6 cores reserved, which Redis counts as 5
        farm.add_proc(cores=cores)
    seed_show(show_id=farm.show.id)
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_cores=700)  # the row as a recompute left it
    django_user_model.objects.create_superuser("operator", "", PASSWORD)
    base = live_server.url

    with chromium_page(tmp_path / "profile") as chromium:
        chromium.login(base, username="operator", password=PASSWORD)
        assert chromium.evaluate("location.pathname") == "/admin/"  # the farm overview is where a login lands
        overview = chromium.evaluate("document.body.innerText")
        assert "Farm overview" in overview and farm.show.str_name in overview
        assert "Where booked cores come from." in overview
        for source in ("Redis live", "PostgreSQL row", "SUM(proc) now"):
            assert source in overview
        assert "rounding: Redis truncates each proc's cores to whole cores" in overview  # why the two numbers differ
        shows_table = fits_the_page(chromium, "table.acct-table")
        assert shows_table["found"] and shows_table["right"] <= min(shows_table["module"], shows_table["page"]), (
            f"the shows table runs past its box: {shows_table}"
        )
        drift_link = chromium.evaluate(
            f"document.querySelector('a[href=\"/admin/accounting/drift/{farm.show.pk}/\"]') !== null"
        )
        assert drift_link, "the overview links the show to its drift page"

        chromium.open(f"{base}/admin/accounting/subscription/")
        sidebar = chromium.evaluate(
            "[...document.querySelectorAll('#nav-sidebar a')].map(a => [a.textContent.trim(), a.pathname])"
        )
        assert ["Farm overview", "/admin/"] in sidebar and ["Accounting drift", "/admin/accounting/drift/"] in sidebar
        listing = fits_the_page(chromium, "#changelist .results")
        assert listing["found"] and not listing["scrolls"], f"the subscription list scrolls sideways: {listing}"
        assert "Where booked cores come from." in chromium.evaluate("document.querySelector('#changelist').innerText")
        # The other accounting lists (cores and GPUs per row) fit beside the sidebar and the filter too.
        for model in ("folderresource", "jobresource", "layerresource", "point", "proc"):
            chromium.open(f"{base}/admin/accounting/{model}/")
            listing = fits_the_page(chromium, "#changelist .results")
            assert listing["found"] and not listing["scrolls"], f"the {model} list scrolls sideways: {listing}"

        # The sidebar's link, clicked as a person clicks it.
        chromium.events.clear()
        chromium.evaluate(
            "[...document.querySelectorAll('#nav-sidebar a')].find(a => a.textContent.trim() == 'Accounting drift').click()"
        )
        chromium.wait_for_event("Page.loadEventFired")
        assert chromium.evaluate("location.pathname") == "/admin/accounting/drift/"
        drift_index = chromium.evaluate("document.querySelector('#content').innerText")
        assert "Accounting drift" in drift_index and farm.show.str_name in drift_index


def submit(chromium: DevTools, script: str) -> None:
    """Run `script` (which fills and submits a form) and wait for the page it loads."""
    chromium.events.clear()
    chromium.evaluate(script)
    chromium.wait_for_event("Page.loadEventFired")


@pytest.mark.django_db(transaction=True)
def test_an_operator_types_a_burst_in_cores_finds_a_drifted_show_and_reseeds_it(
    live_server, django_user_model, seeded_redis, tmp_path
):
    farm = build_farm(managed=True)
    farm.add_proc(cores=300)
    seed_show(show_id=farm.show.id)
    sub_key = f"acct:sub:{farm.show.id}:{farm.alloc.id}"
    django_user_model.objects.create_superuser("operator", "", PASSWORD)
    base = live_server.url
    form = f"{base}/admin/accounting/subscription/{farm.subscription.pk}/change/"
    type_burst = (
        "document.getElementById('id_int_burst').value = {value};document.querySelector('#subscription_form').submit();"
    )

    with chromium_page(tmp_path / "profile") as chromium:
        chromium.login(base, username="operator", password=PASSWORD)

        # A burst typed in cores: a fraction finer than hundredths is refused with the sentence every face uses...
        chromium.open(form)
        submit(chromium, type_burst.format(value=json.dumps("2.125")))
        assert "Cores are stored in hundredths: use at most two decimals" in chromium.evaluate(
            "document.body.innerText"
        )
        assert Subscription.objects.get(pk=farm.subscription.pk).int_burst == 20000  # nothing changed
        # ...and two decimals are taken, stored in centicores, published in whole cores.
        submit(chromium, type_burst.format(value=json.dumps("250.5")))
        assert chromium.evaluate("location.pathname") == "/admin/accounting/subscription/"
        assert Subscription.objects.get(pk=farm.subscription.pk).int_burst == 25050
        assert seeded_redis.hget(sub_key, "burst") == "250"

        # Redis drifts (a lost decrement, by hand): the drift page names the key by its show and allocation.
        seeded_redis.hset(sub_key, "int_cores", 9)
        chromium.open(f"{base}/admin/accounting/drift/{farm.show.pk}/")
        drift = chromium.evaluate("document.querySelector('#content').innerText")
        assert f"{farm.show.str_name} / {farm.alloc.str_name}" in drift and "show gone" not in drift

        # Reseed it: a confirmation first, then the outcome, and no drift left.
        submit(
            chromium, "[...document.querySelectorAll('#content a')].find(a => a.pathname.endsWith('/reseed/')).click()"
        )
        confirm = chromium.evaluate("document.querySelector('#content').innerText")
        assert f"This rebuilds the Redis keys of {farm.show.str_name}" in confirm
        assert seeded_redis.hget(sub_key, "int_cores") == "9"  # the GET changed nothing
        submit(chromium, "document.querySelector('#content form').submit()")
        assert chromium.evaluate("location.pathname") == f"/admin/accounting/drift/{farm.show.pk}/"
        assert f"Reseeded {farm.show.str_name}: booked:" in chromium.evaluate("document.body.innerText")
        assert seeded_redis.hget(sub_key, "int_cores") == "3"
