"""The target scheduling center: the product the businesses move onto.

It imports none of Switchyard's other packages (checked by import-linter and a test),
so it can be deployed on its own.
"""

from scheduler_core.model import (
    CommandId,
    Epoch,
    ExecutionCommand,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    MisfirePolicy,
    ShardingItem,
    Trigger,
    TriggerId,
    TriggerKind,
    TriggerState,
    command_id,
)

__all__ = [
    "CommandId",
    "Epoch",
    "ExecutionCommand",
    "FiredRecord",
    "FiredState",
    "Job",
    "JobCode",
    "MisfirePolicy",
    "ShardingItem",
    "Trigger",
    "TriggerId",
    "TriggerKind",
    "TriggerState",
    "command_id",
]
