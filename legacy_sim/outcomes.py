"""What a simulated callback does: the pluggable `outcome(job, scheduled_at, shard)`.

The simulators make no HTTP calls. For every attempt (each shard, each retry) they ask
the outcome function what the business handler did and take its answer as the truth:

    outcome(job, scheduled_at, shard) -> (Result | str, duration_ms)

`job` is the simulator's view of the row (`XxlJobView` / `BcTaskView`), `scheduled_at`
the aware UTC fire time the attempt belongs to (a retry keeps its fire's time), `shard`
the shard index. The functions here build deterministic outcomes; any callable with the
same shape works (it is called in a deterministic order, so a stateful one is fine).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Collection, Hashable
from datetime import datetime
from typing import Any, TypeAlias


class Result(enum.StrEnum):
    SUCCESS = "success"
    FAIL = "fail"  # the handler failed (xxl-job handle_code 500, batch center FAIL)
    TIMEOUT = "timeout"  # reported as a timeout (xxl-job 502, batch center TIMEOUT)
    # the executor accepted the run and never called back (it died): xxl-job leaves the
    # row running until the lost-result monitor marks it 500; the batch center's worker
    # waits out `callback_timeout_ms` and records TIMEOUT
    NO_CALLBACK = "no_callback"
    # never reached the handler: xxl-job trigger_code 500 (executor refused / unreachable),
    # batch center "not dispatched" (start_time NULL)
    TRIGGER_FAIL = "trigger_fail"


Outcome: TypeAlias = Callable[[Any, datetime, int], "tuple[Result | str, int]"]


def always(result: Result | str = Result.SUCCESS, duration_ms: int = 200) -> Outcome:
    """Every attempt ends the same way after `duration_ms`."""
    fixed = (Result(result), int(duration_ms))

    def outcome(job: Any, scheduled_at: datetime, shard: int) -> tuple[Result | str, int]:
        return fixed

    return outcome


def succeed(duration_ms: int = 200) -> Outcome:
    """The default: every attempt succeeds after `duration_ms`."""
    return always(Result.SUCCESS, duration_ms)


def fail_times(
    times: int,
    *,
    failure: Result | str = Result.FAIL,
    then: Result | str = Result.SUCCESS,
    duration_ms: int = 200,
    only: Collection[Hashable] | None = None,
) -> Outcome:
    """The first `times` attempts of each (job id, fire time, shard) end with `failure`,
    later ones (the retries) with `then`. `only`: the job/task ids this applies to (others
    succeed)."""
    seen: Counter[tuple[Any, datetime, int]] = Counter()
    bad, good = Result(failure), Result(then)

    def outcome(job: Any, scheduled_at: datetime, shard: int) -> tuple[Result | str, int]:
        if only is not None and job.id not in only:
            return Result.SUCCESS, duration_ms
        key = (job.id, scheduled_at, shard)
        seen[key] += 1
        return (bad if seen[key] <= times else good), duration_ms

    return outcome


def coerce(answer: Any) -> tuple[Result, int]:
    """Validate what an outcome function returned."""
    try:
        result, duration = answer
        return Result(result), max(0, int(duration))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"an outcome returns (Result, duration_ms), got {answer!r}") from exc
