"""Headless Chromium (Debian's `chromium` package) driven over the DevTools protocol on a pipe: open a page, collect
its console errors and uncaught exceptions, evaluate JavaScript, take a screenshot. No driver and no download:
the browser's own --remote-debugging-pipe (file descriptors 3 and 4, JSON messages ended by a NUL byte).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_missing() -> str | None:
    """Why no browser can run here, or None."""
    if not any(shutil.which(c) for c in CANDIDATES):
        return "no Chromium on PATH (Debian: apt-get install chromium; .ci/setup installs it when root)"
    return None


class Browser:
    """One headless Chromium with one page. Use as a context manager."""

    def __init__(self, width: int = 1280, height: int = 900, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.errors: list[str] = []  # console.error calls, uncaught exceptions, failed loads
        self._profile = tempfile.mkdtemp(prefix="offsetlake-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        binary = next(shutil.which(c) for c in CANDIDATES if shutil.which(c))
        # The browser reads commands on fd 3 and writes on fd 4.
        self._process = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
             f"--user-data-dir={self._profile}", f"--window-size={width},{height}", "about:blank"],
            pass_fds=(3, 4), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=lambda: _as_fds_3_and_4(to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self._session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def call(self, method: str, session: bool = False, **params: Any) -> dict:
        """Send one command and wait for its answer (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._note(reply)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self._events.clear()
        self.call("Page.navigate", session=True, url=url)
        self.wait_for(lambda e: e.get("method") == "Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_until(self, expression: str, timeout_s: float | None = None) -> Any:
        """Poll `expression` until it is truthy; its value."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"{expression} still false after {timeout_s or self.timeout_s}s")

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", session=True, **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def wait_for(self, predicate: Any) -> dict:
        deadline = time.monotonic() + self.timeout_s
        for event in self._events:
            if predicate(event):
                return event
        while True:
            event = self._read(deadline)
            self._note(event)
            if predicate(event):
                return event

    def _note(self, event: dict) -> None:
        self._events.append(event)
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                           for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.errors.append(f"log: {params['entry']['text']} {params['entry'].get('url', '')}".strip())

    def _read(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # noqa: BLE001 - it may be gone already
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)


def _as_fds_3_and_4(read_end: int, write_end: int) -> None:
    """In the child before exec: the browser's command pipe as fd 3, its answer pipe as fd 4."""
    r, w = os.dup(read_end), os.dup(write_end)  # above 4 first, so that dup2 never overwrites its own source
    os.dup2(r, 3)
    os.dup2(w, 4)
    os.set_inheritable(3, True)
    os.set_inheritable(4, True)
