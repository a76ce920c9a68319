"""The new side's follow-up runs (xxl-job child jobs run after a parent's success,
scheduler_core.followups), told apart from its scheduled fires.

No schedule explains a follow-up run: its time is the parent's plus 1..999 ms. The legacy
side's counterpart, a run of trigger type PARENT, is left out of the pairing as an
unscheduled fire (dualrun.match); the new side's is left out the same way, or a live
dual-run whose new side runs the children as legacy does would count each one as an
extra fire against the new side. Found by their claims (`dus_followup_fired`): the child
run's command id names its trigger and time, shared by every item of that run.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from dualrun.model import Window
from scheduler_core.model import parse_command_id
from scheduler_core.ports import RunRecordReads
from scheduler_core.times import to_ms

# a claim is written when the parent's result is applied: after the parent's time, and at
# most a parent's run time before or after the child's (its time is the parent's + < 1 s)
_CLAIM_MARGIN = timedelta(days=2)


def followup_runs(store: RunRecordReads, biz_code: str, window: Window) -> set[tuple[str, int]]:
    """(job code, scheduled ms) of every follow-up run of the business in the window."""
    claims = store.followup_claims_of(
        biz_code,
        to_ms(window.start - _CLAIM_MARGIN),
        to_ms(window.end + _CLAIM_MARGIN),
    )
    start, end = to_ms(window.start), to_ms(window.end)
    out: set[tuple[str, int]] = set()
    for code, cid in claims:
        ms = parse_command_id(cid)[1]
        if start <= ms < end:
            out.add((code, ms))
    return out


def without_followup_runs(raw: pd.DataFrame, runs: set[tuple[str, int]]) -> pd.DataFrame:
    """`raw` (store columns job_code, scheduled_at) without the rows of those runs."""
    if not runs or not len(raw):
        return raw
    keys = pd.MultiIndex.from_arrays([raw["job_code"].astype(str), raw["scheduled_at"].astype("int64")])
    return raw[~keys.isin(list(runs))].reset_index(drop=True)
