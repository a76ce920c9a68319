"""Commands put on the bus by hand, as a fire publishes them, for executor tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduler_core.codec import command_topic, encode_commands
from scheduler_core.model import CommandId, ExecutionCommand, JobCode, TriggerId
from scheduler_core.ports import BusMessage, MessageBus


def publish_command(
    bus: MessageBus, cid: CommandId, trigger_id: int, job_code: str, biz_code: str, scheduled_at: datetime
) -> None:
    """One command of `biz_code`'s job for handler "h" (60 s timeout) on its command topic."""
    command = ExecutionCommand(
        command_id=cid,
        trigger_id=TriggerId(trigger_id),
        job_code=JobCode(job_code),
        biz_code=biz_code,
        handler="h",
        scheduled_at=scheduled_at,
        timeout=timedelta(seconds=60),
    )
    bus.publish([BusMessage(command_topic(biz_code), encode_commands([command]))])
