"""The admin as an operator meets it, in a real headless Chromium through a live server.

Django's test client reads the HTML; only a browser lays it out. The first look at the admin
found a farm table running past the page (the drift column cut off) and a subscription list
scrolling sideways, which every test-client test passed. This test logs in through the login
form, as a person does, and checks what must be seen: the overview with its sources legend,
tables that fit the page, the sidebar's links to the overview and the drift pages, followed
by a click, and on a drift page each drifted row's age as the periodic check recorded it. It follows Django's convention for browser tests: pytest-django's live_server (the
server of StaticLiveServerTestCase, static files included) and Selenium, driving Chromium
through Debian's chromedriver as scripts/screenshots.py does (which starts the browser for both).
Chromium and chromedriver are prerequisites like promtool: `make test` installs them
(scripts/services.py up --tests), and their absence fails here, never skips.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import F
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.common.selenium_manager import SeleniumManager

from accounting.models import DriftRecord, Subscription
from accounting.reconcile.drift_check import run_check
from accounting.reconcile.redis_against_pg import REDIS_FIELDS
from accounting.reconcile.reseed import seed_show
from tests.farms import build_farm
from tests.processes import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from screenshots import follow, log_in, missing, path_of, start_browser  # noqa: E402

PASSWORD = "a-browser-test-password"
WIDTH = 1280  # the width of docs/screenshots/, a laptop's admin


def selenium_manager_asked(manager: SeleniumManager, args: list[str]) -> dict:
    raise AssertionError(
        f"Selenium Manager was asked for a driver ({' '.join(args)}); chromedriver is named by its path"
    )


@contextmanager
def chromium_page(profile: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Chrome]:
    """A fresh headless Chromium under Selenium, quit after. Asserted, not a fixture, so that a
    missing Chromium or chromedriver is this test's failure, not a setup error. Selenium Manager
    (which looks for a driver, and downloads one, when none is named) fails the start if asked."""
    problem = missing()
    assert problem is None, f"the admin's browser test needs Chromium and its driver: {problem}"
    monkeypatch.setattr(SeleniumManager, "binary_paths", selenium_manager_asked)
    driver = start_browser(profile=str(profile), width=WIDTH)
    try:
        yield driver
    finally:
        driver.quit()


def text_of(driver: Chrome, selector: str) -> str:
    """The element's innerText: its text as laid out, what is shown and nothing hidden (the
    page's own reading, not WebDriver's approximation of visible text)."""
    return driver.execute_script("return document.querySelector(arguments[0]).innerText", selector)


def fits_the_page(driver: Chrome, selector: str) -> dict:
    """Where the element's right edge is against its module's (the box it is drawn in) and the
    page's, and whether the element scrolls sideways."""
    return driver.execute_script(
        """const e = document.querySelector(arguments[0]);
        if (!e) return {found: false};
        const box = e.parentElement.closest('.module') || document.documentElement;
        return {found: true, right: Math.round(e.getBoundingClientRect().right),
                module: Math.round(box.getBoundingClientRect().right), page: document.documentElement.clientWidth,
                scrolls: e.scrollWidth > e.clientWidth + 1};""",
        selector,
    )


@pytest.mark.django_db(transaction=True)
def test_an_operator_logs_in_and_sees_the_overview_the_sources_and_the_way_to_the_drift_pages(
    live_server, django_user_model, seeded_redis, tmp_path, monkeypatch
):
    farm = build_farm(managed=True)
    for cores in (250, 250, 100):  # 6 cores reserved, which Redis counts as 5
        farm.add_proc(cores=cores)
    seed_show(show_id=farm.show.id)
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_cores=700)  # the row as a recompute left it
    django_user_model.objects.create_superuser("operator", "", PASSWORD)
    base = live_server.url

    with chromium_page(tmp_path / "profile", monkeypatch) as chromium:
        log_in(chromium, base, username="operator", password=PASSWORD)
        assert path_of(chromium) == "/admin/"  # the farm overview is where a login lands
        overview = text_of(chromium, "body")
        assert "Farm overview" in overview and farm.show.str_name in overview
        assert "Where booked cores come from." in overview
        for source in ("Redis live", "PostgreSQL row", "SUM(proc) now"):
            assert source in overview
        assert "rounding: Redis truncates each proc's cores to whole cores" in overview  # why the two numbers differ
        shows_table = fits_the_page(chromium, "table.acct-table")
        assert shows_table["found"] and shows_table["right"] <= min(shows_table["module"], shows_table["page"]), (
            f"the shows table runs past its box: {shows_table}"
        )
        drift_links = chromium.find_elements(By.CSS_SELECTOR, f'a[href="/admin/accounting/drift/{farm.show.pk}/"]')
        assert drift_links, "the overview links the show to its drift page"

        chromium.get(f"{base}/admin/accounting/subscription/")
        sidebar = chromium.execute_script(
            "return [...document.querySelectorAll('#nav-sidebar a')].map(a => [a.textContent.trim(), a.pathname])"
        )
        assert ["Farm overview", "/admin/"] in sidebar and ["Accounting drift", "/admin/accounting/drift/"] in sidebar
        listing = fits_the_page(chromium, "#changelist .results")
        assert listing["found"] and not listing["scrolls"], f"the subscription list scrolls sideways: {listing}"
        assert "Where booked cores come from." in text_of(chromium, "#changelist")
        # The other accounting lists (cores and GPUs per row) fit beside the sidebar and the filter too.
        for model in ("folderresource", "jobresource", "layerresource", "point", "proc"):
            chromium.get(f"{base}/admin/accounting/{model}/")
            listing = fits_the_page(chromium, "#changelist .results")
            assert listing["found"] and not listing["scrolls"], f"the {model} list scrolls sideways: {listing}"

        # The sidebar's link, clicked as a person clicks it.
        sidebar_link = chromium.find_element(By.ID, "nav-sidebar").find_element(By.LINK_TEXT, "Accounting drift")
        follow(chromium, sidebar_link.click)
        assert path_of(chromium) == "/admin/accounting/drift/"
        drift_index = text_of(chromium, "#content")
        assert "Accounting drift" in drift_index and farm.show.str_name in drift_index


def cells(driver: Chrome, selector: str) -> list[str]:
    """Each matching cell's text as laid out."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())", selector
    )


def type_burst(chromium: Chrome, value: str) -> None:
    """Type `value` into the subscription form's burst, replacing what is there, and save."""
    field = chromium.find_element(By.ID, "id_int_burst")
    field.clear()
    field.send_keys(value)
    follow(chromium, chromium.find_element(By.CSS_SELECTOR, '#subscription_form [name="_save"]').click)


@pytest.mark.django_db(transaction=True)
def test_an_operator_types_a_burst_in_cores_finds_a_drifted_show_and_reseeds_it(
    live_server, django_user_model, seeded_redis, tmp_path, monkeypatch
):
    farm = build_farm(managed=True)
    farm.add_proc(cores=300)
    seed_show(show_id=farm.show.id)
    sub_key = f"acct:sub:{farm.show.id}:{farm.alloc.id}"
    django_user_model.objects.create_superuser("operator", "", PASSWORD)
    base = live_server.url
    form = f"{base}/admin/accounting/subscription/{farm.subscription.pk}/change/"

    with chromium_page(tmp_path / "profile", monkeypatch) as chromium:
        log_in(chromium, base, username="operator", password=PASSWORD)

        # A burst typed in cores: a fraction finer than hundredths is refused with the sentence every face uses...
        chromium.get(form)
        type_burst(chromium, "2.125")
        assert "Cores are stored in hundredths: use at most two decimals" in text_of(chromium, "body")
        assert Subscription.objects.get(pk=farm.subscription.pk).int_burst == 20000  # nothing changed
        # ...and two decimals are taken, stored in centicores, published in whole cores.
        type_burst(chromium, "250.5")
        assert path_of(chromium) == "/admin/accounting/subscription/"
        assert Subscription.objects.get(pk=farm.subscription.pk).int_burst == 25050
        assert seeded_redis.hget(sub_key, "burst") == "250"

        # Redis drifts (a lost decrement, by hand): the drift page names the key by its show and allocation,
        # and, once the periodic check has seen it (here two hours ago), since when and for how long.
        seeded_redis.hset(sub_key, "int_cores", 9)
        run_check(REDIS_FIELDS)
        DriftRecord.objects.update(first_seen=F("first_seen") - timedelta(hours=2, minutes=5))
        chromium.get(f"{base}/admin/accounting/drift/{farm.show.pk}/")
        drift = text_of(chromium, "#content")
        assert f"{farm.show.str_name} / {farm.alloc.str_name}" in drift and "show gone" not in drift
        assert cells(chromium, "td.drift-age") == ["2 h 5 min"]
        assert cells(chromium, "td.drift-difference") == ["6.00 cores high"]  # 9 against the 3 of SUM(proc)
        assert cells(chromium, "td.drift-since")[0].startswith("since ")

        # Reseed it: a confirmation first, then the outcome, and no drift left.
        follow(chromium, chromium.find_element(By.CSS_SELECTOR, '#content a[href$="/reseed/"]').click)
        confirm = text_of(chromium, "#content")
        assert f"This rebuilds the Redis keys of {farm.show.str_name}" in confirm
        assert seeded_redis.hget(sub_key, "int_cores") == "9"  # the GET changed nothing
        follow(chromium, chromium.find_element(By.CSS_SELECTOR, "#content form [type=submit]").click)
        assert path_of(chromium) == f"/admin/accounting/drift/{farm.show.pk}/"
        assert f"Reseeded {farm.show.str_name}: booked:" in text_of(chromium, "body")
        assert seeded_redis.hget(sub_key, "int_cores") == "3"
        # Back at its sum, the row leaves the list at the next check.
        run_check(REDIS_FIELDS)
        chromium.get(f"{base}/admin/accounting/drift/{farm.show.pk}/")
        assert cells(chromium, "td.drift-age") == []
