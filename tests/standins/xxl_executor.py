"""An xxl-job executor, the part of its protocol an admin (or the Switchyard bridge)
talks to, behaving like xxl-job-core's EmbedServer + ExecutorBizImpl + JobThread
(notes/xxl-job.md §2.6, §2.7, §2.13):

* `POST /run` (TriggerParam JSON, header XXL-JOB-ACCESS-TOKEN): checks the token, then
  as `ExecutorBizImpl.run`: one job thread per jobId (any int: an unknown id gets a new
  thread). A BEAN request naming another handler than the thread's, or a GLUE request
  with another glueType/glueUpdatetime than the thread's, replaces the thread ("change
  jobhandler or glue type, ..." / "change job source or glue type, and terminate the old
  job thread."). Then the block strategy while the thread runs or has a queue:
  DISCARD_LATER refuses the request (code 500 "block strategy effect：Discard Later"),
  COVER_EARLY replaces the thread, anything else (SERIAL_EXECUTION, null, unknown)
  queues it. A replaced thread is told to stop and interrupted: its running trigger is
  called back 500 "<reason> [job running, killed]" at once (the handler is taken as
  blocked in a call the interrupt ends, as a sleeping or waiting Java handler is; a
  Python thread cannot be stopped, so the handler itself runs on, unheard) and each
  queued one "<reason> [job not executed, in the job queue, killed.]". A repeated logId
  in a thread's queue is refused ("repeat trigger job, logId:..").
* `POST /kill {"jobId"}` (ExecutorBizImpl.kill, what the admin's "terminate" calls): the
  job's thread is removed, told to stop with "scheduling center kill job." and
  interrupted as above; code 200. With no thread for the job: code 200 with msg "job
  thread already killed." (a success code, as in xxl-job-core 2.x and 3.x).
* the job thread runs its queue one trigger at a time; `executorTimeout` (s) counts
  from the trigger's start on the thread, not from its arrival: past it the result is
  502 "job execute timeout " and the thread moves on to the next trigger.
* the result goes to `<admin>api/callback` for each admin in order until one answers
  code 200 (TriggerCallbackThread).
* `POST /beat`; `POST /idleBeat {"jobId"}`: 500 "job thread is running or has trigger
  queue." while that job's thread runs or has a queue.
* any other uri, or a non-POST: a ReturnT 500 with HTTP 200, like the real one.

`handler(trigger)` plays the job (a BEAN handler, or the GLUE source): it returns None
(200), a (code, msg) pair, or raises (500, the exception text).
`callback_style`: "2.3" {logId, logDateTim, handleCode, handleMsg} (2.3.0–3.4.2),
"master" (logDateTime), "2.2" ({logId, logDateTim, executeResult: {code, msg}}).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN_HEADER = "XXL-JOB-ACCESS-TOKEN"
JobFn = Callable[[dict[str, Any]], "tuple[int, str] | None"]
IDLE_POLL_S = 0.05


def _ok(trigger: dict[str, Any]) -> None:
    return None


def _identity(trigger: dict[str, Any]) -> tuple[str, object]:
    """What a job thread is bound to: the BEAN handler's name, or the GLUE type and version."""
    glue = str(trigger.get("glueType") or "BEAN")
    if glue == "BEAN":
        return ("BEAN", trigger.get("executorHandler"))
    # Java checks `instanceof ScriptJobHandler` (or GlueJobHandler) and the update time
    # only: one script kind is not told from another
    return ("GLUE_GROOVY" if glue == "GLUE_GROOVY" else "SCRIPT", int(trigger.get("glueUpdatetime") or 0))


@dataclass
class _JobThread:
    job_id: int
    identity: tuple[str, object]
    queue: queue.SimpleQueue[dict[str, Any]] = field(default_factory=queue.SimpleQueue)
    queued: set[int] = field(default_factory=set)  # logIds waiting
    running: bool = False
    stop_reason: str | None = None
    interrupted: threading.Event = field(default_factory=threading.Event)


class XxlExecutorStandIn:
    def __init__(
        self,
        *,
        handler: JobFn = _ok,
        access_token: str | None = None,
        admin_addresses: Sequence[str] = (),
        callback_style: str = "2.3",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.handler = handler
        self.access_token = access_token
        self.admin_addresses = list(admin_addresses)
        self.callback_style = callback_style
        self.triggers: list[dict[str, Any]] = []  # every TriggerParam received, accepted or not
        self.callbacks: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None]] = []  # (admin, body, answer)
        self.results: dict[int, tuple[int, str]] = {}  # logId -> (handleCode, handleMsg) as called back
        self.started: dict[int, float] = {}  # logId -> monotonic start on its job thread
        self.kills: list[tuple[int, str]] = []  # (jobId, reason) of each replaced or killed job thread
        self.kill_requests: list[int] = []  # jobIds of each POST /kill
        self.beats = 0
        self.idle_beats: list[int] = []  # jobIds asked about
        self.send_callbacks = True
        self._threads: dict[int, _JobThread] = {}
        self._lock = threading.RLock()
        self._done = threading.Condition(self._lock)
        self._closed = False
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
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
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
                self.idle_beats.append(job_id)
                busy = self._busy(job_id)
            return {"code": 500, "msg": "job thread is running or has trigger queue."} if busy else {"code": 200}
        if uri == "/run":
            return self._run(self.triggers[-1])
        if uri == "/kill":
            return self._kill(int(json.loads(raw.decode("utf-8") or "{}").get("jobId", 0)))
        return {"code": 500, "msg": f"invalid request, uri-mapping({uri}) not found."}

    def _busy(self, job_id: int) -> bool:
        t = self._threads.get(job_id)
        return t is not None and (t.running or bool(t.queued))

    def _run(self, trigger: dict[str, Any]) -> dict[str, Any]:
        """ExecutorBizImpl.run."""
        job_id = int(trigger["jobId"])
        log_id = int(trigger["logId"])
        glue = str(trigger.get("glueType") or "BEAN")
        if glue not in (
            "BEAN",
            "GLUE_GROOVY",
            "GLUE_SHELL",
            "GLUE_PYTHON",
            "GLUE_PHP",
            "GLUE_NODEJS",
            "GLUE_POWERSHELL",
        ):
            return {"code": 500, "msg": f"glueType[{glue}] is not valid."}
        identity = _identity(trigger)
        with self._lock:
            thread = self._threads.get(job_id)
            reason: str | None = None
            if thread is not None and thread.identity != identity:
                reason = (
                    "change jobhandler or glue type, and terminate the old job thread."
                    if glue == "BEAN"
                    else "change job source or glue type, and terminate the old job thread."
                )
                thread = None
            if thread is not None and (thread.running or thread.queued):
                block = trigger.get("executorBlockStrategy")
                if block == "DISCARD_LATER":
                    return {"code": 500, "msg": "block strategy effect：Discard Later"}
                if block == "COVER_EARLY":
                    reason = "block strategy effect：Cover Early"
                    thread = None
            if thread is None:
                thread = self._replace(job_id, identity, reason)
            if log_id in thread.queued:
                return {"code": 500, "msg": f"repeat trigger job, logId:{log_id}"}
            thread.queued.add(log_id)
            thread.queue.put(trigger)
        return {"code": 200, "msg": None}

    def _kill(self, job_id: int) -> dict[str, Any]:
        """ExecutorBizImpl.kill: XxlJobExecutor.removeJobThread, or "already killed"."""
        with self._lock:
            self.kill_requests.append(job_id)
            old = self._threads.pop(job_id, None)
            if old is None:
                return {"code": 200, "msg": "job thread already killed."}
            self._stop(old, "scheduling center kill job.")
        return {"code": 200, "msg": None}

    def _stop(self, old: _JobThread, reason: str) -> None:
        """JobThread.toStop(reason) + interrupt(): its queue is called back killed, its
        running trigger when the job thread sees the interrupt (_job_thread)."""
        old.stop_reason = reason
        self.kills.append((old.job_id, reason))
        old.interrupted.set()
        while True:
            try:
                t = old.queue.get_nowait()
            except queue.Empty:
                break
            old.queued.discard(int(t["logId"]))
            self._report(t, 500, f"{reason} [job not executed, in the job queue, killed.]")

    def _replace(self, job_id: int, identity: tuple[str, object], reason: str | None) -> _JobThread:
        """XxlJobExecutor.registJobThread: the old thread (if any) is told to stop."""
        old = self._threads.get(job_id)
        new = _JobThread(job_id, identity)
        self._threads[job_id] = new
        if old is not None:
            self._stop(old, reason or "replaced")
        threading.Thread(target=self._job_thread, args=(new,), daemon=True, name=f"xxl-standin-job-{job_id}").start()
        return new

    def _job_thread(self, jt: _JobThread) -> None:
        """JobThread.run: one trigger at a time until replaced or closed."""
        while jt.stop_reason is None and not self._closed:
            try:
                trigger = jt.queue.get(timeout=IDLE_POLL_S)
            except queue.Empty:
                continue
            with self._lock:
                if jt.stop_reason is not None:
                    break
                jt.queued.discard(int(trigger["logId"]))
                jt.running = True
                self.started[int(trigger["logId"])] = time.monotonic()
                self._done.notify_all()
            code, msg = self._execute(trigger, jt.interrupted)
            with self._lock:
                jt.running = False
                if jt.stop_reason is not None:
                    code, msg = 500, f"{jt.stop_reason} [job running, killed]"
                self._done.notify_all()
            self._report(trigger, code, msg)

    def _execute(self, trigger: dict[str, Any], interrupted: threading.Event) -> tuple[int, str]:
        box: list[tuple[int, str]] = []

        def run() -> None:
            try:
                out = self.handler(trigger)
                box.append(out if out is not None else (200, ""))
            except Exception as exc:  # the executor reports the exception text
                box.append((500, f"{type(exc).__name__}: {exc}"))

        timeout = int(trigger.get("executorTimeout") or 0)
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        # counted from the start on the job thread, as FutureTask.get; an interrupt (a kill)
        # ends the wait as it ends a blocked Java handler
        deadline = None if timeout <= 0 else time.monotonic() + timeout
        while worker.is_alive() and not interrupted.is_set():
            left = IDLE_POLL_S if deadline is None else min(IDLE_POLL_S, deadline - time.monotonic())
            if left <= 0:
                break
            worker.join(left)
        if box:
            return box[0]
        if interrupted.is_set():
            return 500, "java.lang.InterruptedException"  # replaced by the kill's message
        return 502, "job execute timeout "

    def _report(self, trigger: dict[str, Any], code: int, msg: str) -> None:
        """Recorded at once; called back on a thread of its own (TriggerCallbackThread's
        queue), so a slow admin never holds a job thread."""
        log_id = int(trigger["logId"])
        with self._lock:  # reentrant: _replace calls this with the lock held
            self.results[log_id] = (code, msg)
            self._done.notify_all()
        if self.send_callbacks:
            threading.Thread(
                target=self._callback, args=(log_id, int(trigger.get("logDateTime") or 0), code, msg), daemon=True
            ).start()

    def _callback(self, log_id: int, log_date: int, code: int, msg: str) -> None:
        if self.callback_style == "2.2":
            item: dict[str, Any] = {
                "logId": log_id,
                "logDateTim": log_date,
                "executeResult": {"code": code, "msg": msg},
            }
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
                with opener.open(
                    urllib.request.Request(url, data=body, headers=headers, method="POST"), timeout=3
                ) as resp:
                    answer = json.loads(resp.read().decode() or "{}")
            except (OSError, ValueError):
                pass
            with self._lock:
                self.callbacks.append((admin, [item], answer))
                self._done.notify_all()
            if answer and answer.get("code") == 200:
                return  # the first admin that takes it, like TriggerCallbackThread

    # -- waiting (tests) ---------------------------------------------------------------

    def _wait(self, ready: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not ready():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True

    def wait_idle(self, timeout: float = 5.0) -> bool:
        return self._wait(lambda: not any(t.running or t.queued for t in self._threads.values()), timeout)

    def wait_callbacks(self, count: int, timeout: float = 5.0) -> bool:
        """Until `count` callback attempts were made (the bridge may return before the
        executor has read the admin's answer)."""
        return self._wait(lambda: len(self.callbacks) >= count, timeout)

    def wait_started(self, log_id: int, timeout: float = 5.0) -> bool:
        """Until the job thread took this trigger off its queue (a kill before that finds
        it queued, not running: the real JobThread answers the two differently)."""
        return self._wait(lambda: log_id in self.started, timeout)

    def wait_result(self, log_id: int, timeout: float = 5.0) -> tuple[int, str] | None:
        self._wait(lambda: log_id in self.results, timeout)
        with self._lock:
            return self.results.get(log_id)

    def close(self) -> None:
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> XxlExecutorStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
