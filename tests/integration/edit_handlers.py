"""Handlers for the schedule-edit test's executor process (`switchyard executor run
--handlers tests.integration.edit_handlers`): every migrated xxl-job job runs through the
bridge's handler name; each invocation is appended to $FENCE_INVOCATIONS as the
rollback-fence test's handlers do."""

from __future__ import annotations

from tests.integration.fence_handlers import record

HANDLERS = {"xxl-job-bridge": record}
