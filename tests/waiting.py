"""Waiting on observed state in tests: a bounded poll, never a fixed sleep standing in for it."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(check: Callable[[], bool], within_s: float, every_s: float = 0.1) -> bool:
    """True as soon as `check()` holds; its last answer once `within_s` has passed."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(every_s)
    return check()


def wait_for(check: Callable[[], object], what: str, within_s: float, every_s: float = 0.05) -> None:
    """Return as soon as `check()` is truthy; fail the test naming `what` once `within_s`
    has passed without it."""
    assert until(lambda: bool(check()), within_s, every_s), f"timed out after {within_s} s waiting for {what}"


def stays(check: Callable[[], bool], for_s: float, every_s: float = 0.02) -> bool:
    """True if `check()` holds at every look for `for_s` seconds; False at the first look
    where it does not. For what must not happen: a window watched the whole time, not a
    sleep and one look at its end."""
    end = time.monotonic() + for_s
    while time.monotonic() < end:
        if not check():
            return False
        time.sleep(every_s)
    return check()
