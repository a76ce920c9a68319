"""Bridges: SDK handlers that keep a migrated job's legacy handler running unchanged.

A migrated job's handler name is `batch-center-bridge` or `xxl-job-bridge` and its
params are the JSON the migrator builds (migrator/mapping.py `_params`). A team that
rewrites the handler natively registers it under the job code, which the executor
looks up before the handler name, so the bridge stops being used for that job.

    executor = Executor(bus, biz_code)
    register_batch_center_bridge(executor, token_provider)
    xxl = register_xxl_job_bridge(executor, XxlJobBridge(access_token=..., address_provider=...))
    ...
    xxl.close()

The wire details live in the two modules' docstrings.
"""

from __future__ import annotations

from scheduler_core.executor.bridge_batchcenter import (
    BATCH_CENTER_HANDLER,
    TOKEN_HEADER,
    BatchCenterBridge,
    CallbackRequest,
    register_batch_center_bridge,
    resolve_url,
)
from scheduler_core.executor.bridge_xxljob import (
    ACCESS_TOKEN_HEADER,
    XXL_JOB_HANDLER,
    CallbackResult,
    LogIdAllocator,
    XxlJobBridge,
    bridge_job_id,
    looks_like_address,
    parse_callbacks,
    register_xxl_job_bridge,
)

__all__ = [
    "ACCESS_TOKEN_HEADER",
    "BATCH_CENTER_HANDLER",
    "TOKEN_HEADER",
    "XXL_JOB_HANDLER",
    "BatchCenterBridge",
    "CallbackRequest",
    "CallbackResult",
    "LogIdAllocator",
    "XxlJobBridge",
    "bridge_job_id",
    "looks_like_address",
    "parse_callbacks",
    "register_batch_center_bridge",
    "register_xxl_job_bridge",
    "resolve_url",
]
