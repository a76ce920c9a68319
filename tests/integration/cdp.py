"""Debian's headless Chromium driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: commands on the browser's fd 3, answers on its fd 4, each a JSON
message ended by a NUL byte), so a test can log in, fill forms and press their buttons as a
person would: the browser itself sends the cookie, the CSRF field and the POST. No
websocket client, no Playwright: only the chromium the test command already installs."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.integration.console_browser import chromium


class BrowserError(AssertionError):
    pass


class Page:
    """One tab of a headless Chromium, driven by its DevTools session."""

    def __init__(self, profile: Path, timeout_s: float = 30) -> None:
        found = chromium()
        assert found is not None
        self.timeout_s = timeout_s
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds() -> None:  # in the child: the pipe's ends on fds 3 and 4, as Chromium wants them
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                found,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,  # only dup2 in the child, before exec
            close_fds=False,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._answers: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain)

    # -- protocol -----------------------------------------------------------------------

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_chrome, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cv:
                    self._cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self._cv:
                    if "id" in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self._cv.notify_all()

    def _call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        with self._cv:
            self._next_id += 1
            mid = self._next_id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode("utf-8") + b"\0")
        deadline = time.monotonic() + self.timeout_s
        with self._cv:
            while mid not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise BrowserError(f"no answer to {method} within {self.timeout_s} s")
                self._cv.wait(left)
            answer = self._answers.pop(mid)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        return answer.get("result", {})  # type: ignore[no-any-return]

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call(method, params, self.session)

    # -- what a test does ---------------------------------------------------------------

    def js(self, expression: str) -> Any:
        """An expression's value in the page (DevTools' evaluation, not the page's own
        scripts: the console's CSP allows none, and needs to allow none for this)."""
        got = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in got:
            raise BrowserError(f"{expression}: {got['exceptionDetails'].get('text')}")
        return got["result"].get("value")

    def _loaded(self, marker: str | None) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                state = self.js("document.readyState + '|' + (window.__sy_marker === undefined ? 'new' : 'old')")
            except BrowserError:  # the page is between documents
                state = ""
            if state == "complete|new" or (marker is None and state.startswith("complete")):
                return
            time.sleep(0.05)
        raise BrowserError(f"the page did not load within {self.timeout_s} s")

    def goto(self, url: str) -> None:
        self.js("window.__sy_marker = 1")
        self.call("Page.navigate", {"url": url})
        self._loaded("old")

    def fill(self, selector: str, value: str) -> None:
        self.js(f"(e => {{ e.value = {json.dumps(value)}; }})(document.querySelector({json.dumps(selector)}))")

    def check(self, selector: str) -> None:
        self.js(f"document.querySelector({json.dumps(selector)}).checked = true")

    def click(self, selector: str) -> None:
        """Press a button that submits a form, and wait for the answer's page."""
        self.js("window.__sy_marker = 1")
        self.js(f"document.querySelector({json.dumps(selector)}).click()")
        self._loaded("old")

    def text(self, selector: str) -> str:
        got = self.js(f"(e => e ? e.innerText : null)(document.querySelector({json.dumps(selector)}))")
        if got is None:
            raise BrowserError(f"no {selector} on {self.url}: {self.body()[:1500]}")
        return str(got)

    def texts(self, selector: str) -> list[str]:
        return list(self.js(f"Array.from(document.querySelectorAll({json.dumps(selector)})).map(e => e.innerText)"))

    def attr(self, selector: str, name: str) -> str | None:
        got = self.js(
            f"(e => e ? e.getAttribute({json.dumps(name)}) : null)(document.querySelector({json.dumps(selector)}))"
        )
        return None if got is None else str(got)

    def body(self) -> str:
        return str(self.js("document.body ? document.body.innerText : ''"))

    @property
    def url(self) -> str:
        return str(self.js("location.href"))

    def errors(self) -> list[str]:
        """What the page logged as errors (a CSP violation, a failed load)."""
        out = []
        for e in self.events:
            if e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error":
                out.append(e["params"]["entry"].get("text", ""))
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(str(e["params"]))
        return out

    def close(self) -> None:
        try:
            self._call("Browser.close")
        except BrowserError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass


__all__ = ["BrowserError", "Page"]
