"""The xxl-job executors the simulated admin triggers: one job thread per (executor
address, job id), as `ExecutorBizImpl.trigger` and `JobThread` keep them.

- A run request for a job whose thread is busy (running, or runs queued) follows the
  request's block strategy: SERIAL_EXECUTION (and anything unknown) queues it behind the
  running one; DISCARD_LATER refuses it (the trigger answers 500 "block strategy
  effect：Discard Later"); COVER_EARLY kills the running thread (its run calls back 500
  "... [job running, killed]", its queued runs "... [job not executed, in the job queue,
  killed.]") and the request starts on a new thread.
- Before the block strategy: a request whose handler differs from the thread's kills the
  thread whatever it is doing. For BEAN jobs the handler is the handler name ("change
  jobhandler or glue type, and terminate the old job thread."); for GLUE jobs it is the
  glue kind (Groovy or script) and `glue_updatetime` ("change job source or glue type,
  and terminate the old job thread."). A script thread does not tell GLUE_SHELL from
  GLUE_PYTHON (Java checks `instanceof ScriptJobHandler` and the update time only).
- `executor_timeout` bounds the run on its thread (`FutureTask.get(timeout)` starts when
  the thread takes the run), never the time it waited in the queue.
- An address in `down` answers neither a beat nor a run (remoting error).
- `kill` (the admin's "terminate", `ExecutorBizImpl.kill`): the job's thread is removed
  and stopped ("scheduling center kill job.": its running run calls back 500 "... [job
  running, killed]", its queued runs "... [job not executed, in the job queue,
  killed.]"); answered code 200, also when there is no thread (msg "job thread already
  killed.").

Pure state, no I/O: the simulator asks what happens and schedules the callbacks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

KILLED_RUNNING = " [job running, killed]"
KILLED_QUEUED = " [job not executed, in the job queue, killed.]"
CHANGE_BEAN = "change jobhandler or glue type, and terminate the old job thread."
CHANGE_GLUE = "change job source or glue type, and terminate the old job thread."
DISCARD_LATER_MSG = "block strategy effect：Discard Later"
COVER_EARLY_REASON = "block strategy effect：Cover Early"
KILL_REASON = "scheduling center kill job."
ALREADY_KILLED = "job thread already killed."


@dataclass(frozen=True, slots=True)
class Run:
    """One accepted run request: how it ends once its thread takes it."""

    log_id: int
    job_id: int
    code: int  # handle code if it runs to its end: 200 / 500
    duration_ms: int
    timeout_ms: int  # 0: none


@dataclass(frozen=True, slots=True)
class Finish:
    """A callback the executor sends: `at` epoch ms, the handle code and message."""

    log_id: int
    job_id: int
    at: int
    code: int
    msg: str | None


@dataclass(slots=True)
class _Thread:
    handler: tuple[str, object]
    running: Run | None = None
    started: int = 0
    queue: deque[Run] = field(default_factory=deque)

    @property
    def busy(self) -> bool:  # JobThread.isRunningOrHasQueue
        return self.running is not None or bool(self.queue)


@dataclass(frozen=True, slots=True)
class Accepted:
    """The answer to one run request: accepted (then `started` tells whether it runs now)
    or refused with `msg`; `finished` are callbacks of runs the request killed."""

    ok: bool
    msg: str
    started: bool
    finished: tuple[Finish, ...]


def handler_identity(glue_type: str | None, handler: str | None, glue_updatetime_ms: int) -> tuple[str, object]:
    """What `ExecutorBizImpl.trigger` compares to decide whether the thread can be kept."""
    glue = (glue_type or "BEAN").upper()
    if glue == "BEAN":
        return ("BEAN", handler or "")
    if glue == "GLUE_GROOVY":
        return ("GROOVY", glue_updatetime_ms)
    return ("SCRIPT", glue_updatetime_ms)


class XxlExecutors:
    """Every executor's job threads, keyed by (address, job id)."""

    def __init__(self) -> None:
        self._threads: dict[tuple[str, int], _Thread] = {}
        self.down: set[str] = set()

    def beat(self, address: str) -> bool:
        return address not in self.down

    def idle_beat(self, address: str, job_id: int) -> bool:
        """`idleBeat`: the executor answers and the job's thread is neither running nor queued."""
        if address in self.down:
            return False
        thread = self._threads.get((address, job_id))
        return thread is None or not thread.busy

    def busy(self, address: str, job_id: int) -> bool:
        thread = self._threads.get((address, job_id))
        return thread is not None and thread.busy

    def run(self, address: str, run: Run, identity: tuple[str, object], block: str | None, t: int) -> Accepted:
        key = (address, run.job_id)
        thread = self._threads.get(key)
        reason: str | None = None
        if thread is not None and thread.handler != identity:
            reason = CHANGE_BEAN if identity[0] == "BEAN" else CHANGE_GLUE
            thread = None
        if thread is not None and thread.busy:
            if block == "DISCARD_LATER":
                return Accepted(False, DISCARD_LATER_MSG, False, ())
            if block == "COVER_EARLY":
                reason = COVER_EARLY_REASON
                thread = None
        finished: tuple[Finish, ...] = ()
        if thread is None:
            old = self._threads.get(key)
            if old is not None and reason is not None:
                finished = self._kill(old, reason, t)
            thread = _Thread(identity)
            self._threads[key] = thread
        if thread.running is None:
            thread.running, thread.started = run, t
            return Accepted(True, "", True, finished)
        thread.queue.append(run)
        return Accepted(True, "", False, finished)

    def end_of(self, address: str, job_id: int, log_id: int) -> Finish | None:
        """When and how the running run `log_id` ends if nothing kills it first."""
        thread = self._threads.get((address, job_id))
        if thread is None or thread.running is None or thread.running.log_id != log_id:
            return None
        run = thread.running
        if run.timeout_ms > 0 and run.duration_ms > run.timeout_ms:
            return Finish(log_id, job_id, thread.started + run.timeout_ms, 502, "job execute timeout ")
        return Finish(log_id, job_id, thread.started + run.duration_ms, run.code, None)

    def complete(self, address: str, job_id: int, log_id: int, at: int) -> tuple[bool, Run | None]:
        """The running run `log_id` ended at `at`: (False, None) when it is no longer
        running (it was killed); else (True, the next queued run the thread takes at `at`
        or None)."""
        thread = self._threads.get((address, job_id))
        if thread is None or thread.running is None or thread.running.log_id != log_id:
            return False, None
        thread.running = thread.queue.popleft() if thread.queue else None
        thread.started = at
        return True, thread.running

    def kill(self, address: str, job_id: int, t: int) -> tuple[int, str | None, tuple[Finish, ...]]:
        """`kill` at `t`: (code, msg, the callbacks of the runs it killed)."""
        thread = self._threads.pop((address, job_id), None)
        if thread is None:
            return 200, ALREADY_KILLED, ()
        return 200, None, self._kill(thread, KILL_REASON, t)

    @staticmethod
    def _kill(thread: _Thread, reason: str, t: int) -> tuple[Finish, ...]:
        out: list[Finish] = []
        if thread.running is not None:
            out.append(Finish(thread.running.log_id, thread.running.job_id, t, 500, reason + KILLED_RUNNING))
        out += [Finish(r.log_id, r.job_id, t, 500, reason + KILLED_QUEUED) for r in thread.queue]
        thread.running = None
        thread.queue.clear()
        return tuple(out)
