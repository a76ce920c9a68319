"""A port a command will listen on, checked free before the command starts anything: a busy
port is one line naming its option (exit 2), never a console that logs its URL and then
exits, a `serve` that runs on without its console, or "unexpected error (OSError)"."""

from __future__ import annotations

import socket

from switchyard import exitcodes
from switchyard.cli.errors import CliFailure


def ensure_free(option: str, port: int | None, bind: str = "127.0.0.1") -> None:
    """Raise CliFailure (exit 2) when `bind:port` cannot be listened on. SO_REUSEADDR as
    the servers set it (uvicorn, prometheus_client): a port left in TIME_WAIT by a process
    that just ended is free for them, and so for this check."""
    if not port:
        return
    probe = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((bind, port))
        probe.listen(1)
    except OSError as exc:
        raise CliFailure(f"{option} {port}: cannot listen on {bind}:{port} ({exc.strerror})", exitcodes.USAGE) from None
    finally:
        probe.close()


__all__ = ["ensure_free"]
