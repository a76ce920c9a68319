"""A stop event set by SIGTERM and SIGINT, so long-running commands stop cleanly."""
from __future__ import annotations

import signal
import threading


def stop_event() -> threading.Event:
    stop = threading.Event()

    def _handler(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    return stop
