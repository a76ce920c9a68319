"""Real receivers of alerts on 127.0.0.1 for the tests: an HTTP server (stdlib http.server,
in a thread) that records every JSON body POSTed to it and can answer the first few with
an error, and an SMTP server (aiosmtpd) that records every mail."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Webhook:
    url: str
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    # answer the next N requests with this status (then 200)
    fail_next: int = 0
    fail_status: int = 500
    lock: threading.Lock = field(default_factory=threading.Lock)

    def calls(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.bodies)


@contextmanager
def webhook(path: str = "/hook") -> Iterator[Webhook]:
    hook = Webhook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            size = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(size)
            with hook.lock:
                failing = hook.fail_next > 0
                if failing:
                    hook.fail_next -= 1
                else:
                    hook.bodies.append(json.loads(raw))
                    hook.paths.append(self.path)
            self.send_response(hook.fail_status if failing else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    th = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    th.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        th.join(timeout=5)


@dataclass
class Mailbox:
    host: str
    port: int
    mails: list[Message] = field(default_factory=list)


@contextmanager
def smtp_server() -> Iterator[Mailbox]:
    from aiosmtpd.controller import Controller

    box = Mailbox("127.0.0.1", 0)

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
            box.mails.append(message_from_bytes(envelope.content))
            return "250 OK"

    # aiosmtpd checks it is up by connecting to the port it was given: a free one, not 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        box.port = probe.getsockname()[1]
    controller = Controller(Handler(), hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()
