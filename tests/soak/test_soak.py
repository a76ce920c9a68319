"""The chaos soak's short variant (3 minutes, `--long`): the whole pipeline on the real
servers under the seeded nemesis, every fire accounted for (docs/soak.md). The seed is
$SWITCHYARD_SOAK_SEED, else drawn and printed: a failure replays its nemesis from it."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.servers import server_url
from tests.soak.run import run_soak

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_three_minutes_under_the_nemesis_fire_every_occurrence_on_the_side_that_owns_it(tmp_path: Path) -> None:
    for name in ("mariadb", "pulsar", "etcd"):
        server_url(name)
    seed = int(os.environ.get("SWITCHYARD_SOAK_SEED") or random.SystemRandom().randrange(100_000))
    report = run_soak(3, seed, tmp_path)
    print(f"\n{report.table()}")
    # what failed, by name (pytest's temporary directories are rotated away: the report
    # in tmp_path is soon gone, and a seed does not replay the processes' timing)
    named = [*report.missing[:10], *report.doubled[:10], *report.stray[:10]]
    assert report.passed, (
        f"seed {seed}: {report.failures}\n{report.table()}\n"
        + "\n".join(named)
        + f"\nlogs and report.json in {tmp_path}"
    )
