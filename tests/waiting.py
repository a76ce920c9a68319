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
