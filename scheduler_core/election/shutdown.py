"""Quiet shutdown of the etcd clients' asyncio side: background tasks cancelled and
waited out, a client closed within a bound, whatever either ends with (the election,
the shard registry and the wake-up watch all stop this way)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aetcd


async def cancel_quietly(*tasks: asyncio.Task[Any]) -> None:
    """Cancel `tasks` and wait them out, whatever they end with."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


async def close_quietly(client: aetcd.Client | None, timeout_s: float) -> None:
    """Close `client` within `timeout_s`, whatever the close ends with."""
    if client is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), timeout_s)
