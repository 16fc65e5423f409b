#!/usr/bin/env python
"""Screenshots of the operator's admin pages, taken by headless Chromium against a running
service (`make run`): the farm overview, a subscription's change form and a show's drift page.

It logs in through the admin's login form as a temporary superuser it creates for the run
and deletes afterwards, and drives Chromium over its DevTools protocol (a WebSocket, spoken
here with the standard library only). Usage (docs/admin.md#screenshots):

    make screenshots                     # or: .venv/bin/python scripts/screenshots.py --url http://127.0.0.1:8000
"""
import argparse
import base64
import json
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
USERNAME = "screenshots-bot"


class DevTools:
    """A minimal client of one page's DevTools WebSocket: send a command, wait for its reply."""

    def __init__(self, ws_url: str):
        host_port, path = ws_url.removeprefix("ws://").split("/", 1)
        host, port = host_port.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        response = b""
        while b"\r\n\r\n" not in response:
            response += self.sock.recv(4096)
        if b" 101 " not in response.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"DevTools refused the WebSocket: {response.splitlines()[0]!r}")
        self.buffer = response.split(b"\r\n\r\n", 1)[1]
        self.next_id = 0

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

    def wait_for_event(self, method: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if json.loads(self._frame()).get("method") == method:
                return
        raise RuntimeError(f"no {method} within {timeout} s")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def screenshot(self, path: Path, *, width: int) -> int:
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return len(data)


def start_browser(binary: str, profile: str) -> tuple[subprocess.Popen, str]:
    browser = subprocess.Popen(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    port_file = Path(profile) / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        if browser.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("chromium did not start its DevTools endpoint")
        time.sleep(0.1)  # Chromium writes the file once; there is no event to wait on from here
    port = port_file.read_text().split()[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as response:
        page = next(t for t in json.load(response) if t["type"] == "page")
    return browser, page["webSocketDebuggerUrl"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running service (default: http://127.0.0.1:8000)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"), help="directory for the PNGs (default: docs/screenshots)")
    parser.add_argument("--width", type=int, default=1280, help="page width in pixels (default: 1280)")
    args = parser.parse_args()

    binary = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if binary is None:
        print("screenshots: no Chromium found (looked for chromium, chromium-browser, google-chrome). "
              "On Debian: apt-get install -y chromium", file=sys.stderr)
        return 2

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from accounting.models import Subscription

    subscription = (Subscription.objects.filter(show__b_scheduler_managed=True).select_related("show")
                    .order_by("show__str_name", "alloc__str_name").first())
    if subscription is None:
        print("screenshots: no scheduler-managed show with a subscription; run `make run` (it seeds a demo farm)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(24)
    User = get_user_model()
    User.objects.filter(username=USERNAME).delete()
    User.objects.create_superuser(USERNAME, "", password)
    base = args.url.rstrip("/")
    pages = (
        ("overview.png", "/admin/"),
        ("subscription-form.png", f"/admin/accounting/subscription/{subscription.pk}/change/"),
        ("drift.png", f"/admin/accounting/drift/{subscription.show_id}/"),
    )
    with tempfile.TemporaryDirectory(prefix="acct-screenshots-") as profile:
        browser, ws_url = start_browser(binary, profile)
        try:
            tools = DevTools(ws_url)
            tools.call("Page.enable")
            tools.open(f"{base}/admin/login/")
            tools.evaluate(f"document.getElementById('id_username').value = {json.dumps(USERNAME)};"
                           f"document.getElementById('id_password').value = {json.dumps(password)};"
                           "document.querySelector('form').submit();")
            tools.wait_for_event("Page.loadEventFired")
            if tools.evaluate("location.pathname").startswith("/admin/login"):
                raise RuntimeError("login failed")
            for name, path in pages:
                tools.call("Emulation.setDeviceMetricsOverride", width=args.width, height=900, deviceScaleFactor=1, mobile=False)
                tools.open(base + path)
                size = tools.screenshot(out / name, width=args.width)
                print(f"screenshots: {out / name} ({size // 1024} KB) <- {path}")
        finally:
            browser.terminate()
            browser.wait(timeout=10)
            User.objects.filter(username=USERNAME).delete()
    return 0


if __name__ == "__main__":
    sys.exit(main())
