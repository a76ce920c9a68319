"""Execution-level matching, vectorised: attempts -> items -> logical fires -> pairs -> mismatches.

1. xxl-job rows get their nominal fire time: the latest expected occurrence at or before
   trigger_time + early, within a tolerance (merge_asof). Retry rows take the fire time of
   the failed attempt they retry (merge_asof on the same job and shard, within the retry
   window). Manual / API / parent / misfire-compensation rows, and rows no occurrence
   explains, stay *unscheduled*.
2. Attempts of one (job, fire time, shard) fold into one item: the first row is the fire,
   a later row is a retry when it says so or follows a failure, else a duplicate. The
   item's status is its last attempt's. Items fold into fires (worst status, first dispatch).
3. Fires pair by (job, fire time) exactly, then the rest by nearest fire time within
   `pair_tolerance`. Unpaired and expected-but-unfired occurrences become mismatches, with
   known legitimate differences labelled (never counted against the new side).

Speed: everything is keyed *time-major* (fire time, then job, then shard) in one int64, so
that data arriving in time order (readers yield by time, the store is read by scheduled
time) is nearly sorted, and every sort is a cheap stable pass; lookups then search sorted
keys with sorted queries. Columns are plain numpy arrays (`Table`), not DataFrames.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dualrun.frames import (
    FAIL,
    FENCED,
    MANUAL,
    MISFIRE,
    NONE,
    RETRY,
    SCHEDULE,
    SKIPPED,
    STOPPED,
    SUCCESS,
    TIMEOUT,
    UNFINISHED,
    JobInfo,
)
from dualrun.model import Label, MismatchKind
from dualrun.settings import MatchSettings
from scheduler_core.times import duration_ms

_MAX = np.iinfo(np.int64).max
KIND_CODE = {k: i for i, k in enumerate(MismatchKind)}
KINDS = list(MismatchKind)
LABEL_CODE = {lab: i for i, lab in enumerate(Label)}
LABELS = list(Label)
NO_LABEL = -1
# `b` of a missing_on_new: 1 the new side's misfire policy skipped it, 2 a rollback fence did
B_MISFIRE_SKIP, B_FENCED, B_STOPPED = 1, 2, 3
_I64 = np.int64
_NO_KEYS = np.zeros(0, dtype=_I64)


class Table:
    """Named numpy columns of equal length (a DataFrame without the copies)."""

    __slots__ = ("cols",)

    def __init__(self, cols: Mapping[str, np.ndarray]) -> None:
        self.cols = {k: np.asarray(v) for k, v in cols.items()}

    @staticmethod
    def of(frame: pd.DataFrame, names: Iterable[str] | None = None) -> Table:
        return Table({c: frame[c].to_numpy(dtype=_I64) for c in (names or frame.columns)})

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def __len__(self) -> int:
        return len(next(iter(self.cols.values()))) if self.cols else 0

    def take(self, idx: np.ndarray, names: Iterable[str] | None = None) -> Table:
        return Table({k: self.cols[k][idx] for k in (names or self.cols)})

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(copy=False, data=self.cols)


def _bits(n: int) -> int:
    return max(1, int(n).bit_length())


@dataclass(frozen=True)
class Keys:
    """Time-major fire keys: (fire time - origin) << job_bits | job."""

    origin: int
    job_bits: int

    def fire(self, job: np.ndarray, sched: np.ndarray) -> np.ndarray:
        return (np.asarray(sched, dtype=_I64) - self.origin) << self.job_bits | np.asarray(job, dtype=_I64)

    def job(self, fk: np.ndarray) -> np.ndarray:
        return fk & ((1 << self.job_bits) - 1)

    def sched(self, fk: np.ndarray) -> np.ndarray:
        return (fk >> self.job_bits) + self.origin


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique by a stable sort (fast on nearly sorted keys; numpy's hash unique is not)."""
    a = np.sort(np.asarray(a, dtype=_I64), kind="stable")
    if len(a) < 2:
        return a
    keep = np.ones(len(a), dtype=bool)
    keep[1:] = a[1:] != a[:-1]
    return a[keep]


def member(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """keys[i] in sorted_keys (fast when `keys` is sorted too)."""
    if not len(sorted_keys) or not len(keys):
        return np.zeros(len(keys), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[pos] == keys


def _order(key: np.ndarray) -> np.ndarray | None:
    """A stable sorting permutation, or None when already sorted."""
    if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):
        return None
    return np.argsort(key, kind="stable")


@dataclass
class SideFires:
    items: Table  # fk, job, sched, unit, total, status, dispatch, attempts, dups (sorted by fire key)
    fires: Table  # fk, job, sched, items, total, status, dispatch, attempts, dups (sorted by fk)


@dataclass
class MatchResult:
    legacy: SideFires
    new: SideFires
    unscheduled: Table  # legacy rows no schedule explains: job, trig, kind
    mismatches: pd.DataFrame  # kind, label, job, sched, a, b (codes; a/b: detail numbers)
    expected_fk: np.ndarray
    paired: int
    reference: int  # distinct occurrences: expected, or fired by either side
    skipped_new: int  # new-side fires skipped by the misfire policy
    fenced_fk: np.ndarray  # keys of new-side fires a rollback fence skipped (sorted): legacy's to fire

    @property
    def fenced_legacy_calls(self) -> int:
        """Legacy calls of the occurrences a rollback fence took from the new side: not
        to be held against the new side's call volume."""
        fires = self.legacy.fires
        return int(fires["items"][member(self.fenced_fk, fires["fk"])].sum())


# --- 1. nominal fire times ---------------------------------------------------------------


def _asof(
    left_key: np.ndarray,
    left_by: np.ndarray,
    right_key: np.ndarray,
    right_by: np.ndarray,
    right_val: np.ndarray,
    tolerance: int,
) -> np.ndarray:
    """For each left row, right_val of the latest right row with the same `by` and
    right_key <= left_key (within tolerance), else NONE. Left order is preserved."""
    if not len(left_key) or not len(right_key):
        return np.full(len(left_key), NONE, dtype=_I64)
    lo, ro = _order(left_key), _order(right_key)
    lk, lb = (left_key, left_by) if lo is None else (left_key[lo], left_by[lo])
    rk, rb, rv = (right_key, right_by, right_val) if ro is None else (right_key[ro], right_by[ro], right_val[ro])
    m = pd.merge_asof(
        pd.DataFrame(copy=False, data={"key": lk, "by": lb}),
        pd.DataFrame(copy=False, data={"key": rk, "by": rb, "val": rv}),
        on="key",
        by="by",
        direction="backward",
        tolerance=tolerance,
    )
    val = m["val"].fillna(NONE).to_numpy(dtype=_I64)
    if lo is None:
        return val
    out = np.empty(len(left_key), dtype=_I64)
    out[lo] = val
    return out


def assign_nominal(leg: Table, exp: Table, s: MatchSettings) -> np.ndarray:
    """The nominal fire time of every legacy row (NONE: unscheduled)."""
    sched, kind, trig, job = leg["sched"].copy(), leg["kind"], leg["trig"], leg["job"]
    need = np.flatnonzero((sched == NONE) & (kind == SCHEDULE) & (trig != NONE))
    if len(need):
        early = duration_ms(s.early)
        sched[need] = _asof(
            trig[need] + early,
            job[need],
            exp["sched"],
            exp["job"],
            exp["sched"],
            duration_ms(s.nominal_tolerance) + early,
        )
    retry = np.flatnonzero((sched == NONE) & (kind == RETRY) & (trig != NONE))
    if len(retry):
        by = job << 16 | leg["shard"] & 0xFFFF
        status = leg["status"]
        failed = np.flatnonzero(
            (sched != NONE) & (kind != MANUAL) & (trig != NONE) & ((status == FAIL) | (status == TIMEOUT))
        )
        sched[retry] = _asof(
            trig[retry], by[retry], trig[failed], by[failed], sched[failed], duration_ms(s.retry_window)
        )
    return sched


# --- 2. attempts -> items -> fires ----------------------------------------------------------


def _starts(key: np.ndarray) -> np.ndarray:
    """Boolean 'a new group starts here' over rows sorted by `key`."""
    new = np.ones(len(key), dtype=bool)
    if len(key) > 1:
        new[1:] = key[1:] != key[:-1]
    return new


@dataclass(frozen=True)
class ItemKeys:
    """Rows keyed (fire time, job, unit) in one int64 when it fits (else a lexsort rank):
    `order` sorts the selected rows, stable (attempts stay in trigger-time order)."""

    order: np.ndarray  # positions into the full columns, in item order
    key: np.ndarray  # the sorted group key (equal key: same item)
    unit_bits: int  # > 0: key is packed, so job/sched/unit decode from it

    @staticmethod
    def build(keys: Keys, job: np.ndarray, sched: np.ndarray, unit: np.ndarray, sel: np.ndarray) -> ItemKeys:
        unit_bits = _bits(int(unit[sel].max()) if len(sel) else 0)
        span = int(sched[sel].max() - keys.origin) if len(sel) else 0
        if _bits(span) + keys.job_bits + unit_bits <= 62:
            ik = keys.fire(job[sel], sched[sel]) << unit_bits | unit[sel]
            order = _order(ik)
            return ItemKeys(sel, ik, unit_bits) if order is None else ItemKeys(sel[order], ik[order], unit_bits)
        order = sel[np.lexsort((unit[sel], job[sel], sched[sel]))]  # stable: ties keep input order
        j, t, u = job[order], sched[order], unit[order]
        change = np.ones(len(order), dtype=bool)
        change[1:] = (j[1:] != j[:-1]) | (t[1:] != t[:-1]) | (u[1:] != u[:-1])
        return ItemKeys(order, np.cumsum(change), 0)

    def ids(
        self, keys: Keys, starts: np.ndarray, job: np.ndarray, sched: np.ndarray, unit: np.ndarray
    ) -> dict[str, np.ndarray]:
        """fk, job, sched and unit of the items starting at `starts`."""
        if not self.unit_bits:
            g = self.order[starts]
            return {"fk": keys.fire(job[g], sched[g]), "job": job[g], "sched": sched[g], "unit": unit[g]}
        ik = self.key[starts]
        fk = ik >> self.unit_bits
        return {"fk": fk, "job": keys.job(fk), "sched": keys.sched(fk), "unit": ik & ((1 << self.unit_bits) - 1)}


def legacy_items(rows: Table, sched: np.ndarray, sel: np.ndarray, keys: Keys) -> Table:
    """Fold the selected scheduled legacy attempts (nominal time in `sched`) into items."""
    ik = ItemKeys.build(keys, rows["job"], sched, rows["shard"], sel)
    g = ik.order
    first = _starts(ik.key)
    status = rows["status"][g]
    prev = np.empty_like(status)
    if len(status):
        prev[0], prev[1:] = SUCCESS, status[:-1]
    retry_like = (rows["kind"][g] == RETRY) | (rows["attempt"][g] > 0) | (prev == FAIL) | (prev == TIMEOUT)
    dup = ~first & ~retry_like
    starts = np.flatnonzero(first)
    if not len(starts):
        return Table(
            {
                c: np.zeros(0, dtype=_I64)
                for c in ("fk", "job", "sched", "unit", "total", "status", "dispatch", "attempts", "dups")
            }
        )
    # the item's status is its last attempt's (duplicates aside): the last non-duplicate row
    last = np.maximum.reduceat(np.where(dup, -1, np.arange(len(g), dtype=_I64)), starts)
    n_dup = np.add.reduceat(dup.astype(_I64), starts)
    head = g[starts]
    return Table(
        {
            **ik.ids(keys, starts, rows["job"], sched, rows["shard"]),
            "total": rows["total"][head],
            "status": status[last],
            "dispatch": rows["trig"][head],
            "attempts": np.diff(np.append(starts, len(g))) - n_dup,
            "dups": n_dup,
        }
    )


def new_items(rows: Table, sel: np.ndarray, keys: Keys) -> Table:
    """The selected new-side records as items; a second record of the same (job, fire
    time, item), from a doubled trigger, counts as a duplicate."""
    ik = ItemKeys.build(keys, rows["job"], rows["sched"], rows["item"], sel)
    starts = np.flatnonzero(_starts(ik.key))
    head = ik.order[starts]
    return Table(
        {
            **ik.ids(keys, starts, rows["job"], rows["sched"], rows["item"]),
            "total": rows["total"][head],
            "status": rows["status"][head],
            "dispatch": rows["recv"][head],
            "attempts": rows["attempt"][head] + 1,
            "dups": np.diff(np.append(starts, len(ik.key))) - 1,
        }
    )


def fires_of(items: Table, keys: Keys) -> Table:
    """Items (sorted by fire time, job, unit) folded into fires, sorted by fire key."""
    if not len(items):
        return Table(
            {
                c: np.zeros(0, dtype=_I64)
                for c in ("fk", "job", "sched", "items", "total", "status", "dispatch", "attempts", "dups")
            }
        )
    fk_all = items["fk"]
    starts = np.flatnonzero(_starts(fk_all))
    dispatch = items["dispatch"]
    first = np.minimum.reduceat(np.where(dispatch == NONE, _MAX, dispatch), starts)
    return Table(
        {
            "fk": fk_all[starts],
            "job": items["job"][starts],
            "sched": items["sched"][starts],
            "items": np.diff(np.append(starts, len(fk_all))),
            "total": np.maximum.reduceat(items["total"], starts),
            "status": np.maximum.reduceat(items["status"], starts),
            "dispatch": np.where(first == _MAX, NONE, first),
            "attempts": np.add.reduceat(items["attempts"], starts),
            "dups": np.add.reduceat(items["dups"], starts),
        }
    )


# --- 3. pairing -------------------------------------------------------------------------------


def pair(lf: Table, nf: Table, tolerance: int) -> tuple[np.ndarray, np.ndarray]:
    """(legacy index, new index) of paired fires: exact fire key first, then the nearest
    fire time of the same job within `tolerance`, one to one."""
    lk, nk = lf["fk"], nf["fk"]
    if not len(lk) or not len(nk):
        return np.zeros(0, dtype=_I64), np.zeros(0, dtype=_I64)
    pos = np.minimum(np.searchsorted(nk, lk), len(nk) - 1)
    hit = nk[pos] == lk
    li, ni = np.flatnonzero(hit), pos[hit]
    if tolerance <= 0 or len(li) == len(lk) or len(ni) == len(nk):
        return li, ni
    lrest = np.flatnonzero(~hit)
    nfree = np.ones(len(nk), dtype=bool)
    nfree[ni] = False
    nrest = np.flatnonzero(nfree)
    left = pd.DataFrame(copy=False, data={"sched": lf["sched"][lrest], "job": lf["job"][lrest], "li": lrest})
    right = pd.DataFrame(
        copy=False,
        data={"sched": nf["sched"][nrest], "job": nf["job"][nrest], "ni": nrest, "nsched": nf["sched"][nrest]},
    )
    m = pd.merge_asof(
        left.sort_values("sched", kind="stable"),
        right.sort_values("sched", kind="stable"),
        on="sched",
        by="job",
        direction="nearest",
        tolerance=tolerance,
    ).dropna(subset=["ni"])
    if not len(m):
        return li, ni
    m["d"] = (m["sched"] - m["nsched"]).abs()
    m = m.sort_values("d", kind="stable").drop_duplicates("ni")
    return np.r_[li, m["li"].to_numpy(dtype=_I64)], np.r_[ni, m["ni"].to_numpy(dtype=_I64)]


# --- 4. mismatches and labels -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class JobFlags:
    """Per job id arrays the labels need."""

    dom_l: np.ndarray
    dom_w: np.ndarray
    broadcast: np.ndarray
    misfire_skip: np.ndarray
    zones: Sequence[str]
    quarantined: np.ndarray  # per job: quarantined in the migration ledger (never migrated)
    timeout_ms: np.ndarray | None = None  # per job: its run timeout in ms (0: none)

    @staticmethod
    def build(n_jobs: int, info: Mapping[int, JobInfo], quarantined: Iterable[int] = ()) -> JobFlags:
        dom_l, dom_w = np.zeros(n_jobs, bool), np.zeros(n_jobs, bool)
        held = np.zeros(n_jobs, bool)
        held[np.fromiter(quarantined, dtype=_I64)] = True
        broadcast, skip = np.zeros(n_jobs, bool), np.ones(n_jobs, bool)
        zones = ["UTC"] * n_jobs
        timeout_ms = np.zeros(n_jobs, dtype=_I64)
        for jid, ji in info.items():
            dom = ji.dom_field
            dom_l[jid], dom_w[jid] = "L" in dom, "W" in dom and "L" not in dom
            broadcast[jid], skip[jid], zones[jid] = ji.broadcast, ji.misfire_skip, ji.time_zone
            timeout_ms[jid] = ji.timeout_s * 1000
        return JobFlags(
            dom_l=dom_l,
            dom_w=dom_w,
            broadcast=broadcast,
            misfire_skip=skip,
            zones=zones,
            quarantined=held,
            timeout_ms=timeout_ms,
        )

    @property
    def any_month_end(self) -> bool:
        return bool(self.dom_l.any() or self.dom_w.any())


def _short_month(job: np.ndarray, sched: np.ndarray, flags: JobFlags) -> np.ndarray:
    """True where the local month of the fire has fewer than 31 days."""
    out = np.zeros(len(job), dtype=bool)
    zone_of = np.asarray(flags.zones, dtype=object)[job]
    for zone in set(zone_of.tolist()):
        sel = np.flatnonzero(zone_of == zone)
        local = pd.to_datetime(sched[sel], unit="ms", utc=True).tz_convert(zone)
        out[sel] = np.asarray(local.days_in_month) < 31
    return out


def lineage_skips(job: np.ndarray, sched: np.ndarray, flags: JobFlags) -> np.ndarray:
    """Occurrences xxl-job 3.1-3.3 (cron lineage B) does not fire: L in day-of-month in a
    month shorter than 31 days; W in day-of-month (it skips some months, unpredictably)."""
    out = np.zeros(len(job), dtype=bool)
    if not len(job) or not flags.any_month_end:
        return out
    sel = np.flatnonzero(flags.dom_l[job] | flags.dom_w[job])
    out[sel] = flags.dom_w[job[sel]] | _short_month(job[sel], sched[sel], flags)
    return out


def _piece(
    kind: MismatchKind,
    job: np.ndarray,
    sched: np.ndarray,
    label: np.ndarray | int = NO_LABEL,
    a: np.ndarray | int = NONE,
    b: np.ndarray | int = NONE,
) -> pd.DataFrame:
    n = len(job)
    return pd.DataFrame(
        copy=False,
        data={
            "kind": np.full(n, KIND_CODE[kind], dtype=np.int8),
            "label": np.broadcast_to(np.asarray(label, dtype=np.int8), (n,)),
            "job": np.asarray(job, dtype=_I64),
            "sched": np.asarray(sched, dtype=_I64),
            "a": np.broadcast_to(np.asarray(a, dtype=_I64), (n,)),
            "b": np.broadcast_to(np.asarray(b, dtype=_I64), (n,)),
        },
    )


@dataclass(frozen=True, kw_only=True)
class ClassifyContext:
    settings: MatchSettings
    flags: JobFlags
    xxl: bool  # the legacy side is xxl-job: its lineage and misfire labels apply
    shadow: bool
    now_ms: int


def lag_of(f: Table) -> np.ndarray:
    d = f["dispatch"]
    return np.where(d == NONE, NONE, d - f["sched"])


def new_late(f: Table, s: MatchSettings, now_ms: int) -> np.ndarray:
    """Fires later than late_after, or not received at all that long after their time."""
    late = duration_ms(s.late_after)
    lag = lag_of(f)
    return np.where(lag == NONE, now_ms - f["sched"] > late, lag > late)


def _paired(lp: Table, np_: Table, ctx: ClassifyContext) -> list[pd.DataFrame]:
    s = ctx.settings
    job, sched = np_["job"], np_["sched"]
    lag_n, lag_l = lag_of(np_), lag_of(lp)
    late = new_late(np_, s, ctx.now_ms) & ~(lag_l > duration_ms(s.late_after))
    out = [_piece(MismatchKind.LATE_ON_NEW, job[late], sched[late], a=lag_n[late], b=lag_l[late])]
    ls, ns = lp["status"], np_["status"]
    if not ctx.shadow:
        bad_n = ((ns == FAIL) | (ns == TIMEOUT)) & (ls == SUCCESS)
        bad_l = ((ls == FAIL) | (ls == TIMEOUT)) & (ns == SUCCESS)
        out.append(_piece(MismatchKind.FAILED_ON_NEW, job[bad_n], sched[bad_n], a=ns[bad_n]))
        out.append(_piece(MismatchKind.FAILED_ON_LEGACY, job[bad_l], sched[bad_l], a=ls[bad_l]))
    if not ctx.shadow:
        la, na = lp["attempts"], np_["attempts"]
        finished = (ls != UNFINISHED) & (ns != UNFINISHED)
        tries = finished & (la != na)
        out.append(_piece(MismatchKind.RETRIES_DIFFER, job[tries], sched[tries], a=la[tries], b=na[tries]))
    li, ni = lp["items"], np_["items"]
    diff = li != ni
    label = np.where(ctx.flags.broadcast[job[diff]], LABEL_CODE[Label.BROADCAST_ITEMS], NO_LABEL)
    out.append(_piece(MismatchKind.ITEMS_DIFFER, job[diff], sched[diff], label, a=li[diff], b=ni[diff]))
    return out


def _new_only(nf: Table, expected: np.ndarray, ctx: ClassifyContext) -> list[pd.DataFrame]:
    job, sched, lag, items = nf["job"], nf["sched"], lag_of(nf), nf["items"]
    exp, extra = np.flatnonzero(expected), np.flatnonzero(~expected)
    label = np.full(len(exp), LABEL_CODE[Label.LEGACY_MISSED], dtype=np.int8)
    if ctx.xxl and len(exp):
        j, t = job[exp], sched[exp]
        misfire = ctx.flags.misfire_skip[j] & (lag[exp] > duration_ms(ctx.settings.legacy_misfire_threshold))
        label = np.where(misfire, LABEL_CODE[Label.MISFIRE_THRESHOLD], label)
        label = np.where(lineage_skips(j, t, ctx.flags), LABEL_CODE[Label.XXL_MONTH_END], label).astype(np.int8)
    return [
        _piece(MismatchKind.MISSING_ON_LEGACY, job[exp], sched[exp], label, a=lag[exp], b=items[exp]),
        _piece(MismatchKind.EXTRA_ON_NEW, job[extra], sched[extra], a=lag[extra], b=0),
    ]


def _unpaired(n: int, paired: np.ndarray) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    mask[paired] = False
    return np.flatnonzero(mask)


def classify(
    legacy: SideFires,
    new: SideFires,
    unscheduled: Table,
    exp_fk: np.ndarray,
    skipped_fk: np.ndarray,
    ctx: ClassifyContext,
    keys: Keys,
    fenced_fk: np.ndarray | None = None,
    stopped_fk: np.ndarray | None = None,
) -> tuple[pd.DataFrame, int, int]:
    """(mismatch frame, paired fires, reference occurrences). `fenced_fk`: occurrences the
    new side skipped deliberately, by a rollback fence or an operator's stop (`stopped_fk`,
    a subset); the legacy side fires them, which is no mismatch against the new side
    (labelled rollback_fence or operator_stop, out of the rates' reference)."""
    lf, nf = legacy.fires, new.fires
    li, ni = pair(lf, nf, duration_ms(ctx.settings.pair_tolerance))
    cols = ("job", "sched", "dispatch", "status", "items", "attempts")
    pieces = _paired(lf.take(li, cols), nf.take(ni, cols), ctx)
    lo = lf.take(_unpaired(len(lf), li), ("fk", "job", "sched", "dispatch", "items"))
    # a legacy fire of a job the migrator quarantined: never handed over, so not missing on
    # the new side (labelled; b carries its calls instead of the misfire-skip flag)
    held = ctx.flags.quarantined[lo["job"]]
    fenced = ~held & member(_NO_KEYS if fenced_fk is None else fenced_fk, lo["fk"])
    stopped = fenced & member(_NO_KEYS if stopped_fk is None else stopped_fk, lo["fk"])
    deliberate = np.where(stopped, LABEL_CODE[Label.OPERATOR_STOP], LABEL_CODE[Label.ROLLBACK_FENCE])
    label = np.where(held, LABEL_CODE[Label.NOT_MIGRATED], np.where(fenced, deliberate, NO_LABEL))
    why = np.where(
        stopped, B_STOPPED, np.where(fenced, B_FENCED, member(skipped_fk, lo["fk"]).astype(_I64) * B_MISFIRE_SKIP)
    )
    pieces.append(
        _piece(
            MismatchKind.MISSING_ON_NEW,
            lo["job"],
            lo["sched"],
            label.astype(np.int8),
            a=lag_of(lo),
            b=np.where(held, lo["items"], why),
        )
    )
    no = nf.take(_unpaired(len(nf), ni), ("fk", "job", "sched", "dispatch", "items"))
    pieces += _new_only(no, member(exp_fk, no["fk"]), ctx)
    doubled = nf.take(np.flatnonzero(nf["dups"] > 0), ("job", "sched", "dispatch", "dups"))
    pieces.append(
        _piece(MismatchKind.EXTRA_ON_NEW, doubled["job"], doubled["sched"], a=lag_of(doubled), b=doubled["dups"])
    )
    fired = sorted_unique(np.concatenate((lf["fk"], nf["fk"])))
    neither = exp_fk[~member(fired, exp_fk)]
    nj = keys.job(neither)
    held_n = ctx.flags.quarantined[nj]
    pieces.append(
        _piece(
            MismatchKind.MISSING_ON_BOTH,
            nj,
            keys.sched(neither),
            np.where(held_n, LABEL_CODE[Label.NOT_MIGRATED], NO_LABEL),
        )
    )
    pieces.append(
        _piece(
            MismatchKind.UNSCHEDULED_ON_LEGACY,
            unscheduled["job"],
            unscheduled["trig"],
            LABEL_CODE[Label.LEGACY_UNSCHEDULED],
            a=unscheduled["kind"],
        )
    )
    frame = pd.concat(pieces, ignore_index=True)
    # occurrences only a quarantined job's legacy side has (or neither) are not the new
    # side's to fire: they stay out of the rates' reference
    # nor are the ones a rollback fence handed back to legacy
    not_handed = int(held.sum()) + int(held_n.sum()) + int(fenced.sum())
    return frame, len(li), len(lf) + len(nf) - len(li) + len(neither) - not_handed


# --- the pipeline ---------------------------------------------------------------------------


def unscheduled_rows(leg: Table, sched: np.ndarray, start: int, end: int) -> Table:
    trig = leg["trig"]
    sel = np.flatnonzero((sched == NONE) & (trig >= start) & (trig < end))
    kind = leg["kind"][sel]
    return Table(
        {
            "job": leg["job"][sel],
            "trig": trig[sel],
            "kind": np.where((kind == MANUAL) | (kind == MISFIRE), kind, SCHEDULE),
        }
    )


def expected_keys(exp: Table, start: int, end: int, keys: Keys) -> np.ndarray:
    sched = exp["sched"]
    sel = np.flatnonzero((sched >= start) & (sched < end))
    return sorted_unique(keys.fire(exp["job"][sel], sched[sel]))


def prepare_legacy(
    leg: Table, exp: Table, start: int, end: int, s: MatchSettings, keys: Keys
) -> tuple[SideFires, Table]:
    """The legacy side of one window: fires by nominal time, and the unscheduled rows."""
    sched = assign_nominal(leg, exp, s)
    inside = np.flatnonzero((sched != NONE) & (sched >= start) & (sched < end))
    items = legacy_items(leg, sched, inside, keys)
    return SideFires(items, fires_of(items, keys)), unscheduled_rows(leg, sched, start, end)


def prepare_new(new: Table, start: int, end: int, keys: Keys) -> tuple[SideFires, np.ndarray, np.ndarray, np.ndarray]:
    """The new side of one window: fires, and the keys of fires skipped by misfire policy,
    deliberately (a rollback fence or an operator's stop), and by an operator's stop alone
    (none of them ran a handler: not fires of the new side)."""
    sched, status = new["sched"], new["status"]
    inside = (sched >= start) & (sched < end)
    skipped = np.flatnonzero(inside & (status == SKIPPED))
    stop_skip = inside & (status == STOPPED)
    fenced = np.flatnonzero((inside & (status == FENCED)) | stop_skip)
    stopped = np.flatnonzero(stop_skip)
    items = new_items(
        new, np.flatnonzero(inside & (status != SKIPPED) & (status != FENCED) & (status != STOPPED)), keys
    )
    skipped_fk = sorted_unique(keys.fire(new["job"][skipped], sched[skipped]))
    fenced_fk = sorted_unique(keys.fire(new["job"][fenced], sched[fenced]))
    stopped_fk = sorted_unique(keys.fire(new["job"][stopped], sched[stopped]))
    return SideFires(items, fires_of(items, keys)), skipped_fk, fenced_fk, stopped_fk


def match(
    leg: Table, new: Table, exp: Table, *, start: int, end: int, n_jobs: int, ctx: ClassifyContext
) -> MatchResult:
    """The whole matching for one window [start, end) in epoch ms."""
    keys = Keys(origin=start, job_bits=_bits(n_jobs))
    legacy, unsched = prepare_legacy(leg, exp, start, end, ctx.settings, keys)
    newf, skipped_fk, fenced_fk, stopped_fk = prepare_new(new, start, end, keys)
    exp_fk = expected_keys(exp, start, end, keys)
    frame, paired, reference = classify(legacy, newf, unsched, exp_fk, skipped_fk, ctx, keys, fenced_fk, stopped_fk)
    return MatchResult(
        legacy=legacy,
        new=newf,
        unscheduled=unsched,
        mismatches=frame,
        expected_fk=exp_fk,
        paired=paired,
        reference=reference,
        skipped_new=len(skipped_fk),
        fenced_fk=fenced_fk,
    )
