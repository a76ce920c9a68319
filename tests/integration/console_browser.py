"""The console served as an operator starts it (`switchyard console` in a subprocess) and
Debian's headless Chromium pointed at it: shared by the browser test and the bench."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.argv_urls import urls_in_env

REPO = Path(__file__).resolve().parents[2]
CONSOLE_LINE = re.compile(r":CONSOLE[:(]\d*\)?\]\s*(.*)")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def console_process(url: str, legacy_urls: Sequence[str], log: Path) -> Iterator[str]:
    """`switchyard console` on a free loopback port; yields its base URL; SIGTERM after."""
    port = free_port()
    args = ["console", "--url", url, "--port", str(port)]
    for legacy in legacy_urls:
        args += ["--legacy-url", legacy]
    args, env = urls_in_env(args, {k: v for k, v in os.environ.items() if k != "SWITCHYARD_CONSOLE_TOKEN"})
    args = [sys.executable, "-m", "switchyard", *args]
    with log.open("w") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(REPO), env=env
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                urllib.request.urlopen(base + "/api/scheduler", timeout=5).close()
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise AssertionError("the console did not answer within 60 s: " + log.read_text()[-2000:]) from None
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def run_chromium(url: str, profile: Path, *mode: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on `url` with a profile of its own; `mode`: --dump-dom, --screenshot..."""
    found = chromium()
    assert found is not None
    args = [
        found,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *mode,
        url,
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)


def console_messages(stderr: str) -> list[str]:
    return [m.group(1) for line in stderr.splitlines() if (m := CONSOLE_LINE.search(line))]
