"""An executor process's identity: the id its heartbeat's row in the executor registry
(`dus_executor.instance_id`) has, and that its results name, so a run in the run log
leads to the process that ran it."""

from __future__ import annotations

import uuid


def new_instance_id() -> str:
    """A fresh id (32 hex digits): one per process start, never reused, so a restarted
    process is a new registry row and its runs are told from the old one's."""
    return uuid.uuid4().hex
