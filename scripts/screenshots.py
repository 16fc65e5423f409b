#!/usr/bin/env python
"""Screenshots of the operator's admin pages, taken by headless Chromium against a running
service (`make run`): the login page, the farm overview, the subscription list and a
subscription's change form, the drift index and a show's drift page, a show's page and a
proc's page (the list is PAGES below).

It logs in through the admin's login form as a temporary superuser it creates for the run
and deletes afterwards, and drives Chromium over its DevTools protocol (a WebSocket, spoken
here with the standard library only, so that the suite's browser test can reuse the same
client: tests/accounting/operators/test_admin_in_chromium.py). Usage (docs/admin.md#screenshots):

    make screenshots                     # or: .venv/bin/python scripts/screenshots.py --url http://127.0.0.1:8000
"""

import argparse
import base64
import json
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
MISSING_BROWSER = (
    "no Chromium found (looked for chromium, chromium-browser, google-chrome). "
    "On Debian: apt-get install -y chromium (`make test` installs it: scripts/services.py up --tests)"
)
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
USERNAME = "screenshots-bot"


class DevTools:
    """A minimal client of one page's DevTools WebSocket: send a command, wait for its reply,
    wait for an event (one that arrived while waiting for a reply is kept, not lost)."""

    def __init__(self, ws_url: str, *, timeout: float = 30):
        host_port, path = ws_url.removeprefix("ws://").split("/", 1)
        host, port = host_port.split(":")
        self.timeout = timeout
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        self.sock.sendall(
            (
                f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            response += self.sock.recv(4096)
        if b" 101 " not in response.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"DevTools refused the WebSocket: {response.splitlines()[0]!r}")
        self.buffer = response.split(b"\r\n\r\n", 1)[1]
        self.next_id = 0
        self.events: list[str] = []

    def close(self) -> None:
        self.sock.close()

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("DevTools closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def _frame(self) -> bytes:
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._read(8))[0]
            message += self._read(length)
            if first & 0x80:  # FIN
                return message

    def _send(self, text: str) -> None:
        payload = text.encode()
        mask = secrets.token_bytes(4)
        header = bytes([0x81])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self._frame())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply["method"])

    def wait_for_event(self, method: str) -> None:
        """Until the event arrives (or already did since the last wait); the socket's timeout bounds each read."""
        deadline = time.monotonic() + self.timeout
        while method not in self.events:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {method} within {self.timeout} s")
            self.events.append(json.loads(self._frame()).get("method", ""))
        self.events.clear()

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def login(self, base: str, *, username: str, password: str) -> None:
        """Through the admin's login form, as a person does; raises if the admin sends it back."""
        self.open(f"{base}/admin/login/")
        self.events.clear()
        self.evaluate(
            f"document.getElementById('id_username').value = {json.dumps(username)};"
            f"document.getElementById('id_password').value = {json.dumps(password)};"
            "document.querySelector('#login-form').submit();"
        )
        self.wait_for_event("Page.loadEventFired")
        if self.evaluate("location.pathname").startswith("/admin/login"):
            raise RuntimeError(f"login as {username} failed")

    def screenshot(self, path: Path, *, width: int) -> int:
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return len(data)


def find_browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def start_browser(binary: str, profile: str) -> tuple[subprocess.Popen, str]:
    """Chromium with an empty profile; (the process, its first page's DevTools WebSocket URL)."""
    browser = subprocess.Popen(
        [
            binary,
            *BROWSER_FLAGS,
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1280,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    try:
        # Chromium announces its endpoint on stderr ("DevTools listening on ws://…"): reading up to
        # that line waits for the event itself; the rest of stderr is drained so Chromium never blocks on it.
        seen = []
        for line in browser.stderr:
            seen.append(line)
            if found := re.search(r"DevTools listening on ws://([^/]+)/", line):
                break
        else:
            raise RuntimeError(f"chromium stopped before its DevTools endpoint: {''.join(seen[-5:])}")
        threading.Thread(target=browser.stderr.read, daemon=True).start()
        with urllib.request.urlopen(f"http://{found.group(1)}/json/list", timeout=30) as response:
            page = next(t for t in json.load(response) if t["type"] == "page")
    except BaseException:
        stop_browser(browser)
        raise
    return browser, page["webSocketDebuggerUrl"]


def stop_browser(browser: subprocess.Popen) -> None:
    browser.terminate()
    try:
        browser.wait(timeout=10)
    except subprocess.TimeoutExpired:
        browser.kill()
        browser.wait()


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
        ("show.png", f"/admin/shows/show/{show_id}/change/"),
        *([("proc.png", f"/admin/accounting/proc/{proc.pk}/change/")] if proc else []),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url", default="http://127.0.0.1:8000", help="the running service (default: http://127.0.0.1:8000)"
    )
    parser.add_argument(
        "--out", default=str(ROOT / "docs" / "screenshots"), help="directory for the PNGs (default: docs/screenshots)"
    )
    parser.add_argument("--width", type=int, default=1280, help="page width in pixels (default: 1280)")
    args = parser.parse_args()

    binary = find_browser()
    if binary is None:
        print(f"screenshots: {MISSING_BROWSER}", file=sys.stderr)
        return 2

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    shots = pages()
    if not shots:
        print(
            "screenshots: no scheduler-managed show with a subscription; run `make run` (it seeds a demo farm)",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    User = get_user_model()
    User.objects.filter(username=USERNAME).delete()
    User.objects.create_superuser(USERNAME, "", password)
    base = args.url.rstrip("/")
    with tempfile.TemporaryDirectory(prefix="acct-screenshots-") as profile:
        browser, ws_url = start_browser(binary, profile)
        try:
            tools = DevTools(ws_url)
            tools.call("Page.enable")
            # The login page first, as a person meets it, then the rest logged in.
            for name, path in [("login.png", "/admin/login/"), *shots]:
                if name != "login.png" and tools.evaluate("location.pathname").startswith("/admin/login"):
                    tools.login(base, username=USERNAME, password=password)
                tools.call(
                    "Emulation.setDeviceMetricsOverride",
                    width=args.width,
                    height=900,
                    deviceScaleFactor=1,
                    mobile=False,
                )
                tools.open(base + path)
                size = tools.screenshot(out / name, width=args.width)
                print(f"screenshots: {out / name} ({size // 1024} KB) <- {path}")
            tools.close()
        finally:
            stop_browser(browser)
            User.objects.filter(username=USERNAME).delete()
    return 0


if __name__ == "__main__":
    sys.exit(main())
