"""Where the real servers are, and what a test does when one is missing.

`scripts/stack up` writes <stack dir>/env with the servers' URLs; the test command sources
it. Locally a missing server skips its tests; under CI (CI=true) it fails them, so a
run without a server can never be reported green.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load_stack_env() -> None:
    env_file = Path(os.environ.get("SWITCHYARD_STACK_DIR", REPO / ".stack")) / "env"
    if not env_file.exists():
        return
    for line in env_file.read_text().splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export ") :]
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            os.environ.setdefault(key, value.strip().strip('"').strip("'"))


_load_stack_env()

SERVER_ENV = {
    "mariadb": "SWITCHYARD_MARIADB_URL",
    "etcd": "SWITCHYARD_ETCD_URL",
    "pulsar": "SWITCHYARD_PULSAR_URL",
}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _reachable(url: str) -> bool:
    parsed = urlparse(url.replace("mysql+pymysql", "mysql"))
    host, port = parsed.hostname or "127.0.0.1", parsed.port
    if port is None:
        return False
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def missing(what: str) -> None:
    """A required tool or server is absent: skip locally, fail under CI."""
    if in_ci():
        pytest.fail(f"{what} (required under CI)", pytrace=False)
    pytest.skip(what)


def server_url(name: str, env: str | None = None) -> str:
    """The URL of a real server, or skip (locally) / fail (CI) when it is not there."""
    var = env or SERVER_ENV[name]
    url = os.environ.get(var)
    problem = None
    if not url:
        problem = f"{var} is not set: run `scripts/stack up`"
    elif not _reachable(url):
        problem = f"{name} is not reachable at {var}"
    if problem is not None:
        if in_ci():
            pytest.fail(f"{name} server missing under CI: {problem}", pytrace=False)
        pytest.skip(problem)
    assert url is not None
    return url
