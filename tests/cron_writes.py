"""The target writer's input for one migrated cron job (what `migrate stream` hands it for a
legacy row): a create, and the schedule edits of the tests of schedule edits."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from migrator.mapping import Mapped
from migrator.model import Action
from migrator.target import Write
from scheduler_core.model import Job, JobCode, Trigger, TriggerKind


def cron_write(
    cron: str,
    action: Action,
    first: datetime,
    *,
    biz_code: str = "biz-a",
    job_code: str = "j1",
    handler: str = "h",
    timeout: timedelta | None = None,
) -> Write:
    """`timeout` None: the Job's default."""
    job = Job(job_code=JobCode(job_code), biz_code=biz_code, handler=handler)
    if timeout is not None:
        job = dataclasses.replace(job, timeout=timeout)
    trig = Trigger(job_code=job.job_code, biz_code=biz_code, kind=TriggerKind.CRON, cron=cron, next_fire_at=first)
    return Write(
        action=action,
        source="xxl-job",
        source_key="1",
        biz_code=biz_code,
        mapped=Mapped(job, trig, (), f"hash-{cron}"),
        content_hash=f"hash-{cron}",
    )
