"""glibc's malloc arenas, capped for the long-running processes.

glibc gives a thread that allocates while another holds an arena an arena of its own, up
to 8 per core, and memory freed in one arena is reused only there. A scheduler runs
20-odd threads (the partition loops, the fire pool, the Pulsar and gRPC clients' own) and
had 15 arenas after a minute; over the chaos soak its RSS kept rising with the Python
heap flat (tracemalloc: ~15 MB of ~100 MB RSS). Two arenas (what MALLOC_ARENA_MAX=2 sets,
the usual cure for a threaded service's RSS creep) keep the freed memory where the next
allocation finds it; the allocations are short (rows, messages) and the contention on two
arenas does not show beside the network and database round trips.

An operator's MALLOC_ARENA_MAX, when set, is left to glibc (it read it at start).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)
M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
ARENAS = 2


def cap_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's arenas for what this process allocates from now on (call it before the
    threads start); False where it does not apply (not glibc, or the operator set it)."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt, no per-thread arenas
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = bool(mallopt(M_ARENA_MAX, arenas))
    if not done:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", arenas)
    return done


__all__ = ["cap_malloc_arenas"]
