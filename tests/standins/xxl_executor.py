"""An xxl-job executor, the part of its protocol an admin (or the Switchyard bridge)
talks to (notes/xxl-job.md §2.6, §2.7, §2.13; xxl-job-core EmbedServer):

* `POST /run` (TriggerParam JSON, header XXL-JOB-ACCESS-TOKEN): checks the token,
  rejects a repeated logId, answers {"code":200} once queued, runs `handler(trigger)`
  in a thread with the executorTimeout (502 on expiry), then POSTs the result to
  `<admin>api/callback` for the first admin that answers code 200;
* `POST /beat`, `POST /idleBeat` ({"jobId"}: 500 while that job runs);
* any other uri, or a non-POST: a ReturnT 500 with HTTP 200, like the real one.

`handler` returns None (200), a (code, msg) pair, or raises (500, the exception text).
`callback_style`: "2.3" {logId, logDateTim, handleCode, handleMsg} (2.3.0–3.4.2),
"master" (logDateTime), "2.2" ({logId, logDateTim, executeResult: {code, msg}}).
"""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN_HEADER = "XXL-JOB-ACCESS-TOKEN"
JobFn = Callable[[dict[str, Any]], "tuple[int, str] | None"]


def _ok(trigger: dict[str, Any]) -> None:
    return None


class XxlExecutorStandIn:
    def __init__(self, *, handler: JobFn = _ok, access_token: str | None = None,
                 admin_addresses: Sequence[str] = (), callback_style: str = "2.3",
                 host: str = "127.0.0.1", port: int = 0) -> None:
        self.handler = handler
        self.access_token = access_token
        self.admin_addresses = list(admin_addresses)
        self.callback_style = callback_style
        self.triggers: list[dict[str, Any]] = []  # every TriggerParam received, accepted or not
        self.callbacks: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None]] = []  # (admin, body, answer)
        self.beats = 0
        self.send_callbacks = True
        self._running: dict[int, int] = {}  # jobId -> running count
        self._log_ids: set[int] = set()
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                self._answer(stand_in._process(self.path, raw, self.headers.get(TOKEN_HEADER)))

            def do_GET(self) -> None:  # noqa: N802
                self._answer({"code": 500, "msg": "invalid request, HttpMethod not support."})

            def _answer(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html;charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.port = int(self._server.server_address[1])
        self.address = f"http://{host}:{self.port}/"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    # -- the executor API ------------------------------------------------------------

    def _process(self, uri: str, raw: bytes, token: str | None) -> dict[str, Any]:
        if uri == "/run":
            try:
                self.triggers.append(json.loads(raw.decode("utf-8")))
            except ValueError:
                return {"code": 500, "msg": "request error: bad json"}
        if self.access_token and self.access_token != token:
            return {"code": 500, "msg": "The access token is wrong."}
        if uri == "/beat":
            self.beats += 1
            return {"code": 200, "msg": None}
        if uri == "/idleBeat":
            job_id = int(json.loads(raw.decode("utf-8") or "{}").get("jobId", 0))
            with self._lock:
                busy = self._running.get(job_id, 0) > 0
            return {"code": 500, "msg": "job thread is running or has trigger queue."} if busy else {"code": 200}
        if uri == "/run":
            trigger = self.triggers[-1]
            log_id = int(trigger["logId"])
            with self._lock:
                if log_id in self._log_ids:
                    return {"code": 500, "msg": f"repeate trigger job, logId:{log_id}"}
                self._log_ids.add(log_id)
                self._running[int(trigger["jobId"])] = self._running.get(int(trigger["jobId"]), 0) + 1
            threading.Thread(target=self._execute, args=(trigger,), daemon=True).start()
            return {"code": 200, "msg": None}
        return {"code": 500, "msg": f"invalid request, uri-mapping({uri}) not found."}

    def _execute(self, trigger: dict[str, Any]) -> None:
        box: list[tuple[int, str]] = []

        def run() -> None:
            try:
                out = self.handler(trigger)
                box.append(out if out is not None else (200, ""))
            except Exception as exc:  # the executor reports the exception text
                box.append((500, f"{type(exc).__name__}: {exc}"))

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        timeout = int(trigger.get("executorTimeout") or 0)
        worker.join(timeout if timeout > 0 else None)
        code, msg = box[0] if box else (502, "job execute timeout ")
        with self._lock:
            self._running[int(trigger["jobId"])] -= 1
            self._done.notify_all()
        if self.send_callbacks:
            self._callback(int(trigger["logId"]), int(trigger.get("logDateTime") or 0), code, msg)

    def _callback(self, log_id: int, log_date: int, code: int, msg: str) -> None:
        if self.callback_style == "2.2":
            item: dict[str, Any] = {"logId": log_id, "logDateTim": log_date, "executeResult": {"code": code, "msg": msg}}
        elif self.callback_style == "master":
            item = {"logId": log_id, "logDateTime": log_date, "handleCode": code, "handleMsg": msg}
        else:
            item = {"logId": log_id, "logDateTim": log_date, "handleCode": code, "handleMsg": msg}
        body = json.dumps([item]).encode()
        headers = {"Content-Type": "application/json;charset=UTF-8"}
        if self.access_token:
            headers[TOKEN_HEADER] = self.access_token
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for admin in self.admin_addresses:
            url = (admin if admin.endswith("/") else admin + "/") + "api/callback"
            answer: dict[str, Any] | None = None
            try:
                with opener.open(urllib.request.Request(url, data=body, headers=headers, method="POST"),
                                 timeout=3) as resp:
                    answer = json.loads(resp.read().decode() or "{}")
            except (OSError, ValueError):
                pass
            with self._lock:
                self.callbacks.append((admin, [item], answer))
                self._done.notify_all()
            if answer and answer.get("code") == 200:
                return  # the first admin that takes it, like TriggerCallbackThread

    def wait_idle(self, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while any(self._running.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True

    def wait_callbacks(self, count: int, timeout: float = 5.0) -> bool:
        """Until `count` callback attempts were made (the bridge may return before the
        executor has read the admin's answer)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.callbacks) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> XxlExecutorStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
