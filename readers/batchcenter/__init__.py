"""The in-house batch center: `bc_biz`, `bc_task`, `bc_task_exec_log` as neutral records,
and its documented flags (`flag.py`: the only legacy writes besides xxl-job's switch)."""

from __future__ import annotations

from readers.batchcenter.reader import BatchCenterReader

__all__ = ["BatchCenterReader"]
