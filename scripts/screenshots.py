#!/usr/bin/env python
"""Screenshots of the operator's admin pages, taken by headless Chromium against a running
service (`make run`): the login page, the farm overview, the subscription list and a
subscription's change form, the drift index and a show's drift page, the usage page, a show's
page and a proc's page (the list is `pages` below).

It logs in through the admin's login form as a temporary superuser it creates for the run
and deletes afterwards. Selenium drives Chromium through Debian's chromedriver, named by its
path so that Selenium Manager never looks for (or downloads) a driver of its own; the suite's
browser test starts its Chromium here too (tests/accounting/operators/test_admin_in_chromium.py).
Usage (docs/admin.md#screenshots):

    make screenshots                     # or: .venv/bin/python scripts/screenshots.py --url http://127.0.0.1:8000
"""

import argparse
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# Debian's chromium-driver package: the driver of the chromium package's own release.
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# This machine's network is closed: without these, Chromium's background connections (updates,
# sync, QUIC probes) are refused many at a time and slow every start.
BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
HEIGHT = 900  # a page is loaded this tall (the screenshots' viewport), then shot at its full height
USERNAME = "screenshots-bot"


def find_browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def missing() -> str | None:
    """What is not installed of Chromium and its driver, and how to install it; None if both are."""
    if find_browser() is None:
        return (
            "no Chromium found (looked for chromium, chromium-browser, google-chrome). On Debian: "
            "apt-get install -y chromium chromium-driver (`make test` installs both: scripts/services.py up --tests)"
        )
    if not CHROMEDRIVER.is_file():
        return (
            f"no chromedriver at {CHROMEDRIVER}. On Debian: apt-get install -y chromium-driver "
            "(`make test` installs it: scripts/services.py up --tests)"
        )
    return None


def start_browser(*, profile: str, width: int) -> webdriver.Chrome:
    """Headless Chromium with the empty profile `profile`, its window `width` pixels wide (its
    viewport too: the window's frame is only above the page), under Selenium. The caller quits it."""
    binary = find_browser()
    if binary is None or not CHROMEDRIVER.is_file():
        raise RuntimeError(missing())
    options = Options()
    options.binary_location = binary
    for flag in (*BROWSER_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{HEIGHT}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    return driver


def follow(driver: webdriver.Chrome, action: Callable[[], None], *, timeout: float = 30) -> None:
    """Do `action` (a click that leaves the page, a form's submit) and return once the page it
    loads has replaced this one: the old page's root element goes stale."""
    page = driver.find_element(By.TAG_NAME, "html")
    action()
    WebDriverWait(driver, timeout).until(expected_conditions.staleness_of(page))


def path_of(driver: webdriver.Chrome) -> str:
    return driver.execute_script("return location.pathname")


def log_in(driver: webdriver.Chrome, base: str, *, username: str, password: str) -> None:
    """Through the admin's login form, typed and submitted as a person does; raises if the
    admin sends it back."""
    driver.get(f"{base}/admin/login/")
    driver.find_element(By.ID, "id_username").send_keys(username)
    driver.find_element(By.ID, "id_password").send_keys(password)
    follow(driver, driver.find_element(By.CSS_SELECTOR, "#login-form [type=submit]").click)
    if path_of(driver).startswith("/admin/login"):
        raise RuntimeError(f"login as {username} failed")


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's header chunk (IHDR, the first, right after the signature)."""
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def set_viewport(driver: webdriver.Chrome, *, width: int, height: int) -> None:
    """Make the page's viewport `width` x `height`. WebDriver sizes the window, and headless
    Chromium's window keeps a frame around the page (143 pixels of height in Chromium 156):
    the window gets the viewport plus that frame, as the page measures it."""
    frame_width, frame_height = driver.execute_script(
        "return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]"
    )
    driver.set_window_size(width + frame_width, height + frame_height)


def screenshot(driver: webdriver.Chrome, path: Path, *, width: int) -> int:
    """The whole page, `width` pixels wide and as tall as its content, into `path`; its size in bytes."""
    # WebDriver's window has the focus, so an autofocused field (the login form's) would be shot
    # with its focus ring and, or not, its blinking caret: the picture would depend on the moment.
    driver.execute_script("document.activeElement?.blur()")
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    set_viewport(driver, width=width, height=height)
    data = driver.get_screenshot_as_png()
    if png_size(data) != (width, height):
        raise RuntimeError(f"{path.name}: Chromium drew {png_size(data)}, not the page's {(width, height)}")
    path.write_bytes(data)
    return len(data)


def pages() -> list[tuple[str, str]]:
    """(file name, path) of every page shot, the demo farm's scheduler-managed show first,
    which is where the drift and booked sources show; empty if there is no such show."""
    from accounting.models import Proc, Subscription

    subscription = (
        Subscription.objects.filter(show__b_scheduler_managed=True)
        .select_related("show")
        .order_by("show__str_name", "alloc__str_name")
        .first()
    )
    if subscription is None:
        return []
    show_id = subscription.show_id
    proc = Proc.objects.filter(show_id=show_id).order_by("host__str_name", "ts_booked").first()
    return [
        ("overview.png", "/admin/"),
        ("subscriptions.png", "/admin/accounting/subscription/"),
        ("subscription-form.png", f"/admin/accounting/subscription/{subscription.pk}/change/"),
        ("drift-index.png", "/admin/accounting/drift/"),
        ("drift.png", f"/admin/accounting/drift/{show_id}/"),
        ("usage.png", "/admin/accounting/usage/"),
        ("show.png", f"/admin/shows/show/{show_id}/change/"),
        *([("proc.png", f"/admin/accounting/proc/{proc.pk}/change/")] if proc else []),
    ]


def main() -> int:
    args = arguments()
    if problem := missing():
        print(f"screenshots: {problem}", file=sys.stderr)
        return 2

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    import django

    django.setup()
    shots = pages()
    if not shots:
        print(
            "screenshots: no scheduler-managed show with a subscription; run `make run` (it seeds a demo farm)",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    take(shots=shots, base=args.url.rstrip("/"), out=out, width=args.width)
    return 0


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url", default="http://127.0.0.1:8000", help="the running service (default: http://127.0.0.1:8000)"
    )
    parser.add_argument(
        "--out", default=str(ROOT / "docs" / "screenshots"), help="directory for the PNGs (default: docs/screenshots)"
    )
    parser.add_argument("--width", type=int, default=1280, help="page width in pixels (default: 1280)")
    return parser.parse_args()


def take(*, shots: list[tuple[str, str]], base: str, out: Path, width: int) -> None:
    """Every page as a superuser made for the run (removed afterwards), the login page first."""
    from django.contrib.auth import get_user_model

    password = secrets.token_urlsafe(24)
    User = get_user_model()
    User.objects.filter(username=USERNAME).delete()
    User.objects.create_superuser(USERNAME, "", password)
    with tempfile.TemporaryDirectory(prefix="acct-screenshots-") as profile:
        driver = start_browser(profile=profile, width=width)
        try:
            # The login page first, as a person meets it, then the rest logged in.
            for name, path in [("login.png", "/admin/login/"), *shots]:
                if name != "login.png" and path_of(driver).startswith("/admin/login"):
                    log_in(driver, base, username=USERNAME, password=password)
                set_viewport(driver, width=width, height=HEIGHT)
                driver.get(base + path)
                size = screenshot(driver, out / name, width=width)
                print(f"screenshots: {out / name} ({size // 1024} KB) <- {path}")
        finally:
            driver.quit()
            User.objects.filter(username=USERNAME).delete()


if __name__ == "__main__":
    sys.exit(main())
