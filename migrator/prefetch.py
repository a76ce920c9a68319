"""Run a producer one step ahead of its consumer, on its own thread.

A migration run reads, decodes and maps a chunk (Python work, and waits on the legacy
server) and then writes it (mostly waits on the target server). With the next chunk
prepared while the current one is written, the two kinds of waiting overlap.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """The items of `items`, produced on a worker thread at most `depth` ahead. An error
    of the producer is raised in the consumer; a consumer that stops early stops it."""
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            q.put(exc)

    worker = threading.Thread(target=produce, name="migration-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        worker.join(timeout=5)
