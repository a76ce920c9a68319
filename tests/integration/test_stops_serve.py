"""Operators' stops on the embedded default as an operator meets it (issue 27, "what was
seen" 1): `switchyard serve` on SQLite with the in-process bus and a 60 s lookahead, and
the stop commands run as separate processes against the same store, without `--bus`, so
every stop reaches the executor through serve's relay.

The promise checked exactly, per job: no run for an occurrence at or after S (the `at` the
command printed) until the lift; from R on, every occurrence runs exactly once (a cron
every second: no gap, no double); a FIRE_ONCE_NOW trigger runs once at R for its paused
window; a cancelled one-shot published ahead never runs; a business freeze stops that
business only; a restart of serve while stops stand re-sends nothing they cover."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from scheduler_core.model import Job, JobCode, MisfirePolicy, Trigger, TriggerKind
from scheduler_core.stops import is_stop_skip
from scheduler_core.times import to_ms
from switchyard.wiring import open_store
from tests.integration.test_serve_embedded import REPO, _db_init, _free_port, _runs, _start, _stop, _until

UTC = timezone.utc


def _cli(url: str, *args: str) -> dict[str, object]:
    """One stop command, as an operator runs it (no --bus: serve relays it); its JSON."""
    res = subprocess.run(
        [sys.executable, "-m", "switchyard", *args, "--url", url, "--json", "--actor", "ops"],
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    out: dict[str, object] = json.loads(next(line for line in res.stdout.splitlines() if line.startswith("{")))
    return out


def _at_ms(out: dict[str, object]) -> int:
    return to_ms(datetime.fromisoformat(str(out["at"])))


def _every_second_from(ts: list[int], first: int) -> bool:
    """`ts` is each whole second from the first at or after `first` to its last, once."""
    start = -(-first // 1000) * 1000
    return bool(ts) and ts == list(range(start, ts[-1] + 1, 1000))


def test_serve_stops_pause_cancel_freeze_hold_across_a_restart_and_resume_runs_each_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'center.db'}"
    _db_init(url)
    store = open_store(url)
    t0 = (store.clock.now() + timedelta(seconds=2)).replace(microsecond=0)
    for code, biz in (("tick", "alpha"), ("rate", "alpha"), ("once", "alpha"), ("btick", "beta")):
        store.put_job(Job(job_code=JobCode(code), biz_code=biz, handler="h"))
    every_second = "* * * * * ?"
    store.add_triggers(
        [
            Trigger(
                job_code=JobCode("tick"),
                biz_code="alpha",
                kind=TriggerKind.CRON,
                cron=every_second,
                next_fire_at=t0,
                misfire_policy=MisfirePolicy.SKIP,  # xxl-job's DO_NOTHING: the paused window stays skipped
            ),
            Trigger(
                job_code=JobCode("btick"),
                biz_code="beta",
                kind=TriggerKind.CRON,
                cron=every_second,
                next_fire_at=t0,
                misfire_policy=MisfirePolicy.SKIP,
            ),
            Trigger(
                job_code=JobCode("rate"),
                biz_code="alpha",
                kind=TriggerKind.FIXED_RATE,
                interval=timedelta(seconds=1),
                next_fire_at=t0 + timedelta(milliseconds=500),
                misfire_policy=MisfirePolicy.FIRE_ONCE_NOW,
            ),
        ]
    )
    run_log, out = tmp_path / "runs.jsonl", tmp_path / "serve.log"
    metrics, console = _free_port(), _free_port()

    def at(job: str) -> list[int]:
        return sorted(int(r["T"]) for r in _runs(run_log) if r["job"] == job)

    proc = _start(url, out, run_log, metrics, console)
    try:
        _until("two runs of every repeating job", lambda: all(len(at(j)) >= 2 for j in ("tick", "btick", "rate")), proc)
        # published ahead (60 s lookahead) long before its time: the cancel must reach it.
        # Added once serve runs (added with the others, a loaded machine's slow start-up
        # and CLI start used up its 25 s), and the premise checked: the cancel before T
        (once,) = store.add_triggers(
            [
                Trigger(
                    job_code=JobCode("once"),
                    biz_code="alpha",
                    kind=TriggerKind.ONCE,
                    next_fire_at=(store.clock.now() + timedelta(seconds=25)).replace(microsecond=0),
                )
            ]
        )
        _until(
            "the one-shot published ahead",
            lambda: any(r.job_code == "once" for r in store.fired_between(None, t0, t0 + timedelta(minutes=10))),
            proc,
        )
        cancel = _cli(url, "trigger", "cancel", "--job", "once", "--reason", "wrong amount")
        assert _at_ms(cancel) < to_ms(once.next_fire_at), f"the cancel came after the one-shot's T: {cancel}"
        assert cancel["changed"] and int(str(cancel["records"])) == 1, cancel  # the one published ahead
        freeze = _cli(url, "freeze", "--business", "beta", "--reason", "incident 12")
        # the freeze of beta leaves alpha running
        _until(
            "two ticks of alpha after beta's freeze",
            lambda: len([t for t in at("tick") if t >= _at_ms(freeze)]) >= 2,
            proc,
        )
        pause = _cli(url, "trigger", "pause", "--job", "tick", "--reason", "downstream down")
        pause_rate = _cli(url, "trigger", "pause", "--job", "rate", "--reason", "downstream down")
        for cmd in (cancel, freeze, pause, pause_rate):
            reach = cmd["reach"]
            assert isinstance(reach, dict) and reach["relayed_by"] == "serve serve-test", cmd
        last_s = max(_at_ms(freeze), _at_ms(pause), _at_ms(pause_rate))
        _until("three seconds into the stops", lambda: to_ms(store.clock.now()) > last_s + 3000, proc, timeout=30)
        # a restart while the stops stand: what the first process published is not sent again
        assert _stop(proc) == 0, out.read_text()[-3000:]
        proc = _start(url, out, run_log, metrics, console)
        _until("the restarted serve", lambda: out.read_text().count("published again from the store") >= 2, proc)
        _until("three seconds of the restarted serve", lambda: to_ms(store.clock.now()) > last_s + 8000, proc)
        resume = _cli(url, "trigger", "resume", "--job", "tick")
        unfreeze = _cli(url, "unfreeze", "--business", "beta")
        resume_rate = _cli(url, "trigger", "resume", "--job", "rate")
        assert resume_rate["run_once"], resume_rate  # fire_once_now: one run at R for the window
        assert not resume["run_once"], resume  # skip: nothing for the window
        r_tick, r_beta, r_rate = _at_ms(resume), _at_ms(unfreeze), _at_ms(resume_rate)
        _until(
            "three seconds of runs after every lift",
            lambda: (
                max(at("tick"), default=0) >= r_tick + 3000
                and max(at("btick"), default=0) >= r_beta + 3000
                and max(at("rate"), default=0) >= r_rate + 3000
            ),
            proc,
        )
    finally:
        assert _stop(proc) == 0, out.read_text()[-3000:]

    runs = _runs(run_log)
    twice = [k for k, n in Counter((r["job"], r["T"], r["item"]) for r in runs).items() if n > 1]
    assert twice == [], f"run twice: {twice}"
    s_tick, s_beta, s_rate = _at_ms(pause), _at_ms(freeze), _at_ms(pause_rate)
    assert [t for t in at("tick") if s_tick <= t < r_tick] == [], "tick ran inside its pause"
    assert [t for t in at("btick") if s_beta <= t < r_beta] == [], "beta ran inside its freeze"
    assert [t for t in at("rate") if s_rate <= t < r_rate] == [], "rate ran inside its pause"
    assert at("once") == [], "the cancelled one-shot ran"
    # from R on: each occurrence exactly once
    assert _every_second_from([t for t in at("tick") if t >= r_tick], r_tick), at("tick")
    assert _every_second_from([t for t in at("btick") if t >= r_beta], r_beta), at("btick")
    rate_after = [t for t in at("rate") if t >= r_rate]
    assert rate_after[0] == r_rate, f"no run once at R = {r_rate}: {rate_after[:3]}"
    # the stopped commands published ahead are recorded skipped, with the operator's reason
    recs = store.fired_between(
        None, datetime.fromtimestamp(s_tick / 1000, UTC), datetime.fromtimestamp(r_tick / 1000, UTC)
    )
    stopped_tick = [r for r in recs if r.job_code == "tick"]
    assert stopped_tick and all(is_stop_skip(r.state, r.message) for r in stopped_tick), stopped_tick[:3]
    assert all("downstream down" in r.message for r in stopped_tick)
    (once_rec,) = [r for r in store.fired_between(None, t0, t0 + timedelta(minutes=10)) if r.job_code == "once"]
    assert is_stop_skip(once_rec.state, once_rec.message) and "wrong amount" in once_rec.message
    assert "Traceback" not in out.read_text()
    store.engine.dispose()
