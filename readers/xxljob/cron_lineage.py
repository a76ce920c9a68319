"""Which Quartz line an xxl-job admin's `CronExpression` follows (docs/cron.md).

xxl-job ships a copy of Quartz's class (shared/notes/xxl-job.md §0, §4): 2.1.0 - 3.0.0
"borrowed from quartz v2.3.1" (behaves as Quartz 2.3.2), 3.1.0 - 3.3.2 from 2.5.0, 3.4.0
on from 2.5.2. Its dialect decides which expressions the admin accepts and when they
fire, so each migrated cron carries it.

The version is best given (`--xxl-job-version`). Without it, the schema tells it where it
can: the 2.2 schema (2.1 - 2.2) is Quartz 2.3; the 3.4 and master schemas are 2.5; the
2.4 schema (2.3.0 - 3.3.x) with `xxl_job_user.token` is 3.2 or later, so 2.5. The 2.4
schema without that column is 2.3.0 - 3.1.x and cannot be told apart: taken as 2.3.0 -
3.0.0 (Quartz 2.3; 3.1.x is two releases of a range of seven), said in the reader's log,
with Quartz 2.5 as the fallback: an expression Quartz 2.3 rejects but 2.5 accepts can only
have been saved by a 3.1.x admin (each admin validates a cron with its own class), so it
is migrated as 2.5 rather than quarantined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from readers.legacy_ddl.tables import XxlJobLineage

QUARTZ_23 = "2.3"
QUARTZ_25 = "2.5"
FIRST_QUARTZ_25 = (3, 1, 0)  # the first release whose copy is Quartz 2.5's
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


@dataclass(frozen=True, slots=True)
class CronLineage:
    dialect: str  # "2.3" or "2.5"
    why: str  # how it was told, for the log and the plan
    fallback: str = ""  # the other line when the version is not known for sure ("" when it is)


def parse_version(version: str) -> tuple[int, int, int]:
    """'2.4.2' -> (2, 4, 2); 'X.Y' is X.Y.0. Anything else raises ValueError."""
    m = _VERSION.match(version.strip())
    if m is None:
        raise ValueError(f"xxl-job version {version!r}: expected MAJOR.MINOR[.PATCH], e.g. 2.4.2")
    major, minor, patch = int(m[1]), int(m[2]), int(m[3] or 0)
    if (major, minor) < (2, 1):
        raise ValueError(
            f"xxl-job version {version!r}: before 2.1.0 xxl-job ran Quartz itself "
            "(its QRTZ_ tables), which this reader does not read"
        )
    return major, minor, patch


def cron_lineage(lineage: XxlJobLineage, *, version: str | None = None, user_token: bool = False) -> CronLineage:
    if version is not None:
        v = parse_version(version)
        dialect = QUARTZ_25 if v >= FIRST_QUARTZ_25 else QUARTZ_23
        return CronLineage(dialect, f"xxl-job {version} (given)")
    if lineage is XxlJobLineage.V2_2:
        return CronLineage(QUARTZ_23, "the 2.2 schema: xxl-job 2.1.0 - 2.2.x")
    if lineage in (XxlJobLineage.V3_4, XxlJobLineage.MASTER):
        return CronLineage(QUARTZ_25, f"the {lineage.value} schema: xxl-job 3.4.0 or later")
    if user_token:
        return CronLineage(QUARTZ_25, "the 2.4 schema with xxl_job_user.token: xxl-job 3.2.0 - 3.3.x")
    return CronLineage(
        QUARTZ_23,
        "the 2.4 schema without xxl_job_user.token: xxl-job 2.3.0 - 3.1.x, taken as "
        "2.3.0 - 3.0.0, a cron only Quartz 2.5 accepts as 3.1.x's (pass --xxl-job-version "
        "to say which)",
        fallback=QUARTZ_25,
    )
