"""A run's own log lines (xxl-job's rolling log): what a handler logs while it runs is
kept per run (trigger, fire time, item, attempt), capped, and sent with the run's result.

A handler author logs as usual: through `ctx.log` (a logger named `handler.<job code>`,
at INFO and above), or any logger of their own whose records reach the root logger.
One `logging.Handler` on the root logger (installed by the first Executor) keeps each
record emitted on a worker thread while a handler runs there for the run in work on that
thread: `ExecutionContext.of` marks the thread's current run as it builds the context
(one attribute store per item, nothing else on the hot path), and the executor takes the
run's lines when it builds its result. Records of the SDK's own loggers
(`scheduler_core.*`) are not the handler's and are left out.

Per run at most MAX_RUN_BYTES of text are kept (and MAX_ENVELOPE_BYTES per envelope); past it the rest is counted and the
kept text ends with a marker saying how much was dropped. Lines logged after the run's
result was built (a handler that overran its timeout and went on) start a new buffer no
one takes; at most MAX_OPEN buffers are kept, the oldest dropped first.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler_core.codec import Envelope
    from scheduler_core.executor.context import ExecutionContext

MAX_RUN_BYTES = 64 * 1024
# per envelope (one result message may carry many): a 1000-item page logging its fill
# would not fit a broker message; past this its items' lines are replaced by a marker
MAX_ENVELOPE_BYTES = 1024 * 1024
MAX_OPEN = 4096
HANDLER_LOGGER = "handler"
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"
_OWN = "scheduler_core."

# the run a worker thread is in: set by ExecutionContext.of, cleared when its result is taken
current = threading.local()


class _Buffer:
    __slots__ = ("parts", "size", "dropped")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.dropped = 0

    def add(self, line: str) -> None:
        n = len(line.encode("utf-8", "replace")) + 1
        if self.dropped or self.size + n > MAX_RUN_BYTES:
            self.dropped += n
            return
        self.parts.append(line)
        self.size += n

    def text(self) -> tuple[str, bool]:
        body = "\n".join(self.parts)
        if self.dropped:
            body += f"\n... [truncated: {self.dropped} more bytes of log lines dropped, {MAX_RUN_BYTES} kept]"
        return body, bool(self.dropped)


class RunLogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter(FORMAT))
        # (trigger id, T ms) -> {(item index, attempt): buffer}; emit and take hold the lock
        self._open: OrderedDict[tuple[int, int], dict[tuple[int, int], _Buffer]] = OrderedDict()
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        _last_resort(self, record)
        ctx: ExecutionContext | None = getattr(current, "ctx", None)
        if ctx is None or record.name.startswith(_OWN):
            return
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - a bad log call must not fail the run
            line = f"{record.levelname} {record.name} (unformattable log record: {record.msg!r})"
        env = ctx._env
        key = (env.trigger_id, env.scheduled_ms)
        with self._guard:
            runs = self._open.get(key)
            if runs is None:
                runs = self._open[key] = {}
                while len(self._open) > MAX_OPEN:
                    self._open.popitem(last=False)
            buf = runs.get((ctx._index, ctx._attempt))
            if buf is None:
                buf = runs[(ctx._index, ctx._attempt)] = _Buffer()
            buf.add(line)

    def take(self, env: Envelope) -> list[tuple[int, int, str, bool]]:
        """The lines of the envelope's runs, (item index, attempt, text, truncated), and
        they are forgotten; clears the calling thread's current run."""
        current.ctx = None
        if not self._open:  # the usual case: nothing logged anywhere
            return []
        with self._guard:
            runs = self._open.pop((env.trigger_id, env.scheduled_ms), None)
        if not runs:
            return []
        wanted = {idx for idx, _p in env.items}
        out = []
        budget = MAX_ENVELOPE_BYTES
        for (idx, attempt), buf in sorted(runs.items()):
            if idx in wanted:
                text, cut = buf.text()
                if buf.size > budget:
                    text, cut = (
                        f"... [truncated: {buf.size + buf.dropped} bytes of log lines dropped: the envelope's runs logged over {MAX_ENVELOPE_BYTES} bytes]",
                        True,
                    )
                budget -= min(budget, buf.size)
                out.append((idx, attempt, text, cut))
        rest = {k: v for k, v in runs.items() if k[0] not in wanted}
        if rest:  # another envelope (page) of the same fire: its lines stay for it
            with self._guard:
                self._open.setdefault((env.trigger_id, env.scheduled_ms), {}).update(rest)
        return out


def _last_resort(capture: RunLogCapture, record: logging.LogRecord) -> None:
    """Python prints a warning nobody handles through `logging.lastResort`, but only while
    no handler at all is on its way, and this capture is one: a process that configured
    no logging still sees its warnings, as before the capture was installed."""
    last = logging.lastResort
    root = logging.getLogger()
    if last is None or record.levelno < last.level or root.handlers != [capture]:
        return
    node: logging.Logger | None = logging.getLogger(record.name)
    while node is not None and node is not root:
        if node.handlers:
            return
        if not node.propagate:
            return
        node = node.parent
    last.handle(record)


_capture: RunLogCapture | None = None
_install_lock = threading.Lock()


def install() -> RunLogCapture:
    """The process's capture on the root logger (once), and `ctx.log`'s logger at INFO."""
    global _capture
    with _install_lock:
        if _capture is None:
            _capture = RunLogCapture()
            logging.getLogger().addHandler(_capture)
            hl = logging.getLogger(HANDLER_LOGGER)
            if hl.level == logging.NOTSET:
                hl.setLevel(logging.INFO)
        return _capture


def take(env: Envelope) -> list[tuple[int, int, str, bool]]:
    """The envelope's captured lines (none when no capture is installed)."""
    if _capture is None:
        return []
    return _capture.take(env)


__all__ = ["HANDLER_LOGGER", "MAX_RUN_BYTES", "RunLogCapture", "install", "take"]
