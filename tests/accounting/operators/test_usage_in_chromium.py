"""The usage page as an operator meets it, in headless Chromium through a live server: reached from
the sidebar, asked through its form, its chart laid out (a bar's length is what the show used
against the widest figure, its mark the promise), and its CSV link downloading, as a browser
downloads it, the rows the table shows. Chromium is started as the admin's browser test starts it
(test_admin_in_chromium.chromium_page)."""

import csv
from datetime import UTC, datetime
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from tests.accounting.operators.test_admin_in_chromium import (
    PASSWORD,
    chromium_page,
    fits_the_page,
    follow,
    log_in,
    path_of,
    text_of,
)
from tests.accounting.usage.history_rows import two_shows_with_runs

SINCE = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())
HOUR = 3600


def history() -> tuple:
    """Two shows' runs in November's first week (8 and 2.5 cores), their sizes (4 and 10 cores)
    seen by the service since October."""
    return two_shows_with_runs((SINCE - HOUR, SINCE + 2 * HOUR, 0), (SINCE + 3 * HOUR, SINCE + 4 * HOUR, 1))


def bars(chromium) -> list[dict]:
    """Each bar of the chart as laid out: its name, its fill's and its track's widths and where its
    promise mark stands, in pixels."""
    return chromium.execute_script(
        """return [...document.querySelectorAll('#usage-chart .acct-bar')].map(bar => {
            const track = bar.querySelector('.acct-track').getBoundingClientRect();
            const mark = bar.querySelector('.acct-promised');
            return {name: bar.dataset.name, fill: bar.querySelector('.acct-fill').getBoundingClientRect().width,
                    track: track.width, mark: mark ? mark.getBoundingClientRect().left + 1 - track.left : null};
        });"""
    )


def downloaded(folder: Path) -> Path | None:
    done = [path for path in folder.iterdir() if path.suffix == ".csv"]
    return done[0] if done else None


@pytest.mark.django_db(transaction=True)
def test_the_usage_page_draws_its_chart_and_its_csv_link_downloads_the_tables_rows(
    live_server, django_user_model, tmp_path, monkeypatch
):
    small, big = history()
    django_user_model.objects.create_superuser("operator", "", PASSWORD)
    downloads = tmp_path / "downloads"
    downloads.mkdir()

    with chromium_page(tmp_path / "profile", monkeypatch) as chromium:
        log_in(chromium, live_server.url, username="operator", password=PASSWORD)
        chromium.get(f"{live_server.url}/admin/accounting/subscription/")  # a page with the sidebar (not the index)
        sidebar = chromium.find_element(By.ID, "nav-sidebar").find_element(By.LINK_TEXT, "Usage")
        follow(chromium, sidebar.click)
        assert path_of(chromium) == "/admin/accounting/usage/"

        for field, value in (("id_since", "2026-11-01"), ("id_until", "2026-11-08")):
            chromium.find_element(By.ID, field).clear()
            chromium.find_element(By.ID, field).send_keys(value)
        follow(chromium, chromium.find_element(By.CSS_SELECTOR, "#usage-form [type=submit]").click)

        # 24 and 7.5 core-hours used, 672 and 1680 promised (4 and 10 cores for 168 hours).
        drawn = bars(chromium)
        assert [bar["name"] for bar in drawn] == [small.show.str_name, big.show.str_name]
        track = drawn[0]["track"]
        assert track > 200
        for bar, used, promised in zip(drawn, (24, 7.5), (672, 1680), strict=True):
            assert bar["fill"] == pytest.approx(track * used / 1680, abs=1)
            assert bar["mark"] == pytest.approx(track * promised / 1680, abs=1)
        chromium.save_screenshot(str(tmp_path / "usage.png"))

        table = chromium.execute_script(
            "return [...document.querySelectorAll('#usage-table tr')].map("
            "row => [...row.querySelectorAll('th, td')].map(cell => cell.textContent.trim()))"  # the header as written, not as CSS capitalises it
        )
        assert table[0][:3] == ["show", "allocation", "core_hours"] and len(table) == 3
        laid_out = fits_the_page(chromium, "#usage-table")
        assert laid_out["found"] and laid_out["right"] <= laid_out["page"], f"the table runs past the page: {laid_out}"
        assert "as of " in text_of(chromium, "#usage-notes")

        chromium.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        chromium.find_element(By.ID, "usage-csv").click()
        saved = WebDriverWait(chromium, 30).until(lambda _: downloaded(downloads))
        with saved.open(newline="") as rows:
            assert list(csv.reader(rows)) == table
