"""The suite's own order under pytest-xdist (tests/conftest.py): the test files with the
most recorded seconds first, each file's tests together and in their own order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pytest

from tests.conftest import DURATIONS, recorded_file_seconds, slowest_files_first

RECORDED = """
# a comment line
92.48s call     tests/integration/test_b.py::test_one[leader]
51.45s setup    tests/unit/test_c.py::test_x[case-a]
10.00s call     tests/unit/test_c.py::test_y
12.38s teardown tests/integration/test_b.py::test_one[leader]
=========================== short test summary info ============================
"""


@dataclass
class _Item:
    nodeid: str


def test_seconds_are_summed_per_file_over_every_phase() -> None:
    assert recorded_file_seconds(RECORDED) == pytest.approx(
        {"tests/integration/test_b.py": 104.86, "tests/unit/test_c.py": 61.45}
    )


def test_the_longest_files_come_first_and_a_files_tests_stay_together_in_order() -> None:
    ids = [
        "tests/a.py::t1",
        "tests/unit/test_c.py::test_x[case-a]",
        "tests/integration/test_b.py::test_one[leader]",
        "tests/unit/test_c.py::test_y",
        "tests/d.py::t1",
        "tests/a.py::t2",
        "tests/integration/test_b.py::test_two",
    ]
    items = cast(list[pytest.Item], [_Item(i) for i in ids])
    ordered = [i.nodeid for i in slowest_files_first(items, recorded_file_seconds(RECORDED))]
    assert ordered == [
        "tests/integration/test_b.py::test_one[leader]",
        "tests/integration/test_b.py::test_two",
        "tests/unit/test_c.py::test_x[case-a]",
        "tests/unit/test_c.py::test_y",
        "tests/a.py::t1",  # unrecorded files: collection order
        "tests/a.py::t2",
        "tests/d.py::t1",
    ]


def test_the_recorded_file_names_files_of_this_suite() -> None:
    seconds = recorded_file_seconds(DURATIONS.read_text())
    assert seconds, "tests/durations.txt lists no durations"
    root = DURATIONS.parent.parent
    gone = [f for f in seconds if not (root / f).exists()]
    assert not gone, f"tests/durations.txt names files that no longer exist (run scripts/test-durations): {gone}"
