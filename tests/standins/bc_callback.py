"""A business's HTTP callback as the batch center calls it: records every request and
answers with a configurable status, body and delay."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes


class CallbackRecorder:
    def __init__(
        self,
        *,
        status: int = 200,
        body: bytes = b'{"code":0}',
        delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.status = status
        self.body = body
        self.delay = delay
        self.requests: list[Recorded] = []
        self._stop = threading.Event()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                recorder.requests.append(
                    Recorded(
                        self.command,
                        parts.path,
                        parse_qs(parts.query, keep_blank_values=True),
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
                if recorder.delay:
                    recorder._stop.wait(recorder.delay)
                try:
                    self.send_response(recorder.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(recorder.body)))
                    self.end_headers()
                    self.wfile.write(recorder.body)
                except OSError:
                    pass  # the client gave up (a timeout test)

            do_GET = do_POST = do_PUT = _handle  # noqa: N815

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.port = int(self._server.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> CallbackRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
