"""The long-running commands cap glibc's malloc arenas (switchyard/malloc_arenas.py): with
threads allocating at once, a process makes no more than two, where it made one per
contending thread; an operator's MALLOC_ARENA_MAX is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from switchyard.malloc_arenas import cap_malloc_arenas

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc only"
)

# threads allocating (outside the Python allocator: blocks of 4 KiB go to malloc) at the
# same time; then the count of glibc arena heaps (64 MiB reservations) in the maps
PROBE = textwrap.dedent(
    """
    import sys, threading
    from switchyard.malloc_arenas import cap_malloc_arenas
    if sys.argv[1] == "cap":
        assert cap_malloc_arenas()
    go = threading.Barrier(8)
    def work():
        go.wait()
        for _ in range(200):
            blocks = [bytearray(4096) for _ in range(200)]
            del blocks
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    heaps = 0
    for line in open("/proc/self/maps"):
        start, end = (int(x, 16) for x in line.split()[0].split("-"))
        fields = line.split()
        if len(fields) == 5 and fields[1] == "---p" and (end - start) >= 32 * 1024 * 1024:
            heaps += 1
    print(heaps)
    """
)


def _arena_heaps(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@glibc
def test_threads_allocating_at_once_share_two_arenas_once_capped() -> None:
    assert _arena_heaps("free") > 2  # the default: an arena per contending thread
    assert _arena_heaps("cap") <= 1  # the main arena (not a mapped heap) and one more


def test_an_operators_setting_is_left_to_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert cap_malloc_arenas() is False
