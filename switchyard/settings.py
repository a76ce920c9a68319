"""Settings from the environment, with the embedded defaults."""
from __future__ import annotations

import os

from scheduler_core.store.engine import DEFAULT_SQLITE_URL


def default_store_url() -> str:
    return os.environ.get("SWITCHYARD_URL", DEFAULT_SQLITE_URL)
