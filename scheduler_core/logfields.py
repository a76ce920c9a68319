"""The fields an operator filters the scheduler's log lines on, spelled once.

A logging call passes `extra=log_fields(...)`; the text format shows the message as
before, and `--log-format json` (switchyard/logs.py) emits each field as a key of the
line's JSON object, so "every line of business B" or "partition 3 under epoch 7" is a
filter, not a regular expression over the messages."""

from __future__ import annotations


def log_fields(
    *,
    biz_code: str | None = None,
    partition: int | None = None,
    epoch: int | None = None,
    fence: str | None = None,
    trigger_id: int | None = None,
    command_id: str | None = None,
    member: str | None = None,
) -> dict[str, object]:
    """The given fields (None: not about that), as `extra=` for a logging call."""
    given = {
        "business": biz_code,
        "partition": partition,
        "epoch": epoch,
        "fence": fence,
        "trigger_id": trigger_id,
        "command_id": command_id,
        "member": member,
    }
    return {k: v for k, v in given.items() if v is not None}
